"""to_arrow / to_dataframe: the connector's schema, values round-trip (bodies, property maps, UTC times), order."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

import pyarrow as pa
import pytest

import rxhubs.spark
from rxhubs import Event, EventBatch, PartitionContext
from rxhubs.spark import SCHEMA, arrow_schema, property_to_str, to_arrow, to_dataframe

CTX0 = PartitionContext("ns.servicebus.windows.net", "telemetry", "$Default", "0")
CTX3 = PartitionContext("ns.servicebus.windows.net", "telemetry", "$Default", "3")
PLUS2 = dt.timezone(dt.timedelta(hours=2))
MOMENT = dt.datetime(2026, 3, 1, 12, 30, 15, 123456, tzinfo=dt.UTC)


def tricky_batches() -> list[EventBatch]:
    props: dict[str, Any] = {
        "text": "héllo",
        "int": 42,
        "float": 2.5,
        "bool": False,
        "none": None,
        "bytes": b"\x00\xff",
        "list": [1, "a", None],
        "map": {"k": {"n": 1}},
        "when": dt.datetime(2026, 3, 1, 14, 0, tzinfo=PLUS2),
        "id": uuid.UUID(int=1),
    }
    first = (
        Event(b"\x00\x01\xfe\xff", 10, "1000", MOMENT, "key-1", props, {"x-opt-publisher": "pub-a", "x-opt-lag": 7}),
        Event(b"", 11, "1100", MOMENT.astimezone(PLUS2)),  # same instant, another zone
        Event("ünïcode".encode(), 12, "1200", dt.datetime(2026, 3, 1, 12, 30)),  # naive: UTC
    )
    second = (Event(b"three", 5, "500", MOMENT, properties={"text": "x"}),)
    return [EventBatch(CTX0, first), EventBatch(CTX3, ()), EventBatch(CTX3, second)]


# -- pure Arrow (no Spark) ---------------------------------------------------------------------------------


def test_property_values_become_text_by_documented_rules() -> None:
    assert property_to_str("héllo") == "héllo"
    assert property_to_str(None) is None
    assert [property_to_str(v) for v in (42, 2.5, True, False)] == ["42", "2.5", "true", "false"]
    assert property_to_str(b"\x00\xff") == "AP8="
    assert property_to_str(dt.datetime(2026, 3, 1, 14, 0, tzinfo=PLUS2)) == "2026-03-01T12:00:00+00:00"
    assert property_to_str(dt.datetime(2026, 3, 1, 14, 0)) == "2026-03-01T14:00:00+00:00"
    assert property_to_str(uuid.UUID(int=1)) == "00000000-0000-0000-0000-000000000001"
    assert property_to_str({"k": [1, "a", None, b"\x01"], 2: {"n": 1.5}}) == '{"k":[1,"a",null,"AQ=="],"2":{"n":1.5}}'
    assert property_to_str((1, 2)) == "[1,2]"


def test_to_arrow_builds_the_schema_and_the_values() -> None:
    table = to_arrow(tricky_batches())
    assert table.schema.equals(arrow_schema())
    assert table.num_rows == 4
    rows = table.to_pylist()
    assert [r["body"] for r in rows] == [b"\x00\x01\xfe\xff", b"", "ünïcode".encode(), b"three"]
    assert [(r["partition"], r["sequenceNumber"], r["offset"]) for r in rows] == [
        ("0", 10, "1000"),
        ("0", 11, "1100"),
        ("0", 12, "1200"),
        ("3", 5, "500"),
    ]
    assert dict(rows[0]["properties"]) == {
        "text": "héllo",
        "int": "42",
        "float": "2.5",
        "bool": "false",
        "none": None,
        "bytes": "AP8=",
        "list": '[1,"a",null]',
        "map": '{"k":{"n":1}}',
        "when": "2026-03-01T12:00:00+00:00",
        "id": "00000000-0000-0000-0000-000000000001",
    }
    assert rows[0]["publisher"] == "pub-a" and rows[1]["publisher"] is None
    assert dict(rows[0]["systemProperties"]) == {"x-opt-publisher": "pub-a", "x-opt-lag": "7"}
    assert rows[0]["partitionKey"] == "key-1" and rows[3]["partitionKey"] is None
    assert rows[1]["properties"] == [] and dict(rows[3]["properties"]) == {"text": "x"}
    assert {(r["consumerGroup"], r["eventHubName"]) for r in rows} == {("$Default", "telemetry")}
    micros = table.column("enqueuedTime").cast(pa.int64()).to_pylist()
    assert micros[0] == micros[1] == int(MOMENT.timestamp()) * 1_000_000 + 123456
    assert micros[2] == int(dt.datetime(2026, 3, 1, 12, 30, tzinfo=dt.UTC).timestamp()) * 1_000_000


def test_to_arrow_of_nothing_is_an_empty_table_with_the_schema() -> None:
    for empty in ([], [EventBatch(CTX0, ())]):
        table = to_arrow(empty)
        assert table.num_rows == 0 and table.schema.equals(arrow_schema())


def test_a_shared_properties_mapping_is_converted_once_per_table_but_per_event_in_the_output() -> None:
    shared = {"kind": "reading"}
    events = tuple(Event(b"x", i, str(i), MOMENT, properties=shared) for i in range(3))
    rows = to_arrow([EventBatch(CTX0, events), EventBatch(CTX0, (Event(b"y", 3, "3", MOMENT, properties={}),))])
    assert [dict(p) for p in rows.column("properties").to_pylist()] == [shared, shared, shared, {}]


def test_one_batch_may_be_given_alone() -> None:
    assert to_arrow(tricky_batches()[0]).num_rows == 3


def test_the_ddl_schema_names_the_connector_columns_in_order() -> None:
    assert [c.split(" ")[0] for c in SCHEMA.split(", ")] == [
        "body",
        "partition",
        "offset",
        "sequenceNumber",
        "enqueuedTime",
        "publisher",
        "partitionKey",
        "properties",
        "systemProperties",
        "consumerGroup",
        "eventHubName",
    ]
    assert arrow_schema().names == [name for name, _ in rxhubs.spark.COLUMNS]


# -- through a real SparkSession ---------------------------------------------------------------------------


@pytest.mark.spark
def test_to_dataframe_has_the_schema_and_round_trips_the_values(spark: Any) -> None:
    from pyspark.sql import functions as sf
    from pyspark.sql.types import StructType

    df = to_dataframe(spark, tricky_batches())
    assert df.schema == StructType.fromDDL(SCHEMA)
    rows = df.select(
        "body",
        "partition",
        "sequenceNumber",
        "properties",
        "systemProperties",
        "publisher",
        "partitionKey",
        sf.unix_micros("enqueuedTime").alias("micros"),
        sf.date_format("enqueuedTime", "yyyy-MM-dd HH:mm:ss.SSSSSS").alias("utc"),
    ).collect()
    assert [bytes(r.body) for r in rows] == [b"\x00\x01\xfe\xff", b"", "ünïcode".encode(), b"three"]
    assert [(r.partition, r.sequenceNumber) for r in rows] == [("0", 10), ("0", 11), ("0", 12), ("3", 5)]
    assert rows[0].properties["bytes"] == "AP8=" and rows[0].properties["none"] is None
    assert rows[0].properties["when"] == "2026-03-01T12:00:00+00:00"
    assert rows[0].systemProperties == {"x-opt-publisher": "pub-a", "x-opt-lag": "7"}
    assert (rows[0].publisher, rows[0].partitionKey) == ("pub-a", "key-1")
    assert rows[0].micros == rows[1].micros == int(MOMENT.timestamp()) * 1_000_000 + 123456
    assert spark.conf.get("spark.sql.session.timeZone") == "UTC"
    assert [r.utc for r in rows[:3]] == [
        "2026-03-01 12:30:15.123456",
        "2026-03-01 12:30:15.123456",
        "2026-03-01 12:30:00.000000",
    ]
    back = df.toArrow()
    assert (
        back.column("enqueuedTime")
        .cast(pa.int64())
        .equals(to_arrow(tricky_batches()).column("enqueuedTime").cast(pa.int64()))
    )


@pytest.mark.spark
def test_to_dataframe_keeps_the_order_of_events_within_a_partition(spark: Any) -> None:
    batches = [
        EventBatch(ctx, tuple(Event(b"e", s, str(s), MOMENT) for s in range(start, start + 50)))
        for start in (0, 50, 100)
        for ctx in (CTX0, CTX3)
    ]
    rows = to_dataframe(spark, batches).select("partition", "sequenceNumber").collect()
    for partition in ("0", "3"):
        assert [r.sequenceNumber for r in rows if r.partition == partition] == list(range(150))


@pytest.mark.spark
def test_to_dataframe_names_pysparks_arrow_entry_point_in_the_sessions_py4j_view(spark: Any) -> None:
    # createDataFrame(pyarrow.Table) looks PythonSQLUtils up by its short name; a single import finds it at once
    # (dir of a Py4J view lists its single imports, not pyspark's package imports)
    df = to_dataframe(spark, tricky_batches())
    assert "PythonSQLUtils" in dir(spark._jvm)
    assert df.count() == 4


@pytest.mark.spark
def test_to_dataframe_of_nothing_is_empty_with_the_schema(spark: Any) -> None:
    from pyspark.sql.types import StructType

    df = to_dataframe(spark, [EventBatch(CTX0, ())])
    assert df.count() == 0 and df.schema == StructType.fromDDL(SCHEMA)


@pytest.mark.spark
def test_get_or_create_session_returns_the_given_or_the_running_session(spark: Any) -> None:
    assert rxhubs.spark.get_or_create_session(spark) is spark
    assert rxhubs.spark.get_or_create_session() is spark


@pytest.mark.spark
def test_the_local_session_binds_loopback_and_its_python_workers_run_this_interpreter(spark: Any) -> None:
    import sys

    assert spark.conf.get("spark.driver.host") == "127.0.0.1"
    assert spark.conf.get("spark.sql.execution.arrow.pyspark.enabled") == "true"

    def worker_python(_: Any) -> tuple[str, bool]:
        import importlib.util
        import sys

        return sys.executable, importlib.util.find_spec("pyarrow") is not None

    assert spark.sparkContext.parallelize([0], 1).map(worker_python).collect() == [(sys.executable, True)]
