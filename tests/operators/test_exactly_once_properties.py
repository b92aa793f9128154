"""Property: hops.exactly_once writes every delivered event once, whatever fails and whatever is delivered again.

Two partitions deliver batches that continue where they left off or go back (re-delivery after a crash or a
handover: batches that straddle the table's position, or lie wholly below it). Each commit may fail before its
rows are written or after it landed but before the batches go on; the operator retries. In virtual time.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence

from hypothesis import given, settings
from hypothesis import strategies as st
from reactivex.subject import Subject
from reactivex.testing import TestScheduler

from rxhubs import Event, EventBatch, PartitionContext
from rxhubs import operators as hops
from rxhubs.sources import Backoff
from rxhubs.tables import InMemoryTable

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
CTX = {p: PartitionContext("ns", "hub", "$Default", p) for p in "01"}


class Faulty:
    """An InMemoryTable whose commits fail as ``faults`` say, in turn: before the write, or after the commit."""

    def __init__(self, faults: list[str | None]) -> None:
        self.table, self.faults, self.felt = InMemoryTable(), list(faults), 0

    async def positions(self, partitions: Sequence[PartitionContext]) -> Mapping[str, int | None]:
        return await self.table.positions(partitions)

    async def commit(
        self, batches: Sequence[EventBatch], *, owned: Callable[[PartitionContext], bool]
    ) -> hops.CommitResult:
        fault = self.faults.pop(0) if self.faults else None
        if fault == "before_write":
            self.felt += 1
            raise ConnectionError("lost before the write")
        result = await self.table.commit(batches, owned=owned)
        if fault == "after_commit":
            self.felt += 1
            raise TimeoutError("the commit landed, its answer was lost")
        return result


moves = st.lists(st.tuples(st.sampled_from("01"), st.integers(-12, 0), st.integers(1, 8)), min_size=1, max_size=30)


@settings(max_examples=80, deadline=None)
@given(moves, st.lists(st.sampled_from([None, None, "before_write", "after_commit"]), max_size=30),
       st.sampled_from([0.0, 0.5, 2.0]))
def test_every_delivered_event_is_in_the_table_once(
    steps: list[tuple[str, int, int]], faults: list[str | None], interval: float
) -> None:
    scheduler, source = TestScheduler(), Subject[EventBatch]()
    sink = Faulty(faults)
    emitted: list[EventBatch] = []
    in_table_when_emitted: list[bool] = []

    def on_next(batch: EventBatch) -> None:
        emitted.append(batch)
        numbers = {(r["partition"], r["sequenceNumber"]) for r in sink.table.rows}
        in_table_when_emitted.append(all((batch.partition_id, e.sequence_number) in numbers for e in batch))

    source.pipe(
        hops.exactly_once(sink, max_interval=interval, retry=Backoff(initial=0.1, maximum=1.0, max_retries=None))
    ).subscribe(on_next, scheduler=scheduler)
    cursor = {"0": 0, "1": 0}
    delivered: set[tuple[str, int]] = set()
    sent: list[EventBatch] = []
    for i, (pid, back, size) in enumerate(steps):
        first = max(0, cursor[pid] + back)  # back < 0: delivered again, from before where it got to
        batch = EventBatch(CTX[pid], tuple(Event(b"x", n, str(n), T0) for n in range(first, first + size)))
        cursor[pid] = max(cursor[pid], first + size)
        delivered.update((pid, n) for n in range(first, first + size))
        sent.append(batch)
        scheduler.schedule_absolute(i * 0.3, lambda *_, b=batch: source.on_next(b))
    scheduler.schedule_absolute(len(steps) * 0.3, lambda *_: source.on_completed())
    scheduler.start()
    rows = [(r["partition"], r["sequenceNumber"]) for r in sink.table.rows]
    assert len(rows) == len(set(rows)), "a duplicate"
    assert set(rows) == delivered
    assert emitted == sent  # every batch went on once, in order, and only after its commit
    assert all(in_table_when_emitted)
    used = len(faults) - len(sink.faults)
    assert sink.felt == sum(1 for f in faults[:used] if f)  # every fault of the commits made was felt
