"""hops.checkpoint in virtual time: coalescing, flushes, ownership, monotonicity, concurrency, store failures."""

from __future__ import annotations

import datetime as dt
import itertools
from typing import Any

import pytest
import reactivex
from reactivex import operators as ops
from reactivex.testing import ReactiveTest, TestScheduler

import rxhubs
from rxhubs import Checkpoint, Event, EventBatch, PartitionContext
from rxhubs import operators as hops
from rxhubs.balancing import PartitionSession
from rxhubs.errors import ConfigurationError, StoreError
from rxhubs.sources import Backoff
from rxhubs.stores import InMemoryCheckpointStore
from rxhubs.testing import InMemoryEventHub, marble_test
from tests.balancing.kit import GROUP, Group, ProxyStore

on_next = ReactiveTest.on_next
T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
CTX = {p: PartitionContext("ns", "hub", GROUP, p) for p in "0123"}
SEQ = {letter: i for i, letter in enumerate("abcdefghij")}


def batch(letter: str, partition_id: str = "0", session: Any = None) -> EventBatch:
    seq = SEQ[letter]
    return EventBatch(CTX[partition_id], (Event(letter.encode(), seq, str(seq * 10), T0),), None, None, session)


def lookup(partition_id: str = "0", session: Any = None) -> dict[str | float, Any]:
    return {letter: batch(letter, partition_id, session) for letter in SEQ}


def written(store: ProxyStore, subscribed: float = 200.0) -> list[Any]:
    letters = {i: letter for letter, i in SEQ.items()}
    return [on_next(t, letters[seq]) for t, _, seq in store.writes]


def stored(store: InMemoryCheckpointStore) -> dict[str, int]:
    return {c.partition_id: c.sequence_number for c in store.observe_list_checkpoints("ns", "hub", GROUP).run()}


def test_marbles_writes_are_coalesced_to_one_per_interval_and_batches_pass_unchanged() -> None:
    with marble_test() as t:
        store = ProxyStore(InMemoryCheckpointStore(), t.scheduler)
        source = t.cold("-a-b-c---d----|", lookup())
        results = t.start(
            source.pipe(hops.checkpoint(store, max_interval=5.0), ops.map(lambda b: b.events[0].body.decode()))
        )
        assert results == t.exp("-a-b-c---d----|")
        assert written(store) == t.exp("-a----c----d---")


def test_marbles_completion_flushes_the_latest_position_first() -> None:
    with marble_test() as t:
        store = ProxyStore(InMemoryCheckpointStore(), t.scheduler, latency=2.0)
        results = t.start(t.cold("-a-b|", lookup()).pipe(hops.checkpoint(store, max_interval=5.0), ops.count()))
        assert written(store) == t.exp("-a--b")
        assert results == [on_next(206.0, 2), ReactiveTest.on_completed(206.0)]  # after the flush was stored
        assert stored(store.inner) == {"0": 1}


def test_marbles_an_upstream_error_is_forwarded_after_the_flush() -> None:
    boom = RuntimeError("boom")
    with marble_test() as t:
        store = ProxyStore(InMemoryCheckpointStore(), t.scheduler)
        results = t.start(
            reactivex.concat(t.cold("-a-c-|", lookup()), reactivex.throw(boom)).pipe(
                hops.checkpoint(store, max_interval=60.0)
            )
        )
        assert written(store) == t.exp("-a---c")
        assert results[-1] == ReactiveTest.on_error(205.0, boom)


def test_every_n_batches_also_triggers_a_write() -> None:
    with marble_test() as t:
        store = ProxyStore(InMemoryCheckpointStore(), t.scheduler)
        t.start(t.cold("-a-b-c-d-e-f-g|", lookup()).pipe(hops.checkpoint(store, max_interval=None, every=3)))
        assert written(store) == t.exp("-----c-----f--g")  # after 3 batches, 3 more, then the flush


def test_at_most_one_write_per_partition_per_interval_whatever_the_rate() -> None:
    scheduler = TestScheduler()
    hub = InMemoryEventHub(4, clock=lambda: scheduler.now)
    store = ProxyStore(InMemoryCheckpointStore(), scheduler)
    for k in range(600):  # 1,000 events per second per partition for 60 s, in batches of 100
        scheduler.schedule_absolute(
            k / 10, lambda *_: [hub.send([b"x"] * 100, partition_id=p) for p in hub.partition_ids]
        )
    pipeline = rxhubs.consume(hub, GROUP, store.inner, owner_id="a", max_batch_size=100).pipe(
        hops.checkpoint(store, max_interval=5.0)
    )
    pipeline.subscribe(scheduler=scheduler)
    scheduler.advance_to(61.0)
    for pid in hub.partition_ids:
        times = [t for t, p, _ in store.writes if p == pid]
        assert all(b - a >= 5.0 for a, b in itertools.pairwise(times)), times
        assert 12 <= len(times) <= 13
    ns, name = hub.fully_qualified_namespace, hub.eventhub_name
    final = {c.partition_id: c.sequence_number for c in store.inner.observe_list_checkpoints(ns, name, GROUP).run()}
    assert final == {p: 59999 for p in hub.partition_ids}


def test_positions_never_go_back() -> None:
    with marble_test() as t:
        store = ProxyStore(InMemoryCheckpointStore(), t.scheduler)
        t.start(t.cold("-d-b-a-e-c|", lookup()).pipe(hops.checkpoint(store, max_interval=0.0)))
        assert written(store) == t.exp("-d-----e")


def test_nothing_is_written_for_a_partition_no_longer_owned() -> None:
    with marble_test() as t:
        store = ProxyStore(InMemoryCheckpointStore(), t.scheduler)
        session = PartitionSession(CTX["0"])
        t.at(4.0, session.lose)
        t.start(t.cold("-a-b---c-|", lookup("0", session)).pipe(hops.checkpoint(store, max_interval=5.0)))
        assert written(store) == t.exp("-a")  # b was pending when the partition was lost; c came after


def test_a_session_flush_writes_the_pending_position_at_once() -> None:
    with marble_test() as t:
        store = ProxyStore(InMemoryCheckpointStore(), t.scheduler, latency=1.0)
        session = PartitionSession(CTX["0"])
        flushed: list[float] = []
        t.at(
            5.0,
            lambda: session.flush().subscribe(
                on_completed=lambda: flushed.append(t.scheduler.clock), scheduler=t.scheduler
            ),
        )
        t.start(t.hot("--a-b----------", lookup("0", session)).pipe(hops.checkpoint(store, max_interval=30.0)))
        assert written(store) == t.exp("--a--b")
        assert flushed == [206.0]


def test_one_write_in_flight_per_partition_and_partitions_write_concurrently() -> None:
    with marble_test() as t:
        store = ProxyStore(InMemoryCheckpointStore(), t.scheduler, latency=3.0)
        source = reactivex.merge(t.cold("-a-b-c-d-e-f|", lookup("0")), t.cold("-a-b-c-d-e-f|", lookup("1")))
        t.start(source.pipe(hops.checkpoint(store, max_interval=0.0)))
        assert store.max_in_flight == {"0": 1, "1": 1}
        by_partition = {p: [(time, seq) for time, q, seq in store.writes if q == p] for p in "01"}
        assert by_partition["0"] == by_partition["1"] == [(201.0, 0), (204.0, 1), (207.0, 3), (210.0, 4), (213.0, 5)]
        assert stored(store.inner) == {"0": 5, "1": 5}


def test_store_errors_are_retried_keeping_the_newest_position() -> None:
    with marble_test() as t:
        inner = InMemoryCheckpointStore()
        store = ProxyStore(inner, t.scheduler)
        inner.fail("update_checkpoint", times=2)
        results = t.start(
            t.cold("-a-b------|", lookup()).pipe(hops.checkpoint(store, max_interval=0.0, retry=Backoff(initial=2.0)))
        )
        # a fails at 1; b fails at 3 (a in flight? no: a's retry is due at 3 and b is newer); b stored at 7
        assert [seq for _, _, seq in store.writes] == [0, 1, 1]
        assert stored(inner) == {"0": 1}
        assert results[-1] == ReactiveTest.on_completed(210.0)


def test_a_persistent_store_failure_is_a_store_error_naming_the_position() -> None:
    with marble_test() as t:
        inner = InMemoryCheckpointStore()
        store = ProxyStore(inner, t.scheduler)
        t.at(2.0, lambda: inner.fail("update_checkpoint", times=None))
        results = t.start(
            t.cold("-a--b-------------", lookup()).pipe(
                hops.checkpoint(store, max_interval=1.0, retry=Backoff(initial=1.0, max_retries=2))
            )
        )
        error = results[-1].value.exception
        assert isinstance(error, StoreError) and "partition 0 at sequence number 1" in str(error)
        assert isinstance(error.__cause__, StoreError)
        assert results[-1].time == 207.0  # tried at 4, 5 and 7
        assert stored(inner) == {"0": 0}  # the last checkpoint written stays: nothing after it counts as done


def test_batches_arriving_while_a_failed_write_backs_off_do_not_spend_its_retries() -> None:
    # The Azurite outage test at a 6 s expiration: reading went on through the outage, and every batch wrote at once,
    # each write one more attempt, so 10 retries were spent within 5 s and the partition was stopped for good
    # ("not written after 11 attempts") although its ownership never lapsed. The retry writes the newest position.
    with marble_test() as t:
        inner = InMemoryCheckpointStore()
        store = ProxyStore(inner, t.scheduler)
        inner.fail("update_checkpoint", times=None)
        t.at(7.5, inner.heal)
        results = t.start(
            t.cold("-a-b-c-d-e-f-g-h-i-j|", lookup()).pipe(
                hops.checkpoint(store, max_interval=0.0, retry=Backoff(initial=1.0, max_retries=3))
            )
        )
        # a fails at 1; retried at 2 (a) and 4 (b, the newest then), failing; at 8 (healed) d, the newest, is written
        assert [time - 200.0 for time, verb in store.calls if "checkpoint" in verb][:4] == [1.0, 2.0, 4.0, 8.0]
        assert [seq for _, _, seq in store.writes][:4] == [0, 0, 1, 3]
        assert results[-1] == ReactiveTest.on_completed(220.0)  # no StoreError: the retries were not used up
        assert stored(inner) == {"0": 9}


def test_a_write_the_store_never_answers_fails_at_the_timeout_and_is_retried() -> None:
    with marble_test() as t:
        inner = InMemoryCheckpointStore()
        store = ProxyStore(inner, t.scheduler)
        store.silent = True  # calls hang until the path heals
        t.at(4.0, lambda: setattr(store, "silent", False))
        results = t.start(
            t.cold("-a------|", lookup()).pipe(
                hops.checkpoint(store, max_interval=0.0, timeout=1.0, retry=Backoff(initial=0.5))
            )
        )
        # a at 1 (no answer: fails at 2), again at 2.5 (fails at 3.5), again at 4.5: written
        assert [t - 200.0 for t, verb in store.calls if "checkpoint" in verb] == [1.0, 2.5, 4.5]
        assert stored(inner) == {"0": 0}
        assert results[-1] == ReactiveTest.on_completed(208.0)
    with pytest.raises(ConfigurationError):
        hops.checkpoint(inner, timeout=0)


def test_works_with_plain_partition_batches() -> None:
    with marble_test() as t:
        hub = t.hub({"0": "-a-b-c"})
        store = InMemoryCheckpointStore()
        t.start(rxhubs.partition_batches(hub, "0").pipe(hops.checkpoint(store, max_interval=2.0)), disposed=210.0)
        ns, name = hub.fully_qualified_namespace, hub.eventhub_name
        assert [c.sequence_number for c in store.observe_list_checkpoints(ns, name, GROUP).run()] == [2]


def test_a_handover_flushes_before_the_release_so_the_next_owner_starts_right_after() -> None:
    g = Group(4, interval=10.0, checkpoint_interval=60.0)
    g.add("a", at=0.0)
    g.traffic(0.0, 40.0, every=0.5)
    g.add("b", at=12.0)
    g.run(45.0)
    assert g.counts() == {"a": 2, "b": 2}
    for pid in g.consumers["b"].owned:
        by_a = [p.sequence_number for p in g.ledger if p.partition_id == pid and p.owner == "a"]
        by_b = [p.sequence_number for p in g.ledger if p.partition_id == pid and p.owner == "b"]
        assert by_a and by_b and by_b[0] == by_a[-1] + 1
    assert g.duplicates() == [] and g.missing() == []


def test_writes_per_partition_per_interval_in_a_balanced_group() -> None:
    g = Group(4, interval=10.0, checkpoint_interval=5.0)
    for name, at in (("a", 0.0), ("b", 4.0)):
        g.add(name, at=at)
    g.traffic(0.0, 100.0, every=0.1, per_partition=5)
    g.run(100.0)
    assert g.counts() == {"a": 2, "b": 2}
    for consumer in g.consumers.values():  # each owner writes at most once per 5 s per partition
        for pid in g.hub.partition_ids:
            times = [t for t, p, _ in consumer.store.writes if p == pid]
            if pid not in consumer.owned:  # handed over: its last write is the flush before the release
                times = times[:-1]
            assert all(b - a >= 5.0 - 1e-9 for a, b in itertools.pairwise(times)), times  # float clock sums


def test_bad_options() -> None:
    store = InMemoryCheckpointStore()
    for kwargs in ({"max_interval": -1.0}, {"every": 0}, {"max_interval": None}, {"max_interval": "5"}):
        with pytest.raises(ConfigurationError):
            hops.checkpoint(store, **kwargs)
    with pytest.raises(ConfigurationError):
        hops.checkpoint(object())
    errors: list[Exception] = []
    reactivex.empty().pipe(hops.checkpoint(store)).subscribe(on_error=errors.append)
    assert isinstance(errors[0], ConfigurationError)


def test_checkpoint_records_are_typed() -> None:
    cp = Checkpoint.of(CTX["2"], batch("c").events[0])
    assert (cp.partition_id, cp.sequence_number, cp.offset) == ("2", 2, "20")
