"""Writes to Event Hubs (``df.write`` / ``df.writeStream`` ``.format("eventhubs")``) against the emulator.

The writer's task side runs here first without Spark jobs (``write()`` as an executor calls it, on Arrow
batches); then real local SparkSession queries: a DataFrame written and read back row for row, and a streaming
query from hub A to hub B killed (kill -9) mid-stream and restarted from its checkpoint with nothing lost.
"""

from __future__ import annotations

import asyncio
import os
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import types as t

import rxhubs
from rxhubs.emulator import BackgroundEmulator
from rxhubs.errors import ConfigurationError, PublishError
from rxhubs.spark._datasource import EventHubsDataSource
from rxhubs.spark._write import EventHubsCommitMessage, EventHubsStreamWriter, EventHubsWriter

pytestmark = pytest.mark.spark

SECRET = "c2VjcmV0LWtleS1mb3ItdGVzdHM="
FAKE = f"Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=root;SharedAccessKey={SECRET};EntityPath=h"
PROPS = t.MapType(t.StringType(), t.StringType())


def schema(*fields: tuple[str, t.DataType]) -> t.StructType:
    return t.StructType([t.StructField(name, kind) for name, kind in fields])


def received(conn_str: str, partitions: int) -> dict[str, list[Any]]:
    async def go() -> dict[str, list[Any]]:
        out: dict[str, list[Any]] = {}
        async with rxhubs.EventHub.from_connection_string(conn_str) as hub:
            for p in map(str, range(partitions)):
                props = await hub.get_partition_properties(p)
                want = 0 if props.is_empty else props.last_enqueued_sequence_number + 1
                async with hub.receiver(p, start=rxhubs.Position.earliest()) as receiver:
                    events: list[Any] = []
                    while len(events) < want:
                        events += await receiver.receive_batch(want - len(events), max_wait=5.0)
                out[p] = events
        return out

    return asyncio.run(go())


def official(conn_str: str, partitions: int) -> dict[str, list[Any]]:
    """Every event of each partition as the official azure-eventhub client reads it (not rxhubs' own reader)."""
    from azure.eventhub import EventHubConsumerClient

    out: dict[str, list[Any]] = {}
    for p in map(str, range(partitions)):
        client = EventHubConsumerClient.from_connection_string(conn_str, consumer_group="$Default")
        with client:
            props = client.get_partition_properties(p)
            want = 0 if props["is_empty"] else props["last_enqueued_sequence_number"] + 1
            events: list[Any] = []
            if want:
                def on_batch(context: Any, batch: list[Any], events: list[Any] = events, want: int = want,
                             client: Any = client) -> None:
                    events.extend(batch)
                    if len(events) >= want:
                        client.close()

                client.receive_batch(on_batch, partition_id=p, starting_position="-1", max_wait_time=5.0)
        out[p] = events
    return out


@pytest.mark.parametrize(
    ("fields", "overwrite", "fragment"),
    [
        ((("body", t.BinaryType()), ("partitionId", t.StringType()), ("partitionKey", t.StringType())), False,
         "not both"),
        ((("body", t.BinaryType()), ("partition", t.StringType()), ("partitionKey", t.StringType())), False,
         "a DataFrame read from a hub has both"),
        ((("payload", t.BinaryType()),), False, "needs a body column"),
        ((("body", t.LongType()),), False, "body must be binary or string, not bigint"),
        ((("body", t.StringType()), ("properties", t.MapType(t.StringType(), t.LongType()))), False,
         "properties must be map<string,string>"),
        ((("body", t.StringType()),), True, "use mode\\('append'\\)"),
    ],
)
def test_bad_columns_and_modes_fail_at_planning(fields: Any, overwrite: bool, fragment: str) -> None:
    with pytest.raises(ConfigurationError, match=fragment) as info:
        EventHubsDataSource({"connectionString": FAKE}).writer(schema(*fields), overwrite)
    assert "\n" not in str(info.value)
    with pytest.raises(ConfigurationError, match="unknown eventhubs write option"):
        EventHubsDataSource({"connectionString": FAKE, "startingPosition": "x"}).writer(
            schema(("body", t.BinaryType())), False)
    writer = EventHubsDataSource({"connectionString": FAKE}).streamWriter(schema(("body", t.BinaryType())), False)
    assert SECRET not in repr(writer) and SECRET not in repr(pickle.loads(pickle.dumps(writer)))


def test_a_task_groups_rows_by_partition_and_names_the_row_it_cannot_send(emulator_factory: Any) -> None:
    emulator: BackgroundEmulator = emulator_factory(hubs={"out": 3})
    conn_str = emulator.connection_string("out")
    fields = (("body", t.StringType()), ("partitionId", t.IntegerType()), ("properties", PROPS))
    writer = EventHubsDataSource({"connectionString": conn_str}).writer(schema(*fields), False)
    batch = pa.RecordBatch.from_pydict({
        "body": [f"e{i}" for i in range(9)],
        "partitionId": [i % 3 for i in range(9)],
        "properties": [[("n", str(i))] for i in range(8)] + [None],
    }, schema=pa.schema([("body", pa.string()), ("partitionId", pa.int32()),
                         ("properties", pa.map_(pa.string(), pa.string()))]))
    message = pickle.loads(pickle.dumps(writer)).write(iter([batch, batch.slice(0, 3)]))  # as an executor
    assert message == EventHubsCommitMessage(0, 12)
    got = received(conn_str, 3)
    assert [e.body for e in got["1"]] == [b"e1", b"e4", b"e7", b"e1"]  # in order within a partition
    assert [e.properties for e in got["2"]] == [{"n": "2"}, {"n": "5"}, {}, {"n": "2"}]

    big = pa.RecordBatch.from_pydict({"body": [b"ok", b"ok", b"x" * (2 * 1024 * 1024), b"later"]})
    body_only = EventHubsDataSource({"connectionString": conn_str}).writer(schema(("body", t.BinaryType())), False)
    with pytest.raises(ConfigurationError, match=r"row 12 of write task 0: an event of 2097152 bytes is larger"):
        body_only.write(iter([pa.RecordBatch.from_pydict({"body": [b"a"] * 10}), big]))
    with pytest.raises(ConfigurationError, match=r"row 1 of write task 0: body is null"):
        body_only.write(iter([pa.RecordBatch.from_pydict({"body": [b"a", None]})]))
    routed = EventHubsDataSource({"connectionString": conn_str}).writer(
        schema(("body", t.BinaryType()), ("partitionId", t.StringType())), False)
    with pytest.raises(PublishError, match=r"rows from 1 of write task 0 \(partition '7'\)"):
        routed.write(iter([pa.RecordBatch.from_pydict({"body": [b"a", b"b"], "partitionId": ["0", "7"]})]))

    stream = EventHubsDataSource({"connectionString": conn_str}).streamWriter(schema(("body", t.BinaryType())), False)
    assert isinstance(stream, EventHubsStreamWriter) and not isinstance(stream, EventHubsWriter)
    stream.commit([EventHubsCommitMessage(0, 5), EventHubsCommitMessage(1, 2)], 4)
    stream.commit([EventHubsCommitMessage(0, 5), EventHubsCommitMessage(1, 2)], 4)  # a rerun of batch 4
    stream.commit([EventHubsCommitMessage(0, 1), None], 5)
    assert stream.committed == {4: 7, 5: 1}


@pytest.mark.timeout(300)
def test_a_dataframe_round_trips_through_the_hub_row_for_row(spark: Any, emulator_factory: Any) -> None:
    emulator: BackgroundEmulator = emulator_factory(hubs={"rt": 4})
    conn_str = emulator.connection_string("rt")
    rows = [(f"body-{i}".encode(), f"device-{i % 5}", {"i": str(i), "kind": "reading"}) for i in range(400)]
    df = spark.createDataFrame(rows, "body binary, partitionKey string, properties map<string,string>")
    df.repartition(3).write.format("eventhubs").option("connectionString", conn_str).mode("append").save()

    back = spark.read.format("eventhubs").option("connectionString", conn_str).option("minPartitions", "6").load()
    got = back.select("body", "partitionKey", "properties", "partition").collect()
    assert sorted((bytes(r.body), r.partitionKey, dict(r.properties)) for r in got) == sorted(rows)
    by_key: dict[str, set[str]] = {}
    for r in got:
        by_key.setdefault(r.partitionKey, set()).add(r.partition)
    assert all(len(parts) == 1 for parts in by_key.values()), by_key  # a key lands on one partition
    assert back.rdd.getNumPartitions() >= 4  # the ranges were split across tasks

    # and as the official client reads the hub: each row's key and properties, each key on one partition
    seen = [(e.body_as_str().encode(), (e.partition_key or b"").decode(),
             {k.decode(): v.decode() if isinstance(v, bytes) else v for k, v in (e.properties or {}).items()}, p)
            for p, events in official(conn_str, 4).items() for e in events]
    assert sorted(row[:3] for row in seen) == sorted(rows)
    official_keys: dict[str, set[str]] = {}
    for _, key, _, p in seen:
        official_keys.setdefault(key, set()).add(p)
    assert official_keys == by_key  # the same partition for each key, whoever reads
    assert len({p for parts in by_key.values() for p in parts}) > 1  # and the keys were spread, not all on one

    with pytest.raises(Exception, match="give a partition or a partitionKey column, not both"):
        back.write.format("eventhubs").option("connectionString", conn_str).mode("append").save()


@pytest.mark.timeout(500)
def test_a_stream_from_hub_a_to_hub_b_killed_9_and_restarted_from_its_checkpoint_loses_nothing(
    spark: Any, emulator_factory: Any, tmp_path: Path
) -> None:
    from tests.spark._relay_driver import relay

    emulator: BackgroundEmulator = emulator_factory(hubs={"a": 2, "b": 2})
    a, b = emulator.connection_string("a"), emulator.connection_string("b")

    def send(start: int, count: int) -> None:
        async def go() -> None:
            async with rxhubs.EventHub.from_connection_string(a) as hub:
                await hub.send([str(i) for i in range(start, start + count)], partition_key="k")

        asyncio.run(go())

    send(0, 300)
    offsets, commits = tmp_path / "chk" / "offsets", tmp_path / "chk" / "commits"
    env = {**os.environ, "RXHUBS_TEST_SOURCE": a, "RXHUBS_TEST_TARGET": b}
    proc = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("_relay_driver.py")), str(tmp_path / "chk")],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    killed = None
    try:
        while proc.poll() is None:  # kill -9 once a second micro-batch is logged but not committed
            done = {f.name for f in commits.glob("[0-9]*")} if commits.exists() else set()
            logged = {f.name for f in offsets.glob("[0-9]*")} if offsets.exists() else set()
            pending = sorted(logged - done, key=int)
            if done and pending and (offsets / pending[0]).stat().st_size > 0:
                killed = pending[0]
                os.killpg(proc.pid, signal.SIGKILL)
                break
            time.sleep(0.02)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
    assert killed is not None, "the relay finished before it could be killed mid-stream"
    before = sum(len(events) for events in received(b, 2).values())
    assert before < 300  # the fault was felt: hub B did not have everything yet

    send(300, 80)  # arrive while the query is down
    query = relay(spark, a, b, str(tmp_path / "chk"))  # restarts from the checkpoint location
    query.awaitTermination(300)
    assert not query.isActive and query.exception() is None
    assert (commits / killed).exists()  # the killed micro-batch ran again
    got = [int(e.body) for events in received(b, 2).values() for e in events]
    assert sorted(set(got)) == [i * 10 for i in range(380)]  # 0 lost
    # routed by partitionId, as the official client sees both hubs: each event in B's partition of the same id
    # as its source event's in A (all of A's are on the partition of key "k")
    source = {p: {int(e.body_as_str()) for e in events} for p, events in official(a, 2).items()}
    target = {p: {int(e.body_as_str()) // 10 for e in events} for p, events in official(b, 2).items()}
    assert target == source and sorted(len(v) for v in source.values()) == [0, 380], (source.keys(), target.keys())
    assert len(got) - 380 <= 50  # duplicates: at most the killed micro-batch (at least once)
