"""State committed with the checkpoint, in virtual time: the pair, a handover, the release flush, a zombie, a
store without state support."""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Any

from reactivex import operators as ops
from reactivex.testing import TestScheduler

import rxhubs
from rxhubs import Event, EventBatch, Ownership, PartitionContext
from rxhubs import operators as hops
from rxhubs.balancing import PartitionSession
from rxhubs.errors import ConfigurationError, OwnershipLostError
from rxhubs.state._codec import DELETED, StateDelta
from rxhubs.stores import InMemoryCheckpointStore
from rxhubs.testing import InMemoryEventHub, marble_test
from tests.balancing.kit import ProxyStore
from tests.operators.state_kit import FINGERPRINT, counting, read_pair, with_deltas

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
CTX = PartitionContext("ns", "hub", "$Default", "0")


def owned_session(store: InMemoryCheckpointStore, owner: str = "a") -> PartitionSession:
    """A session as the balancing loop makes it: claimed, fenced, its period set."""

    async def claim() -> Ownership:
        [won] = await store.claim_ownership([Ownership("ns", "hub", "$Default", "0", owner)])
        await store.fence_with_state(won)
        return won

    won = asyncio.run(claim())
    session = PartitionSession(CTX, won)
    session.period = won
    return session


def event_batch(seq: int | None, session: Any, *deltas: StateDelta) -> EventBatch:
    events = (Event(b"x", seq, str(seq * 10), T0),) if seq is not None else ()
    return with_deltas(EventBatch(CTX, events, None, None, session), *deltas)


def test_marbles_the_pair_is_one_write_and_a_state_only_change_is_written_at_the_same_position() -> None:
    with marble_test() as t:
        store = InMemoryCheckpointStore()
        session = owned_session(store)
        d = {
            "a": event_batch(0, session, StateDelta("w", "f", {"k1": 1}, {"wm": 0})),
            "b": event_batch(1, session, StateDelta("w", "f", {"k1": 2, "k2": 1}, {"wm": 1})),
            "x": event_batch(None, session, StateDelta("w", "f", {"k1": DELETED}, {"wm": 60})),  # a window closed
            "y": event_batch(None, session, StateDelta("w", "f", {}, {"wm": 60})),  # nothing changed
        }
        calls: list[float] = []
        results = t.start(t.cold("-a-b-----x-y-|", d).pipe(hops.checkpoint(store, max_interval=0.0), ops.do_action(
            lambda _: calls.append(store.calls["update_checkpoint"]))))
        assert results == t.exp("-a-b-----x-y-|", d)  # batches pass unchanged
        assert calls == [1, 2, 3, 3]  # one store call per change (x at the same position), none for y
    assert store.calls["update_checkpoint"] == 3
    position, state = read_pair(store, "ns", "hub", "0")
    assert position == 1
    assert state is not None and dict(state["w"].keys) == {"k2": 1} and state["w"].meta == {"wm": 60}


def test_a_stateful_pipeline_on_a_store_without_state_support_fails_loudly_once() -> None:
    with marble_test() as t:
        plain = ProxyStore(InMemoryCheckpointStore(), t.scheduler)  # fenced, but keeps no state
        d = {k: event_batch(i, None, StateDelta("counts", "f", {"x": i})) for i, k in enumerate("abc")}
        results = t.start(t.cold("-a-b-c-|", d).pipe(hops.checkpoint(plain, max_interval=0.0)))
        assert len(results) == 1 and results[0].time == 201.0
        error = results[0].value.exception
        assert isinstance(error, ConfigurationError) and "counts" in str(error) and "cannot keep" in str(error)
        assert plain.writes == []  # nothing written without its state


def _consumer(hub: InMemoryEventHub, store: Any, owner: str, seen: list[Any], interval: float, **kw: Any) -> Any:
    return rxhubs.consume(
        hub, "$Default", store, owner_id=owner, load_balancing_interval=10.0, ownership_expiration=30.0,
        max_wait=1.0, **kw,
    ).pipe(counting(seen=seen), hops.checkpoint(store, max_interval=interval))


def test_a_handover_flushes_the_pair_and_the_next_owner_restores_it_and_reads_on() -> None:
    hub = InMemoryEventHub(partition_count=2)
    store, scheduler = InMemoryCheckpointStore(), TestScheduler()
    ns, name = hub.fully_qualified_namespace, hub.eventhub_name
    seen_a: list[Any] = []
    seen_b: list[Any] = []
    batches_b: list[EventBatch] = []
    # a writes at once, then once a minute: what it counted after its first write reaches the store only
    # through the flush before it hands the partition over
    _consumer(hub, store, "a", seen_a, 60.0).subscribe(scheduler=scheduler)
    for pid in "01":
        hub.send([b"p", b"q", b"p"], partition_id=pid)
    scheduler.advance_to(2.0)
    for pid in "01":
        hub.send([b"p", b"r"], partition_id=pid)
    scheduler.advance_to(4.0)
    assert {c.partition_id: c.sequence_number for c in store.peek(ns, name, "$Default")[1]} == {"0": 2, "1": 2}

    _consumer(hub, store, "b", seen_b, 60.0).subscribe(batches_b.append, scheduler=scheduler)
    scheduler.advance_to(40.0)  # a hands one partition over to b: it flushes, then releases
    for pid in "01":
        hub.send([b"q", b"s"], partition_id=pid)
    scheduler.advance_to(45.0)
    [(moved, restored)] = seen_b
    assert restored == {"p": 3, "q": 1, "r": 1}  # the state of all 5 events: the flush wrote the last pair
    assert [e.sequence_number for b in batches_b for e in b] == [5, 6]  # no replay: b reads on after 4
    assert seen_a == [("0", None), ("1", None)]
    written = {c.partition_id: c.sequence_number for c in store.peek(ns, name, "$Default")[1]}
    assert written[moved] == 4  # a's flush: b's first write waits its interval (the partition was handed over)
    scheduler.advance_to(40.0 + 60.0 + 1.0)
    position, state = read_pair(store, ns, name, moved)
    assert position == 6
    assert state is not None and state["counts"].keys == {"p": 3, "q": 2, "r": 1, "s": 1}
    assert state["counts"].meta == {"total": 7} and state["counts"].fingerprint == FINGERPRINT


def test_a_paused_former_owners_commit_is_refused_and_the_pair_stays_as_the_new_owner_read_it() -> None:
    hub = InMemoryEventHub(partition_count=1)
    store, scheduler = InMemoryCheckpointStore(), TestScheduler()
    ns, name = hub.fully_qualified_namespace, hub.eventhub_name
    errors: list[Exception] = []
    _consumer(hub, store, "zombie", [], 0.5, on_partition_error=lambda _, e: errors.append(e)).subscribe(
        scheduler=scheduler
    )
    hub.send([b"p", b"q"], partition_id="0")
    scheduler.advance_to(1.0)

    # another consumer takes the partition over behind the zombie's back (it was paused past its expiry)
    [record] = store.peek(ns, name, "$Default")[0]

    async def take_over() -> tuple[Any, Any]:
        [won] = await store.claim_ownership([Ownership(ns, name, "$Default", "0", "other", etag=record.etag)])
        return await store.fence_with_state(won)

    before = asyncio.run(take_over())
    assert before[0].sequence_number == 1 and before[1] is not None
    hub.send([b"p", b"p"], partition_id="0")  # the zombie goes on counting, and tries to commit
    scheduler.advance_to(3.0)

    assert [type(e) for e in errors] == [OwnershipLostError]
    position, state = read_pair(store, ns, name, "0")
    assert position == 1  # the pair the new owner read, untouched
    assert state is not None and state["counts"].keys == {"p": 1, "q": 1}


def test_a_corrupt_saved_state_is_reported_and_its_partition_released_unread_never_reset() -> None:
    hub = InMemoryEventHub(partition_count=2)
    store, scheduler = InMemoryCheckpointStore(), TestScheduler()
    ns, name = hub.fully_qualified_namespace, hub.eventhub_name

    async def corrupt() -> None:  # a former owner committed a pair whose state is not rxhubs state
        [won] = await store.claim_ownership([Ownership(ns, name, "$Default", "0", "old")])
        await store.fence_with_state(won)
        await store.commit_state(rxhubs.Checkpoint(ns, name, "$Default", "0", "10", 1), won, b"RXS1junkjunk")
        await store.claim_ownership([Ownership(ns, name, "$Default", "0", "", etag=won.etag)])  # released

    asyncio.run(corrupt())
    for pid in "01":
        hub.send([b"p", b"q", b"r"], partition_id=pid)
    errors: list[tuple[str, str, Exception]] = []
    batches: list[EventBatch] = []
    seen: list[Any] = []
    _consumer(
        hub, store, "new", seen, 0.5, on_partition_error=lambda c, e: errors.append((c.partition_id, c.operation, e))
    ).subscribe(batches.append, scheduler=scheduler)
    scheduler.advance_to(5.0)

    [(pid, operation, error)] = errors
    assert (pid, operation, type(error).__name__) == ("0", "state", "StateError")
    assert "cannot be restored" in str(error) and "checksum" in str(error)
    assert {b.partition_id for b in batches} == {"1"}  # partition 0 was not read
    assert seen == [("1", None)]
    owners = {o.partition_id: o.owner_id for o in store.peek(ns, name, "$Default")[0]}
    assert owners["0"] == ""  # released, to be tried again after a backoff
    checkpoints = {c.partition_id: c.sequence_number for c in store.peek(ns, name, "$Default")[1]}
    assert checkpoints["0"] == 1  # nothing reset or rewritten
