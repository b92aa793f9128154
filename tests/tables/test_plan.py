"""A commit's plan keeps batches whole or in part, and keeps exactly the events a per-event filter keeps."""

from __future__ import annotations

import datetime as dt
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from rxhubs import Event, EventBatch, PartitionContext
from rxhubs.tables._delta_plan import kept_batches
from rxhubs.tables._plan import plan, result_of

MOMENT = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
CONTEXTS = [PartitionContext("ns", "hub", "$Default", str(p)) for p in range(3)]


def reference(batches: list[EventBatch], positions: dict[PartitionContext, int | None], owned: set[str]) -> Any:
    """The filter as it was written before plans kept batches: event by event, one (batch, event) pair each."""
    kept: dict[str, list[tuple[int, bytes]]] = {}
    skipped: dict[str, int] = {}
    after: dict[str, int | None] = {}
    for batch in batches:
        pid = batch.context.partition_id
        kept.setdefault(pid, [])
        skipped.setdefault(pid, 0)
        after.setdefault(pid, None)
        if pid not in owned:
            skipped[pid] += len(batch.events)
            continue
        before, last = positions.get(batch.context), after[pid]
        floor = before if last is None else max(last, before if before is not None else -1)
        for e in batch.events:
            if floor is not None and e.sequence_number <= floor:
                skipped[pid] += 1
            else:
                kept[pid].append((e.sequence_number, e.body))
                floor = e.sequence_number
        if batch.events and (last is None or batch.events[-1].sequence_number > last):
            after[pid] = batch.events[-1].sequence_number
    return kept, skipped, after


sequences = st.lists(st.integers(0, 30), max_size=8)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 2), sequences), max_size=8),
    st.lists(st.one_of(st.none(), st.integers(-1, 25)), min_size=3, max_size=3),
    st.sets(st.sampled_from(["0", "1", "2"])),
    st.booleans(),
)
def test_the_plan_keeps_what_the_per_event_filter_keeps(
    specs: list[tuple[int, list[int]]], starts: list[int | None], owned: set[str], again: bool
) -> None:
    batches = [
        EventBatch(CONTEXTS[p], tuple(Event(f"{p}:{s}:{i}".encode(), s, str(s), MOMENT) for i, s in enumerate(seqs)))
        for p, seqs in specs
    ]
    if again and batches:
        batches.append(batches[0])  # the same batch object delivered twice in one commit
    positions = {c: s for c, s in zip(CONTEXTS, starts, strict=True)}
    writes = plan(batches, positions, lambda ctx: ctx.partition_id in owned)
    kept, skipped, after = reference(batches, positions, owned)
    result = result_of(writes)
    for w in writes:
        pid = w.context.partition_id
        rows = [(e.sequence_number, e.body) for b in w.batches for e in b.events]
        assert rows == kept[pid] if pid in owned else rows == []
        assert [(e.sequence_number, e.body) for _, e in w.events] == rows
        assert all(b.context == w.context and b.events for b in w.batches)
        assert w.written == len(rows) == result.written[pid]
        assert w.skipped == skipped[pid] == result.skipped[pid]
        assert w.after == after[pid]
    flat = [(b.partition_id, e.sequence_number, e.body) for b in kept_batches(writes) for e in b.events]
    assert flat == [(w.context.partition_id, *row) for w in writes for row in kept[w.context.partition_id]
                    if w.context.partition_id in owned]


def test_a_batch_kept_whole_is_passed_as_it_is_and_one_kept_in_part_is_a_copy() -> None:
    ctx = CONTEXTS[0]
    whole = EventBatch(ctx, tuple(Event(b"x", s, str(s), MOMENT) for s in range(10, 15)))
    straddling = EventBatch(ctx, tuple(Event(b"y", s, str(s), MOMENT) for s in range(3, 8)))
    (w,) = plan([straddling, whole], {ctx: 5}, lambda _: True)
    assert [[e.sequence_number for e in b.events] for b in w.batches] == [[6, 7], list(range(10, 15))]
    assert w.batches[1] is whole and w.batches[0] is not straddling
    assert (w.written, w.skipped, w.before, w.after) == (7, 3, 5, 14)
