"""hops.exactly_once in virtual time: coalesced commits, re-delivery, ownership, failures, flushes, resume."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pytest
from reactivex import operators as ops
from reactivex.testing import ReactiveTest, TestScheduler

import rxhubs
from rxhubs import Checkpoint, Event, EventBatch, PartitionContext
from rxhubs import operators as hops
from rxhubs.balancing import PartitionSession
from rxhubs.errors import ConfigurationError, SinkError
from rxhubs.sources import Backoff
from rxhubs.stores import InMemoryCheckpointStore, is_fenced
from rxhubs.tables import InMemoryTable
from rxhubs.testing import InMemoryEventHub, marble_test

on_next = ReactiveTest.on_next
T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
GROUP = "$Default"
CTX = {p: PartitionContext("ns", "hub", GROUP, p) for p in "0123"}
#: a and c are partition 0, b and d partition 1; each letter is one batch of two events
BATCHES = {"a": ("0", 0), "b": ("1", 0), "c": ("0", 2), "d": ("1", 2), "e": ("0", 4), "f": ("0", 6)}


def batch(letter: str, session: Any = None, partition_id: str | None = None) -> EventBatch:
    pid, first = BATCHES[letter]
    pid = partition_id or pid
    events = tuple(Event(letter.encode(), n, str(n), T0) for n in (first, first + 1))
    return EventBatch(CTX[pid], events, None, None, session)


def lookup(sessions: Mapping[str, Any] | None = None) -> dict[str | float, Any]:
    sessions = sessions or {}
    return {k: batch(k, sessions.get(BATCHES[k][0])) for k in BATCHES}


class Recording:
    """An InMemoryTable that records when each commit happened and what it carried, and fails on demand."""

    def __init__(self, scheduler: TestScheduler, failures: int = 0) -> None:
        self.table = InMemoryTable()
        self.scheduler = scheduler
        self.failures = failures
        self.commits: list[tuple[float, str]] = []

    async def positions(self, partitions: Sequence[PartitionContext]) -> Mapping[str, int | None]:
        return await self.table.positions(partitions)

    async def commit(
        self, batches: Sequence[EventBatch], *, owned: Callable[[PartitionContext], bool]
    ) -> hops.CommitResult:
        if self.failures:
            self.failures -= 1
            raise ConnectionError("database unreachable")
        self.commits.append((self.scheduler.clock, "".join(b.events[0].body.decode() for b in batches)))
        return await self.table.commit(batches, owned=owned)

    def committed(self) -> list[Any]:
        return [on_next(t, letters) for t, letters in self.commits]


def letters() -> Callable[[Any], Any]:
    return ops.map(lambda b: b.events[0].body.decode())


def test_marbles_commits_are_coalesced_across_partitions_and_batches_go_on_after_their_commit() -> None:
    with marble_test() as t:
        sink = Recording(t.scheduler)
        source = t.cold("-a-b-c---d----|", lookup())
        results = t.start(source.pipe(hops.exactly_once(sink, max_interval=5.0), letters()))
        assert sink.committed() == t.exp("-a----(bc)-d")  # a group spans its characters: d is at 11
        assert results == t.exp("-a----(b,c)d--|")
        assert [r["sequenceNumber"] for r in sink.table.rows] == [0, 1, 0, 1, 2, 3, 2, 3]
        assert sink.table.position(CTX["0"]) == 3 and sink.table.position(CTX["1"]) == 3


def test_max_batches_commits_before_the_interval_is_up() -> None:
    with marble_test() as t:
        sink = Recording(t.scheduler)
        t.start(t.cold("-a-c-e-f-|", lookup()).pipe(hops.exactly_once(sink, max_interval=60.0, max_batches=2)))
        assert sink.committed() == t.exp("-a---(ce)f")  # a at once, c+e as 2 wait, f at completion


def test_a_batch_delivered_again_is_written_once_and_a_straddling_one_writes_only_what_is_new() -> None:
    table = InMemoryTable()
    scheduler = TestScheduler()

    def events(first: int, last: int) -> EventBatch:
        return EventBatch(CTX["0"], tuple(Event(b"x", n, str(n), T0) for n in range(first, last + 1)))

    import reactivex

    reactivex.from_iterable([events(0, 100), events(0, 100), events(90, 120), events(121, 130)]).pipe(
        hops.exactly_once(table, max_interval=0.0)
    ).subscribe(scheduler=scheduler)
    scheduler.start()
    numbers = [r["sequenceNumber"] for r in table.rows]
    assert numbers == list(range(131))
    assert table.position(CTX["0"]) == 130


def test_batches_of_a_partition_no_longer_owned_are_neither_written_nor_passed_on() -> None:
    with marble_test() as t:
        sink = Recording(t.scheduler)
        session = PartitionSession(CTX["0"])
        t.at(4.0, session.lose)
        results = t.start(t.cold("-a-c-e-b|", lookup({"0": session})).pipe(
            hops.exactly_once(sink, max_interval=5.0), letters()))
        assert sink.committed() == t.exp("-a-----b")  # c waited for the interval, then the partition was lost
        assert results == t.exp("-a-----b|")
        assert {r["partition"] for r in sink.table.rows[2:]} == {"1"}


def test_a_failed_commit_is_retried_with_what_arrived_meanwhile() -> None:
    with marble_test() as t:
        sink = Recording(t.scheduler, failures=2)
        session = PartitionSession(CTX["0"])
        reported: list[str] = []
        session.bind(lambda s, op, e: reported.append(op), lambda s, op, e: pytest.fail("must not stop"))
        results = t.start(t.cold("-a-c-----|", lookup({"0": session})).pipe(
            hops.exactly_once(sink, max_interval=0.0, retry=Backoff(initial=1.0, maximum=1.0)), letters()))
        assert reported == ["checkpoint", "checkpoint"]  # the two failures were felt
        assert sink.committed() == t.exp("---(ac)")  # failed at 1 and 2 (a), then a and c together at 3
        assert results == t.exp("---(a,c)-|")


def test_when_retries_run_out_only_that_partition_stops_and_nothing_after_it_is_written() -> None:
    with marble_test() as t:
        sink = Recording(t.scheduler, failures=3)
        session = PartitionSession(CTX["0"])
        stopped: list[Exception] = []
        session.bind(lambda s, op, e: None, lambda s, op, e: stopped.append(e))
        results = t.start(t.cold("-a---c-e-|", lookup({"0": session})).pipe(
            hops.exactly_once(sink, max_interval=0.0, retry=Backoff(initial=1.0, maximum=1.0, max_retries=2)),
            letters()))
        assert len(stopped) == 1 and isinstance(stopped[0], SinkError)
        assert sink.table.rows == []  # c and e came after a failed: writing them would leave a gap
        assert results == t.exp("---------|")


def test_without_sessions_an_exhausted_commit_errors_the_stream() -> None:
    with marble_test() as t:
        sink = Recording(t.scheduler, failures=5)
        results = t.start(t.cold("-a-|", lookup()).pipe(
            hops.exactly_once(sink, max_interval=0.0, retry=Backoff(initial=1.0, max_retries=1))))
        assert len(results) == 1 and isinstance(results[0].value.exception, SinkError)


def test_a_session_flush_commits_its_batches_at_once() -> None:
    with marble_test() as t:
        sink = Recording(t.scheduler)
        session = PartitionSession(CTX["0"])
        flushed: list[float] = []
        t.at(5.0, lambda: session.flush().subscribe(
            on_completed=lambda: flushed.append(t.scheduler.clock), scheduler=t.scheduler))
        t.start(t.hot("--a-c-------", lookup({"0": session})).pipe(hops.exactly_once(sink, max_interval=30.0)))
        assert sink.committed() == t.exp("--a--c")
        assert flushed == [205.0]


def test_held_batches_count_as_in_flight_until_their_commit() -> None:
    hub = InMemoryEventHub(1)
    hub.send([b"x"] * 30, partition_id="0")
    scheduler = TestScheduler()
    sink = Recording(scheduler)
    rxhubs.partition_batches(hub, "0", max_batch_size=1, max_inflight=3).pipe(
        hops.exactly_once(sink, max_interval=10.0)
    ).subscribe(scheduler=scheduler)
    scheduler.advance_to(25.0)
    assert [len(letters) for _, letters in sink.commits] == [1, 3, 3]  # at 0, 10, 20: three held at most


def test_a_new_owner_resumes_right_after_the_tables_position() -> None:
    scheduler = TestScheduler()
    hub = InMemoryEventHub(1, clock=lambda: scheduler.now)
    hub.send([str(n).encode() for n in range(10)], partition_id="0")
    store, table = InMemoryCheckpointStore(), InMemoryTable()
    ctx = PartitionContext(hub.fully_qualified_namespace, hub.eventhub_name, GROUP, "0")
    events = tuple(Event(b"x", n, str(n), T0) for n in range(6))
    scheduler.start  # noqa: B018 - the table already holds 0..5; the checkpoint says only 2
    import asyncio

    asyncio.run(table.commit([EventBatch(ctx, events)], owned=lambda _: True))
    asyncio.run(store.update_checkpoint(Checkpoint(ctx.fully_qualified_namespace, hub.eventhub_name, GROUP, "0",
                                                   "2", 2)))
    read: list[int] = []
    rxhubs.consume(hub, GROUP, store, positions=table).pipe(
        ops.do_action(lambda b: read.extend(e.sequence_number for e in b)), hops.exactly_once(table)
    ).subscribe(scheduler=scheduler)
    scheduler.advance_to(5.0)
    assert read == [6, 7, 8, 9]
    assert [r["sequenceNumber"] for r in table.rows] == list(range(10))


def test_the_wrapped_store_stays_fenced_or_unfenced_like_the_store() -> None:
    from rxhubs.balancing._positions import with_table_positions

    class Unfenced(InMemoryCheckpointStore):
        fence = None  # type: ignore[assignment]

    assert is_fenced(with_table_positions(InMemoryCheckpointStore(), InMemoryTable()))
    assert not is_fenced(with_table_positions(Unfenced(), InMemoryTable()))


def test_heartbeat_batches_go_on_without_a_commit() -> None:
    with marble_test() as t:
        sink = Recording(t.scheduler)
        empty = EventBatch(CTX["0"], ())
        results = t.start(t.cold("-h-h|", {"h": empty}).pipe(hops.exactly_once(sink, max_interval=0.0), ops.count()))
        assert sink.commits == [] and results[0].value.value == 2


def test_without_a_fenced_store_the_listed_checkpoints_are_the_tables_positions() -> None:
    import asyncio

    from rxhubs import Ownership
    from rxhubs.balancing._positions import with_table_positions

    class Unfenced(InMemoryCheckpointStore):
        fence = None  # type: ignore[assignment]

    store, table = Unfenced(), InMemoryTable()
    asyncio.run(table.commit([batch("c", partition_id="1"), batch("c", partition_id="2")], owned=lambda _: True))

    async def listed() -> dict[str, int]:
        await store.update_checkpoint(Checkpoint("ns", "hub", GROUP, "0", "0", 0))
        await store.update_checkpoint(Checkpoint("ns", "hub", GROUP, "1", "0", 0))
        await store.claim_ownership([Ownership("ns", "hub", GROUP, "2", "me")])  # claimed, no checkpoint yet
        wrapped = with_table_positions(store, table)
        return {c.partition_id: c.sequence_number for c in await wrapped.list_checkpoints("ns", "hub", GROUP)}

    assert asyncio.run(listed()) == {"0": 0, "1": 3, "2": 3}  # the table wins where it has a position


def test_bad_options_are_configuration_errors() -> None:
    with pytest.raises(ConfigurationError):
        hops.exactly_once(object())  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError):
        hops.exactly_once(InMemoryTable(), max_interval=None)
    with pytest.raises(ConfigurationError):
        hops.exactly_once(InMemoryTable(), max_batches=0)
    with pytest.raises(ConfigurationError):
        rxhubs.consume(InMemoryEventHub(1), GROUP, InMemoryCheckpointStore(), positions=object())  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="start= and positions="):
        rxhubs.consume(InMemoryEventHub(1), GROUP, InMemoryCheckpointStore(), positions=InMemoryTable(), start="-1")


@pytest.mark.parametrize("resume_from_table", [True, False])
def test_two_consumers_sharing_a_table_through_handovers_write_each_event_once(resume_from_table: bool) -> None:
    scheduler = TestScheduler()
    read: list[tuple[str, int]] = []
    hub = InMemoryEventHub(4, clock=lambda: scheduler.now)
    store, table = InMemoryCheckpointStore(), InMemoryTable()
    for k in range(40):  # 10 events per partition every second for 40 s
        scheduler.schedule_absolute(k, lambda *_: [hub.send([b"x"] * 10, partition_id=p) for p in hub.partition_ids])

    def consumer(name: str) -> Any:
        return rxhubs.consume(hub, GROUP, store, owner_id=name, positions=table if resume_from_table else None,
                              load_balancing_interval=2.0, ownership_expiration=6.0, max_batch_size=7).pipe(
            ops.do_action(lambda b: read.extend((b.partition_id, e.sequence_number) for e in b)),
            hops.exactly_once(table, max_interval=1.5)).subscribe(scheduler=scheduler)

    a = consumer("a")
    scheduler.schedule_absolute(5.0, lambda *_: consumer("b"))  # b joins: partitions move from a to b
    scheduler.schedule_absolute(20.0, lambda *_: a.dispose())  # a leaves: b takes everything over
    scheduler.advance_to(60.0)
    rows = [(r["partition"], r["sequenceNumber"]) for r in table.rows]
    assert len(rows) == len(set(rows)), "an event was written twice"
    assert sorted(rows) == sorted((p, n) for p in hub.partition_ids for n in range(400))
    read_again = len(read) - len(set(read))
    if resume_from_table:  # each new owner started right after the table (handovers commit first)
        assert read_again == 0
    else:  # no checkpoints: each new owner read its partition from the start, and the table dropped it all
        assert read_again > 100
