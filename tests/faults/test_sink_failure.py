"""A Spark-style write fails for good (after its retries): nothing of that micro-batch is checkpointed.

The sink is ``rxhubs.spark.write`` with a plain Python writer (``convert=list``: no JVM) appending to a
"table". Once the table breaks, the write fails, is retried, and the pipeline ends with a SinkError. The
checkpoints stop before the first event of the failed micro-batch on every partition. A pipeline started
again (the table repaired) picks up from those checkpoints: every event sent is in the table, nothing lost.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import rxhubs
import rxhubs.spark
from rxhubs.errors import SinkError
from rxhubs.stores import SqliteCheckpointStore
from tests.faults.kit import PARTITIONS, Consumer, Producer, expected_from, wait_until


class Table:
    """A sink target that can break: appends (partition, sequence number) per event."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, int]] = []
        self.broken = threading.Event()
        self.failed: list[list[rxhubs.EventBatch]] = []
        self.lock = threading.Lock()

    def write(self, batches: list[rxhubs.EventBatch]) -> None:
        if self.broken.is_set():
            self.failed.append(batches)
            raise OSError("the table's storage is gone")
        with self.lock:
            self.rows.extend((b.partition_id, e.sequence_number) for b in batches for e in b.events)

    def snapshot(self) -> set[tuple[str, int]]:
        with self.lock:
            return set(self.rows)


def _checkpoints(conn: str, path: Path) -> dict[str, int]:
    async def read() -> dict[str, int]:
        hub = rxhubs.EventHub.from_connection_string(conn)
        store = SqliteCheckpointStore(path)
        try:
            records = await store.list_checkpoints(hub.fully_qualified_namespace, hub.eventhub_name, "$Default")
        finally:
            await store.close()
            await hub.close()
        return {c.partition_id: c.sequence_number for c in records}

    return asyncio.run(read())


@pytest.mark.slow
def test_a_failed_write_is_not_checkpointed_and_a_restarted_pipeline_delivers_everything(
    tmp_path: Path, emulator_factory: Any
) -> None:
    emulator = emulator_factory(hubs={"sink": PARTITIONS})
    conn = emulator.connection_string("sink")
    path = tmp_path / "cp.sqlite"
    table = Table()

    def sink() -> Any:
        return rxhubs.spark.write(table.write, convert=list, max_interval=0.3, retries=2, backoff=0.05)

    producer = Producer(conn)
    first = Consumer("a", conn, lambda: SqliteCheckpointStore(path), middle=[sink()])
    second = Consumer("b", conn, lambda: SqliteCheckpointStore(path), middle=[sink()])
    try:
        first.start_and_wait()
        producer.start()
        assert wait_until(lambda: len({p for p, _ in table.snapshot()}) == PARTITIONS, 15)
        time.sleep(1.5)  # some checkpoints written
        table.broken.set()
        assert first.finished.wait(30), "the pipeline did not end after the write failed for good"
        assert isinstance(first.outcome, SinkError), repr(first.outcome)
        assert len(table.failed) == 3  # the first try and two retries, of one micro-batch
        failed_first = {}
        for batch in table.failed[0]:
            if batch.events:
                pid = batch.partition_id
                failed_first[pid] = min(failed_first.get(pid, batch.events[0].sequence_number),
                                        batch.events[0].sequence_number)
        assert failed_first
        checkpoints = _checkpoints(conn, path)
        assert checkpoints  # checkpoints were written before the failure
        for pid, seq in failed_first.items():
            assert checkpoints.get(pid, -1) < seq, (pid, checkpoints.get(pid), seq)
        # nothing that did not reach the table was checkpointed
        written = table.snapshot()
        for pid, seq in checkpoints.items():
            assert (pid, seq) in written
        table.broken.clear()
        second.start_and_wait()
        time.sleep(2.0)
        producer.stop.set()
        producer.join(timeout=30)
        assert producer.error is None, producer.error
        expected = expected_from(dict(producer.sent))
        assert wait_until(lambda: expected <= table.snapshot(), 30), len(expected - table.snapshot())
        second.stop()
    finally:
        producer.stop.set()
        for consumer in (first, second):
            if consumer.is_alive():
                consumer.stop()
    assert second.outcome is None, second.outcome
    # written twice: only what lay after the checkpoints when the first pipeline died
    twice = {k for k, n in Counter(table.rows).items() if n > 1}
    assert set(Counter(table.rows).values()) <= {1, 2}
    assert all(seq > checkpoints.get(pid, -1) for pid, seq in twice)
