"""to_dataframe(local=...): Spark's local relation or Arrow batches decoded in the tasks; same rows, other plans.

The tasks form sets ``spark.sql.execution.arrow.localRelationThreshold`` to 0 around ``createDataFrame``; these
tests show the session's conf is left exactly as it was found (set, unset, and when ``createDataFrame`` fails),
and read the analyzed plan to see which form Spark built.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from rxhubs import Event, EventBatch
from rxhubs.spark import to_dataframe
from tests.spark.test_dataframe import CTX0, CTX3, MOMENT, tricky_batches

pytestmark = pytest.mark.spark

THRESHOLD = "spark.sql.execution.arrow.localRelationThreshold"
BATCH_ROWS = "spark.sql.execution.arrow.maxRecordsPerBatch"


def plan(df: Any) -> str:
    return str(df._jdf.queryExecution().analyzed().toString())


def many(count: int) -> list[EventBatch]:
    """``count`` events over two partitions, with properties, so the table spans several Arrow batches."""
    return [
        EventBatch(ctx, tuple(Event(f"{ctx.partition_id}-{s}".encode(), s, str(s), MOMENT, properties={"s": s})
                              for s in range(count // 2)))
        for ctx in (CTX0, CTX3)
    ]


@pytest.fixture
def unset(spark: Any) -> Iterator[Any]:
    """The session with the threshold unset before and after the test (tests may set it)."""
    spark.conf.unset(THRESHOLD)
    yield spark
    spark.conf.unset(THRESHOLD)


def test_both_forms_give_the_same_rows_with_maps_and_timestamps(unset: Any) -> None:
    spark = unset
    local, tasks = to_dataframe(spark, tricky_batches()), to_dataframe(spark, tricky_batches(), local=False)
    assert "LocalRelation" in plan(local) and "LocalRelation" not in plan(tasks)  # two forms, really
    rows = local.collect()
    assert rows == tasks.collect()
    assert rows[0].properties["when"] == "2026-03-01T12:00:00+00:00" and rows[0].properties["none"] is None
    assert rows[0].systemProperties == {"x-opt-publisher": "pub-a", "x-opt-lag": "7"}
    back = tasks.toArrow()
    assert back.equals(local.toArrow())  # every column, byte for byte
    micros = int(MOMENT.timestamp()) * 1_000_000 + 123456
    assert back.column("enqueuedTime").cast("int64").to_pylist()[:2] == [micros, micros]


def test_the_default_form_is_a_local_relation_and_the_tasks_form_an_rdd_of_arrow_batches(unset: Any) -> None:
    spark = unset
    assert "LocalRelation" in plan(to_dataframe(spark, many(100)))
    tasks = to_dataframe(spark, many(100), local=False)
    assert "LocalRelation" not in plan(tasks) and "LogicalRDD" in plan(tasks)
    assert tasks.count() == 100
    assert "LocalRelation" in plan(to_dataframe(spark, [], local=False))  # as documented: nothing to decode


def test_the_tasks_form_cuts_the_arrow_batches_evenly_one_task_each(unset: Any) -> None:
    from pyspark.sql.functions import spark_partition_id

    spark = unset
    spark.conf.set(BATCH_ROWS, "40")
    try:
        local = to_dataframe(spark, many(102))
        tasks = to_dataframe(spark, many(102), local=False)
    finally:
        spark.conf.unset(BATCH_ROWS)
    counts = sorted(r["count"] for r in tasks.groupBy(spark_partition_id()).count().collect())
    assert counts == [34, 34, 34]  # at most 40 rows each: 3 batches, cut evenly (pyspark alone: 40, 40, 22)
    assert local.collect() == tasks.collect()  # in order


def test_the_tasks_form_restores_a_threshold_that_was_set(spark: Any) -> None:
    spark.conf.set(THRESHOLD, "1g")  # far above the data: Spark alone would build a local relation
    try:
        tasks = to_dataframe(spark, many(10), local=False)
        assert spark.conf.get(THRESHOLD, None) == "1g"
        assert "LocalRelation" not in plan(tasks)
        assert "LocalRelation" in plan(to_dataframe(spark, many(10)))  # the default form takes Spark's choice
    finally:
        spark.conf.unset(THRESHOLD)


def test_the_tasks_form_leaves_an_unset_threshold_unset(unset: Any) -> None:
    spark = unset
    to_dataframe(spark, many(10), local=False)
    assert spark.conf.get(THRESHOLD, None) is None
    assert spark.conf.get(THRESHOLD) == "50331648b"  # Spark's default (48 MiB) again, not a copy of it


class FailingSession:
    """A real session whose ``createDataFrame`` fails, after noting the threshold it saw (a fault in Spark)."""

    def __init__(self, spark: Any) -> None:
        self.spark = spark
        self.seen: list[str | None] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.spark, name)

    def createDataFrame(self, data: Any) -> Any:  # pyspark's name
        self.seen.append(self.spark.conf.get(THRESHOLD, None))
        raise RuntimeError("createDataFrame failed")


@pytest.mark.parametrize("before", [None, "2m"])
def test_the_tasks_form_restores_the_threshold_when_create_data_frame_fails(unset: Any, before: str | None) -> None:
    spark = unset
    if before is not None:
        spark.conf.set(THRESHOLD, before)
    failing = FailingSession(spark)
    with pytest.raises(RuntimeError, match="createDataFrame failed"):
        to_dataframe(failing, many(10), local=False)
    assert failing.seen == ["0"]  # it failed while the threshold was set for the tasks form
    assert spark.conf.get(THRESHOLD, None) == before


def test_concurrent_conversions_of_both_forms_leave_the_threshold_as_found(unset: Any) -> None:
    # the sink converts the next micro-batch on a second thread; other sinks may share the session
    spark = unset
    plans: list[tuple[bool, bool]] = []
    errors: list[BaseException] = []

    def convert(local: bool) -> None:
        try:
            for _ in range(6):
                plans.append((local, "LocalRelation" in plan(to_dataframe(spark, many(10), local=local))))
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=convert, args=(i % 2 == 0,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert spark.conf.get(THRESHOLD, None) is None
    assert len(plans) == 36 and all(local == relation for local, relation in plans)  # each call its own form
