"""rxhubs.spark.write with a real local SparkSession, driven by rxhubs.arun on asyncio.

Parquet round trip and order, DataFrames decoded in the write's tasks (read twice, retried), a failing write
(retried, then SinkError, nothing after it emitted), writes off the event loop while every partition keeps
receiving (counts seen during a blocked write), and a restart after a crash that re-delivers only what was not
checkpointed.
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import reactivex
from reactivex import Observable
from reactivex import operators as ops

import rxhubs
import rxhubs.spark
from rxhubs import EventBatch, Position
from rxhubs import operators as hops
from rxhubs._shutdown import Shutdown
from rxhubs.errors import SinkError
from rxhubs.testing import InMemoryEventHub

pytestmark = pytest.mark.spark


def fill(partitions: int, per_partition: int) -> InMemoryEventHub:
    hub = InMemoryEventHub(partition_count=partitions)
    for p in range(partitions):
        hub.send([f'{{"p":{p},"i":{i}}}' for i in range(per_partition)], partition_id=str(p), properties={"n": p})
    return hub


def merged(hub: InMemoryEventHub, starts: dict[str, Position] | None = None, **options: Any) -> Observable[EventBatch]:
    return reactivex.merge(
        *(rxhubs.partition_batches(hub, p, start=(starts or {}).get(p), **options) for p in hub.partition_ids)
    )


async def run_until(pipeline: Observable[EventBatch], events: int) -> list[EventBatch]:
    """Run ``pipeline`` until ``events`` events came out of it, then stop it gracefully; return its batches."""
    stop = Shutdown()
    out: list[EventBatch] = []
    seen = 0

    def tap(batch: EventBatch) -> None:
        nonlocal seen
        out.append(batch)
        seen += len(batch)
        if seen >= events:
            stop.request()

    await rxhubs.arun(pipeline.pipe(ops.do_action(tap)), shutdown=stop, signals=())
    return out


def parquet(path: Path) -> Callable[[Any], None]:
    return lambda df: df.write.mode("append").parquet(str(path))


def read_keys(spark: Any, path: Path) -> list[tuple[str, int]]:
    return [(r.partition, r.sequenceNumber) for r in spark.read.parquet(str(path)).collect()]


async def test_micro_batches_land_in_parquet_and_come_out_in_order_per_partition(spark: Any, tmp_path: Path) -> None:
    hub = fill(partitions=3, per_partition=400)
    out = tmp_path / "events"
    frames: list[list[tuple[str, int]]] = []

    def writer(df: Any) -> None:
        frames.append([(r.partition, r.sequenceNumber) for r in df.select("partition", "sequenceNumber").collect()])
        df.write.mode("append").parquet(str(out))

    # no spark= given: the session already running is used
    sink = rxhubs.spark.write(writer, max_events=300, max_interval=0.2)
    emitted = await run_until(merged(hub, max_batch_size=50).pipe(sink), 1200)

    keys = read_keys(spark, out)
    assert sorted(keys) == sorted((str(p), s) for p in range(3) for s in range(400))  # all, once
    for partition in ("0", "1", "2"):
        downstream = [e.sequence_number for b in emitted if b.partition_id == partition for e in b]
        assert downstream == list(range(400))
        for frame in frames:  # within each DataFrame too
            sequence = [s for p, s in frame if p == partition]
            assert sequence == sorted(sequence)
    assert len(frames) >= 4 and all(len(f) >= 300 for f in frames[:-1])  # sealed by count, last by completion
    values = spark.read.parquet(str(out)).where("partition = '2' AND sequenceNumber = 7").first()
    assert bytes(values.body) == b'{"p":2,"i":7}' and values.properties == {"n": "2"}


async def test_a_write_failing_after_its_retries_ends_with_sink_error_and_nothing_after_it_is_emitted(
    spark: Any, tmp_path: Path
) -> None:
    hub = fill(partitions=1, per_partition=40)
    out = tmp_path / "events"
    calls: list[int] = []

    def writer(df: Any) -> None:
        calls.append(df.count())
        # the first micro-batch creates the directory; later ones fail inside Spark (path exists)
        df.write.mode("errorifexists").parquet(str(out))

    checkpointed: dict[str, int] = {}
    pipeline = merged(hub, max_batch_size=10).pipe(
        rxhubs.spark.write(writer, spark=spark, max_events=10, retries=2, backoff=0.01),
        ops.do_action(lambda b: checkpointed.__setitem__(b.partition_id, b.last_sequence_number)),
    )
    with pytest.raises(SinkError) as caught:
        await run_until(pipeline, 40)

    assert calls == [10, 10, 10, 10]  # one success, then one failure and two retries
    assert "3 attempt(s)" in str(caught.value) and "10 events" in str(caught.value)
    assert type(caught.value.__cause__).__name__ == "AnalysisException"
    assert checkpointed == {"0": 9}  # a checkpoint after the sink never sees the failed micro-batch
    assert sorted(read_keys(spark, out)) == [("0", s) for s in range(10)]


async def test_the_dataframe_decodes_in_the_writes_tasks_and_a_second_read_or_a_retry_decodes_again(
    spark: Any, tmp_path: Path
) -> None:
    hub = fill(partitions=2, per_partition=30)
    out = tmp_path / "events"
    plans: list[str] = []
    transformed: list[int] = []
    failed: list[int] = []

    def transform(df: Any) -> Any:
        transformed.append(df.count())  # a first read of the DataFrame: its Arrow batches are decoded once
        return df

    def writer(df: Any) -> None:
        plans.append(str(df._jdf.queryExecution().analyzed().toString()))
        if not failed:
            failed.append(df.count())  # a second read, then a failure: the retry converts anew
            raise RuntimeError("the first write fails")
        df.write.mode("append").parquet(str(out))

    sink = rxhubs.spark.write(writer, spark=spark, max_events=60, max_interval=30.0, transform=transform,
                              retries=1, backoff=0.01)
    await run_until(merged(hub, max_batch_size=30).pipe(sink), 60)

    assert transformed == [60, 60] and failed == [60]  # every read sees every row
    assert len(plans) == 2 and all("LocalRelation" not in plan and "LogicalRDD" in plan for plan in plans)
    assert sorted(read_keys(spark, out)) == sorted((str(p), s) for p in range(2) for s in range(30))  # once


async def test_the_blocking_write_runs_off_the_loop_while_every_partition_keeps_receiving(spark: Any) -> None:
    hub = fill(partitions=3, per_partition=100)
    first_write = threading.Event()
    release = threading.Event()
    written = Counter[str]()

    def writer(df: Any) -> None:
        rows = df.select("partition").collect()  # real Spark work on the worker thread
        if not first_write.is_set():
            first_write.set()
            assert release.wait(60), "the test never released the writer"
        written.update(r.partition for r in rows)

    received = Counter[str]()
    pipeline = merged(hub, max_batch_size=10, max_inflight=3).pipe(
        ops.do_action(lambda b: received.update({b.partition_id: 1})),
        rxhubs.spark.write(writer, spark=spark, max_events=10, max_interval=0.05),
    )
    task = asyncio.ensure_future(run_until(pipeline, 300))
    try:
        while not (first_write.is_set() and sum(received.values()) >= 9):
            await asyncio.sleep(0.01)
            assert not task.done(), task.exception()
        # during the first (blocked) write: every partition reached its bound of 3 held batches ...
        assert received == {"0": 3, "1": 3, "2": 3}
        for _ in range(20):
            await asyncio.sleep(0.01)
        # ... and no partition went beyond it while the write stayed blocked
        assert received == {"0": 3, "1": 3, "2": 3} and not written
    finally:
        release.set()
    emitted = await task
    assert written == {"0": 100, "1": 100, "2": 100}
    assert sum(len(b) for b in emitted) == 300


async def test_a_restart_after_a_crash_redelivers_only_what_was_not_checkpointed(spark: Any, tmp_path: Path) -> None:
    hub = fill(partitions=2, per_partition=60)
    out = tmp_path / "events"
    checkpoints: dict[str, int] = {}  # what a checkpoint operator after the sink would have stored

    def checkpoint(batch: EventBatch) -> None:
        if batch.last_sequence_number is not None:
            checkpoints[batch.partition_id] = batch.last_sequence_number

    writes = 0

    def crashing_writer(df: Any) -> None:
        nonlocal writes
        writes += 1
        df.write.mode("append").parquet(str(out))
        if writes == 3:
            raise RuntimeError("process killed after Spark committed, before the sink returned")

    first_run = merged(hub, max_batch_size=10, max_inflight=2).pipe(
        rxhubs.spark.write(crashing_writer, spark=spark, max_events=20, retries=0),
        ops.do_action(checkpoint),
    )
    with pytest.raises(SinkError):
        await run_until(first_run, 120)
    assert sum(checkpoints.values()) > 0 and writes == 3
    committed_first = Counter(read_keys(spark, out))

    # restart from the checkpoints
    starts = {p: Position.from_sequence_number(s) for p, s in checkpoints.items()}
    redelivered: list[tuple[str, int]] = []
    second_run = merged(hub, starts, max_batch_size=10).pipe(
        ops.do_action(lambda b: redelivered.extend((b.partition_id, e.sequence_number) for e in b)),
        rxhubs.spark.write(parquet(out), spark=spark, max_events=20),
        ops.do_action(checkpoint),
    )
    remaining = sum(60 - checkpoints.get(p, -1) - 1 for p in hub.partition_ids)
    await run_until(second_run, remaining)

    # only events after each partition's checkpoint came again
    assert sorted(redelivered) == sorted(
        (p, s)
        for p in hub.partition_ids
        for s in range(starts[p].value + 1 if p in starts else 0, 60)  # type: ignore[operator]
    )
    final = Counter(read_keys(spark, out))
    assert set(final) == {(p, s) for p in hub.partition_ids for s in range(60)}  # nothing lost
    duplicates = [k for k, n in final.items() if n > 1]
    assert all(n <= 2 for n in final.values())
    # the duplicates are exactly the micro-batch Spark committed but the crash kept from being checkpointed
    assert 0 < len(duplicates) <= 20 + 10
    assert set(duplicates) <= set(committed_first)
    assert checkpoints == {"0": 59, "1": 59}


async def test_with_the_checkpoint_operator_a_restart_resumes_after_what_spark_committed(
    spark: Any, tmp_path: Path
) -> None:
    hub = fill(partitions=2, per_partition=60)
    store = rxhubs.stores.SqliteCheckpointStore(str(tmp_path / "checkpoints.sqlite"))
    out = tmp_path / "events"
    writes = 0

    def crashing_writer(df: Any) -> None:
        nonlocal writes
        writes += 1
        df.write.mode("append").parquet(str(out))
        if writes == 3:
            raise RuntimeError("killed after Spark committed, before the sink returned")

    options: dict[str, Any] = {"owner_id": "spark-consumer", "max_batch_size": 10, "max_inflight": 2}
    first_run = rxhubs.consume(hub, "$Default", store, **options).pipe(
        rxhubs.spark.write(crashing_writer, spark=spark, max_events=20, retries=0),
        hops.checkpoint(store, max_interval=0.05),
    )
    with pytest.raises(SinkError):
        await run_until(first_run, 120)
    stored = await stored_checkpoints(store, hub)
    committed_first = Counter(read_keys(spark, out))
    assert writes == 3 and stored and len(committed_first) > sum(s + 1 for s in stored.values())

    redelivered: list[tuple[str, int]] = []
    second_run = rxhubs.consume(hub, "$Default", store, **options).pipe(
        ops.do_action(lambda b: redelivered.extend((b.partition_id, e.sequence_number) for e in b)),
        rxhubs.spark.write(parquet(out), spark=spark, max_events=20),
        hops.checkpoint(store, max_interval=0.05),
    )
    remaining = sum(60 - stored.get(p, -1) - 1 for p in hub.partition_ids)
    await run_until(second_run, remaining)

    expected_again = [(p, s) for p in hub.partition_ids for s in range(stored.get(p, -1) + 1, 60)]
    assert sorted(redelivered) == expected_again  # only what was not checkpointed came again
    final = Counter(read_keys(spark, out))
    assert set(final) == {(p, s) for p in hub.partition_ids for s in range(60)}  # nothing lost
    duplicates = {k for k, n in final.items() if n > 1}
    assert max(final.values()) == 2 and duplicates == set(committed_first) - {
        (p, s) for p in stored for s in range(stored[p] + 1)
    }  # the duplicates: what Spark committed after the last checkpoint (the crashed micro-batch)
    assert len(duplicates) <= 20 + 10  # bounded by one micro-batch (max_events + one batch)
    assert await stored_checkpoints(store, hub) == {"0": 59, "1": 59}


async def stored_checkpoints(store: Any, hub: InMemoryEventHub) -> dict[str, int]:
    found = await store.list_checkpoints(hub.fully_qualified_namespace, hub.eventhub_name, "$Default")
    return {c.partition_id: c.sequence_number for c in found}
