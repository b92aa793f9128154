"""Batches users shape (``min_batch_size`` with ``max_wait``), in virtual time with the in-memory hub.

The rule: a partition's batch is delivered once it holds ``min_batch_size`` events, or ``max_wait`` seconds
after its first event arrived; never more than ``max_batch_size``. A partial batch held when the partition
closes is dropped undelivered, and whoever reads the partition next reads it from the checkpoint.
"""

from __future__ import annotations

from typing import Any

import pytest
from reactivex.testing import TestScheduler

import rxhubs
from rxhubs import EventBatch
from rxhubs import operators as hops
from rxhubs._shutdown import shutdown_scope
from rxhubs.errors import ConfigurationError, TransportError
from rxhubs.sources import Backoff
from rxhubs.stores import InMemoryCheckpointStore
from rxhubs.testing import InMemoryEventHub, marble_test, symbols, to_symbols

GROUP = "$Default"
OPTIONS: dict[str, Any] = {"load_balancing_interval": 2.0, "ownership_expiration": 6.0}


def test_marbles_a_batch_is_due_at_n_events_or_max_wait_after_its_first() -> None:
    with marble_test() as t:
        hub = t.hub({"0": "-a-b-c---d------e-f-g-h---"})
        source = rxhubs.partition_batches(hub, "0", min_batch_size=3, max_wait=4.0)
        # abc: three events at 5; d: alone, 4 s after it arrived; efg: three at 20; h waits (due at 26)
        assert t.start(source.pipe(symbols()), disposed=225) == t.exp("-----x-------y------z", {
            "x": "abc", "y": "d", "z": "efg"})


def test_marbles_without_min_batch_size_batches_are_what_each_pull_finds() -> None:
    with marble_test() as t:
        hub = t.hub({"0": "-a-b-c---d"})
        source = rxhubs.partition_batches(hub, "0", max_wait=4.0)
        assert t.start(source.pipe(symbols()), disposed=215) == t.exp("-a-b-c---d")


def test_a_backlog_is_cut_at_max_batch_size_and_the_rest_waits_for_its_time() -> None:
    hub = InMemoryEventHub(partition_count=1)
    hub.send(list("abcdefghij"), partition_id="0")
    scheduler, seen = TestScheduler(), []
    rxhubs.partition_batches(hub, "0", min_batch_size=3, max_batch_size=4, max_wait=4.0).subscribe(
        lambda b: seen.append((scheduler.clock, to_symbols(b))), scheduler=scheduler
    )
    scheduler.advance_to(10.0)
    assert seen == [(0.0, "abcd"), (0.0, "efgh"), (4.0, "ij")]
    hub.send(list("kl"), partition_id="0")
    scheduler.advance_to(11.0)
    hub.send(list("mnopqr"), partition_id="0")  # two held, six more: the batch takes two of them
    scheduler.advance_to(20.0)
    assert seen[3:] == [(11.0, "klmn"), (11.0, "opqr")]


def test_backpressure_holds_a_due_batch_until_the_one_in_flight_is_acknowledged() -> None:
    hub = InMemoryEventHub(partition_count=1)
    scheduler, seen, acks = TestScheduler(), [], []

    def slow(batch: EventBatch) -> None:
        seen.append((scheduler.clock, to_symbols(batch)))
        acks.append(batch.hold())

    rxhubs.partition_batches(hub, "0", min_batch_size=2, max_batch_size=3, max_wait=1.0, max_inflight=1).subscribe(
        slow, scheduler=scheduler
    )
    scheduler.schedule_absolute(1.0, lambda *_: hub.send(list("ab"), partition_id="0"))
    scheduler.schedule_absolute(2.0, lambda *_: hub.send(list("cdefghijk"), partition_id="0"))
    scheduler.advance_to(50.0)
    assert seen == [(1.0, "ab")]  # the rest stays in the hub's receiver: nothing is pulled past the bound
    acks[0]()
    scheduler.advance_to(51.0)
    assert seen[1:] == [(50.0, "cde")]  # at most max_batch_size in a batch, whatever waited
    acks[1]()
    acks[1]()  # counted once
    scheduler.advance_to(52.0)
    assert seen[2:] == [(51.0, "fgh")]


def test_heartbeats_come_only_when_nothing_is_held() -> None:
    hub = InMemoryEventHub(partition_count=1)
    scheduler, seen = TestScheduler(), []
    rxhubs.partition_batches(hub, "0", min_batch_size=5, max_wait=2.0, emit_empty=True).subscribe(
        lambda b: seen.append((scheduler.clock, to_symbols(b))), scheduler=scheduler
    )
    scheduler.schedule_absolute(4.5, lambda *_: hub.send(["a"], partition_id="0"))
    scheduler.advance_to(9.0)
    # empty batches every 2 s while idle; none while "a" is held (4.5 to 6.5); then idle again
    assert seen == [(2.0, ""), (4.0, ""), (6.5, "a"), (8.5, "")]


def test_a_retried_receive_error_drops_the_held_events_and_reads_them_again() -> None:
    hub = InMemoryEventHub(partition_count=1)
    scheduler, seen = TestScheduler(), []
    source = rxhubs.partition_batches(hub, "0", min_batch_size=4, max_wait=10.0, retry=Backoff(initial=1.0))
    source.subscribe(lambda b: seen.append((scheduler.clock, to_symbols(b))), scheduler=scheduler)
    scheduler.schedule_absolute(1.0, lambda *_: hub.send(list("ab"), partition_id="0"))
    scheduler.schedule_absolute(2.0, lambda *_: hub.inject_error("0", TransportError("link dropped")))
    scheduler.schedule_absolute(3.0, lambda *_: hub.send(list("c"), partition_id="0"))
    scheduler.schedule_absolute(5.0, lambda *_: hub.send(list("d"), partition_id="0"))
    scheduler.advance_to(30.0)
    # the pull woken at 3 fails; the retry reopens after the last event emitted (none) and reads a, b, c again
    assert [s for _, s in seen] == ["abcd"]
    assert seen[0][0] == 5.0


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"min_batch_size": 0}, "min_batch_size must be an int >= 1"),
        ({"min_batch_size": True}, "min_batch_size must be an int >= 1"),
        ({"min_batch_size": 400}, r"min_batch_size \(400\) must be at most max_batch_size \(300\)"),
    ],
)
def test_bad_shapes_are_configuration_errors_at_the_call(options: dict[str, Any], message: str) -> None:
    hub = InMemoryEventHub(partition_count=1)
    with pytest.raises(ConfigurationError, match=message):
        rxhubs.partition_batches(hub, "0", **options)
    with pytest.raises(ConfigurationError, match=message):
        rxhubs.consume(hub, GROUP, InMemoryCheckpointStore(), **options)


def test_consume_delivers_shaped_batches_and_checkpoints_once_per_batch() -> None:
    with marble_test() as t:
        hub = t.hub({"0": "-abc-d-ef-g-h------", "1": "--x---------y-z----"})
        store = t.store()
        written: list[tuple[str, str]] = []

        def work(batch: EventBatch) -> EventBatch:
            written.append((batch.partition_id, to_symbols(batch)))
            return batch

        pipeline = rxhubs.consume(hub, GROUP, store, owner_id="me", min_batch_size=4, max_wait=6.0, **OPTIONS).pipe(
            hops.process(work), hops.checkpoint(store, max_interval=0.0)
        )
        writes: list[int] = []
        t.at(30, lambda: writes.append(store.calls["update_checkpoint"]))
        marks = t.checkpoints_at(hub, store, 30)
        t.start(pipeline, disposed=240)
    # partition 0: abcd full at 5; efgh full at 12; partition 1: x alone at 8 (6 s); yz at 18 (6 s after y)
    assert sorted(written) == [("0", "abcd"), ("0", "efgh"), ("1", "x"), ("1", "yz")]
    assert writes == [4]  # one checkpoint write per batch
    assert marks == {"0": 7, "1": 2}


def test_a_handover_drops_the_partial_batch_and_the_new_owner_reads_it_once() -> None:
    # "me" holds a partial batch of partition 1 (x at 3, y at 7: due at 13) when "peer", joined at 5, takes it
    with marble_test() as t:
        hub = t.hub({"0": "-a-----------------", "1": "---x---y-----z-----"})
        store = t.store()
        shape = {"min_batch_size": 10, "max_wait": 10.0}
        peer = t.peer(hub, store, "-----j", owner_id="peer", pipeline=lambda s: hops.checkpoint(s, max_interval=0.0),
                      **shape, **OPTIONS)
        mine: list[EventBatch] = []
        pipeline = rxhubs.consume(hub, GROUP, store, owner_id="me", **shape, **OPTIONS).pipe(
            hops.checkpoint(store, max_interval=0.0)
        )
        owners = t.ownership_at(hub, store, 9)
        marks = t.checkpoints_at(hub, store, 40)
        results = t.start(pipeline, disposed=260)
        mine = [r.value.value for r in results if r.value.kind == "N"]
    moved = next(p for p, owner in owners.items() if owner == "peer")
    assert moved == "1", owners
    read_by_me = "".join(to_symbols(b) for b in mine if b.partition_id == moved)
    read_by_peer = "".join(to_symbols(b) for b in peer.batches if b.partition_id == moved)
    assert read_by_me == ""  # x and y were held, never delivered: dropped at the handover
    assert read_by_peer == "xyz"  # the new owner read them from the checkpoint: once, in order
    assert marks["1"] == 2


def test_a_graceful_stop_drops_the_partial_batch_and_a_restart_reads_it_once() -> None:
    scheduler = TestScheduler()
    hub = InMemoryEventHub(1, clock=lambda: scheduler.now)
    store = InMemoryCheckpointStore()
    seen: list[Any] = []

    def run(owner: str) -> Any:
        with shutdown_scope() as stop:
            subscription = (
                rxhubs.consume(hub, GROUP, store, owner_id=owner, min_batch_size=3, max_batch_size=3,
                               max_wait=30.0, **OPTIONS)
                .pipe(hops.checkpoint(store, max_interval=0.0))
                .subscribe(lambda b: seen.append((owner, to_symbols(b))),
                           on_completed=lambda: seen.append((owner, "done")), scheduler=scheduler)
            )
        return stop, subscription

    stop, first = run("first")
    scheduler.schedule_absolute(1.0, lambda *_: hub.send(list("abcd"), partition_id="0"))
    scheduler.advance_to(5.0)
    assert seen == [("first", "abc")]  # d is held for its batch (due at 31)
    stop.request()
    scheduler.advance_to(6.0)
    assert seen == [("first", "abc"), ("first", "done")]  # completed without delivering d
    ns, name = hub.fully_qualified_namespace, hub.eventhub_name
    assert [c.sequence_number for c in store.observe_list_checkpoints(ns, name, GROUP).run()] == [2]
    first.dispose()
    _, second = run("second")
    scheduler.schedule_absolute(7.0, lambda *_: hub.send(list("ef"), partition_id="0"))
    scheduler.advance_to(10.0)
    assert seen[2:] == [("second", "def")]  # d read again after the checkpoint, once: nothing lost
    second.dispose()

