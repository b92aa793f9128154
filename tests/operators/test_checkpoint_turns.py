"""A burst of checkpoint writes from many partitions goes to the store in turns, each timed from its turn.

The store answers one request at a time, as Azurite does (20 ms each here): 200 partitions that checkpoint
together (a consumer that claimed them together, or hands them over together) need 4 s in all, with a
timeout of 1 s per write. Made all at once, every write past the 50th spent its whole timeout queued and failed,
and was retried with the others (``rxhubs bench scale --real`` at 512 partitions: the owner's renewals, queued
behind them, did not land for 70 s and its partitions expired). In turns of ``WRITES_IN_FLIGHT``, every write is
answered within its timeout, and never more than that many are queued at the store.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging

import pytest
import reactivex
from reactivex.scheduler.eventloop import AsyncIOScheduler

from rxhubs import Checkpoint, Event, EventBatch, PartitionContext
from rxhubs import operators as hops
from rxhubs.stores import InMemoryCheckpointStore
from rxhubs.stores._write_gate import WRITES_IN_FLIGHT

PARTITIONS = 200
ANSWER_S = 0.02  # the store's time per request, one request at a time
T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


class OneThreadStore(InMemoryCheckpointStore):
    """The in-memory store answering one request at a time; counts the writes waiting at it."""

    def __init__(self) -> None:
        super().__init__()
        self.lock = asyncio.Lock()
        self.waiting = 0
        self.most_waiting = 0
        self.written: set[str] = set()
        self.all_written = asyncio.Event()

    async def update_checkpoint(self, checkpoint: Checkpoint) -> None:
        self.waiting += 1
        self.most_waiting = max(self.most_waiting, self.waiting)
        try:
            async with self.lock:
                await asyncio.sleep(ANSWER_S)
                await super().update_checkpoint(checkpoint)
                self.written.add(checkpoint.partition_id)
                if len(self.written) == PARTITIONS:
                    self.all_written.set()
        finally:
            self.waiting -= 1


def _batch(partition: int) -> EventBatch:
    context = PartitionContext("ns", "hub", "$Default", str(partition))
    return EventBatch(context, (Event(b"x", 0, "0", T0),), None, None, None)


async def test_a_burst_of_writes_goes_in_turns_and_none_times_out(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "rxhubs.operators")
    store = OneThreadStore()
    errors: list[Exception] = []
    scheduler = AsyncIOScheduler(asyncio.get_running_loop())
    batches = reactivex.from_iterable([_batch(p) for p in range(PARTITIONS)]).pipe(reactivex.operators.concat(
        reactivex.never()))
    subscription = batches.pipe(hops.checkpoint(store, max_interval=60.0, timeout=1.0)).subscribe(
        on_error=lambda e: (errors.append(e), store.all_written.set()), scheduler=scheduler
    )
    try:
        await store.all_written.wait()
    finally:
        subscription.dispose()
    assert not errors
    checkpoints = await store.list_checkpoints("ns", "hub", "$Default")
    assert len(checkpoints) == PARTITIONS  # every first checkpoint written, none given up
    timeouts = [r.getMessage() for r in caplog.records if "did not answer within" in r.getMessage()]
    assert not timeouts, f"{len(timeouts)} writes timed out, e.g. {timeouts[0]}"
    assert store.most_waiting <= WRITES_IN_FLIGHT
