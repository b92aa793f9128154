"""Real pipelines on real parts: async work and a poison record, the azure-eventhub client on the emulator,
checkpoints in SQLite.

* ``hops.process`` with random latency and ``concurrency=4`` over four partitions: downstream order per
  partition is the partition's order, and every checkpoint written covers only events whose work completed
  before the write.
* One poison record in one partition: the other partitions process everything meanwhile, the error hook
  names the partition and the operation, and no checkpoint passes the poison record, unless ``on_poison``
  took it.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from reactivex import operators as ops

import rxhubs
from rxhubs import Checkpoint, EventBatch
from rxhubs import operators as hops
from rxhubs.stores import CheckpointStore, SqliteCheckpointStore

pytestmark = pytest.mark.slow

PARTITIONS = 4
PER_PARTITION = 120
FAST = {"load_balancing_interval": 1.0, "ownership_expiration": 4.0, "max_wait": 0.1}


class TimedStore(CheckpointStore):
    """The SQLite store; each checkpoint write is noted with the time it was made."""

    def __init__(self, inner: SqliteCheckpointStore) -> None:
        self.inner = inner
        self.writes: list[tuple[float, str, int]] = []

    async def list_ownership(self, *args: Any) -> Any:
        return await self.inner.list_ownership(*args)

    async def claim_ownership(self, ownerships: Any) -> Any:
        return await self.inner.claim_ownership(ownerships)

    async def list_checkpoints(self, *args: Any) -> Any:
        return await self.inner.list_checkpoints(*args)

    async def update_checkpoint(self, checkpoint: Checkpoint) -> None:
        self.writes.append((time.monotonic(), checkpoint.partition_id, checkpoint.sequence_number))
        await self.inner.update_checkpoint(checkpoint)


async def _fill(hub: rxhubs.EventHub, bodies: dict[str, list[bytes]]) -> None:
    for pid, items in bodies.items():
        await hub.send(items, partition_id=pid)


async def test_async_work_with_concurrency_keeps_order_and_checkpoints_only_finished_work(
    tmp_path: Path, emulator_factory: Any
) -> None:
    emulator = emulator_factory(hubs={"work": PARTITIONS})
    hub = rxhubs.EventHub.from_connection_string(emulator.connection_string("work"))
    await _fill(hub, {str(p): [f"{p}:{n}".encode() for n in range(PER_PARTITION)] for p in range(PARTITIONS)})
    store = TimedStore(SqliteCheckpointStore(tmp_path / "cp.sqlite"))
    rng = random.Random(7)
    completed: dict[tuple[str, int], float] = {}
    running: dict[str, int] = defaultdict(int)
    most: dict[str, int] = defaultdict(int)
    order: dict[str, list[int]] = defaultdict(list)
    stop = rxhubs.Shutdown()

    async def work(batch: EventBatch) -> None:  # an HTTP call, say: 0-30 ms
        running[batch.partition_id] += 1
        most[batch.partition_id] = max(most[batch.partition_id], running[batch.partition_id])
        await asyncio.sleep(rng.random() * 0.03)
        running[batch.partition_id] -= 1
        now = time.monotonic()
        for event in batch:
            completed[(batch.partition_id, event.sequence_number)] = now

    def downstream(batch: EventBatch) -> None:
        order[batch.partition_id].extend(e.sequence_number for e in batch)
        if sum(len(v) for v in order.values()) == PARTITIONS * PER_PARTITION:
            stop.request()

    pipeline = rxhubs.consume(hub, "$Default", store, max_batch_size=5, max_inflight=8, **FAST).pipe(
        hops.process(work, concurrency=4),
        hops.checkpoint(store, max_interval=0.05),
    )
    pipeline = pipeline.pipe(ops.do_action(downstream))
    try:
        await asyncio.wait_for(rxhubs.arun(pipeline, shutdown=stop, signals=()), 120)
    finally:
        await hub.close()
        await store.inner.close()

    assert {pid: seqs for pid, seqs in order.items()} == {str(p): list(range(PER_PARTITION)) for p in range(PARTITIONS)}
    assert max(most.values()) == 4  # the concurrency was used
    assert len(store.writes) >= PARTITIONS
    for at, pid, seq in store.writes:
        unfinished = [s for s in range(seq + 1) if completed.get((pid, s), float("inf")) > at]
        assert unfinished == [], f"checkpoint {pid}@{seq} written while {unfinished[:5]} were still running"
    assert {pid: seq for _, pid, seq in store.writes} == {str(p): PER_PARTITION - 1 for p in range(PARTITIONS)}


@pytest.mark.parametrize("dead_letter", [False, True], ids=["stop-partition", "on-poison"])
async def test_a_poison_record_stops_only_its_partition(
    tmp_path: Path, emulator_factory: Any, dead_letter: bool
) -> None:
    emulator = emulator_factory(hubs={"poison": PARTITIONS})
    hub = rxhubs.EventHub.from_connection_string(emulator.connection_string("poison"))
    bodies = {str(p): [f'{{"n": {n}}}'.encode() for n in range(30)] for p in range(PARTITIONS)}
    bodies["2"][10] = b"{not json"
    await _fill(hub, bodies)
    store = TimedStore(SqliteCheckpointStore(tmp_path / "cp.sqlite"))
    processed: dict[str, set[int]] = defaultdict(set)
    errors: list[tuple[str, str]] = []
    dead: list[int] = []
    stop = rxhubs.Shutdown()

    def parse(batch: EventBatch) -> None:  # sync work: runs in a worker thread
        for event in batch:
            event.body_as_json()
        processed[batch.partition_id].update(e.sequence_number for e in batch)

    def healthy_done() -> bool:
        others = all(len(processed[str(p)]) == 30 for p in range(PARTITIONS) if p != 2)
        return others and (len(errors) >= 4 if not dead_letter else len(processed["2"]) + len(dead) == 30)

    async def watch() -> None:
        while not healthy_done():  # noqa: ASYNC110 - polls what the work threads record
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)
        stop.request()

    pipeline = rxhubs.consume(
        hub,
        "$Default",
        store,
        max_batch_size=4,
        on_partition_error=lambda c, e: errors.append((c.partition_id, c.operation)),
        **FAST,
    ).pipe(
        hops.process(
            parse,
            retry=rxhubs.Backoff(initial=0.05, max_retries=1),
            on_poison=(lambda b, e: dead.extend(x.sequence_number for x in b)) if dead_letter else None,
        ),
        hops.checkpoint(store, max_interval=0.05),
    )
    watcher = asyncio.ensure_future(watch())
    try:
        await asyncio.wait_for(rxhubs.arun(pipeline, shutdown=stop, signals=()), 120)
    finally:
        watcher.cancel()
        await hub.close()
        await store.inner.close()

    for p in (0, 1, 3):
        assert processed[str(p)] == set(range(30))
    assert set(errors) == {("2", "process")}
    last = {pid: seq for _, pid, seq in store.writes}
    if dead_letter:
        assert 10 in dead and last["2"] == 29  # taken by on_poison, then passed
        assert processed["2"] == set(range(30)) - set(dead)
    else:
        assert all(seq < 10 for _, pid, seq in store.writes if pid == "2")  # nothing ever passed the poison
        assert len(errors) >= 4  # stopped, claimed again after a backoff, failed again: the policy's loop
