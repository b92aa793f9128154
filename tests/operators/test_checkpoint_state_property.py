"""The invariant, as a property: whatever order batches finish in, every committed pair ``(position, state)``
has ``state`` equal to a fresh fold of the restored state and the deltas of the batches up to ``position``."""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from reactivex.subject import Subject
from reactivex.testing import TestScheduler

from rxhubs import Checkpoint, Event, EventBatch, Ownership, PartitionContext
from rxhubs import operators as hops
from rxhubs._batch import Origin
from rxhubs.balancing import PartitionSession
from rxhubs.state._codec import DELETED, OperatorState, StateDelta, decode
from rxhubs.stores import InMemoryCheckpointStore

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
CTX = PartitionContext("ns", "hub", "$Default", "0")


class RecordingStore(InMemoryCheckpointStore):
    """The in-memory store, keeping every pair committed (decoded)."""

    def __init__(self) -> None:
        super().__init__()
        self.commits: list[tuple[int, dict[str, OperatorState]]] = []

    async def commit_state(self, checkpoint: Checkpoint, ownership: Ownership, state: bytes) -> None:
        await super().commit_state(checkpoint, ownership, state)
        self.commits.append((checkpoint.sequence_number, decode(state)))


keys = st.sampled_from(["k1", "k2", "k3", "k4"])
values = st.one_of(st.integers(0, 9), st.just(DELETED))
delta = st.builds(
    StateDelta,
    st.sampled_from(["w", "s"]),
    st.just("f"),
    st.dictionaries(keys, values, max_size=3),
    st.fixed_dictionaries({"wm": st.integers(0, 99)}),
)
restored = st.one_of(
    st.none(), st.builds(lambda k: {"w": OperatorState("f", k, {"wm": 0}), "gone": OperatorState("g", {"z": 1})},
                         st.dictionaries(keys, st.integers(0, 9), max_size=3))
)


def normal(state: dict[str, OperatorState]) -> dict[str, tuple[str, dict[str, Any], dict[str, Any]]]:
    return {name: (op.fingerprint, dict(op.keys), dict(op.meta)) for name, op in state.items()}


def expected(base: dict[str, OperatorState], deltas: list[StateDelta]) -> dict[str, tuple[str, dict[str, Any],
                                                                                       dict[str, Any]]]:
    """The state after ``deltas``, worked out without ``rxhubs.state._codec.fold``: each key holds the last value any
    delta of its operator wrote (none if that was DELETED), else the restored one; an operator's fingerprint and
    meta are its last delta's."""
    out = normal(base)
    for name in {d.name for d in deltas}:
        mine = [d for d in deltas if d.name == name]
        restored = base[name].keys if name in base else {}
        values = {}
        for key in set(restored) | {k for d in mine for k in d.changes}:
            last = next((d.changes[key] for d in reversed(mine) if key in d.changes), restored.get(key, DELETED))
            if last is not DELETED:
                values[key] = last
        out[name] = (mine[-1].fingerprint, values, dict(mine[-1].meta))
    return out


@settings(max_examples=100, deadline=None)
@given(
    deltas=st.lists(st.lists(delta, max_size=2), min_size=1, max_size=12),
    data=st.data(),
    initial=restored,
    every=st.sampled_from([1, 2, 3]),
)
def test_any_finishing_order_commits_the_fold_of_the_prefix(
    deltas: list[list[StateDelta]], data: st.DataObject, initial: dict[str, OperatorState] | None, every: int
) -> None:
    n = len(deltas)
    order = data.draw(st.permutations(range(n)), label="finishing order")
    store, scheduler = RecordingStore(), TestScheduler()

    async def claim() -> Ownership:
        [won] = await store.claim_ownership([Ownership("ns", "hub", "$Default", "0", "a")])
        await store.fence_with_state(won)
        return won

    session = PartitionSession(CTX, asyncio.run(claim()))
    session.period, session.restored_state = session.record, initial
    read = object()
    batches = []
    for i, ds in enumerate(deltas):  # batch i holds the event of sequence number i (or none: a tick)
        events = (Event(b"x", i, str(i), T0),) if i % 4 != 3 else ()
        origin = Origin(read, i, events[-1] if events else None)
        batches.append(EventBatch(CTX, events, None, None, session, origin, tuple(ds)))

    source: Subject[EventBatch] = Subject()
    outcome: list[Any] = []
    source.pipe(hops.checkpoint(store, max_interval=None, every=every)).subscribe(
        on_completed=lambda: outcome.append("done"), scheduler=scheduler
    )
    for step, i in enumerate(order):
        scheduler.schedule_absolute(float(step + 1), lambda *_, b=batches[i]: source.on_next(b))
    scheduler.schedule_absolute(float(n + 1), lambda *_: source.on_completed())
    scheduler.start()

    assert outcome == ["done"]
    base = dict(initial or {})
    for position, state in store.commits:
        # the prefix a commit covers: every batch up to the one with its event, and the ticks right after it
        upto = position
        while upto + 1 < n and not batches[upto + 1].events:
            upto += 1
        candidates = [expected(base, [d for ds in deltas[: k + 1] for d in ds]) for k in range(position, upto + 1)]
        assert normal(state) in candidates
    # the completion flushed everything: the last commit is the fold of all of it
    last_event = max(i for i, b in enumerate(batches) if b.events) if any(b.events for b in batches) else None
    if last_event is not None and any(deltas):
        assert store.commits, "nothing was committed"
        position, state = store.commits[-1]
        assert position == last_event
        assert normal(state) == expected(base, [d for ds in deltas for d in ds])
