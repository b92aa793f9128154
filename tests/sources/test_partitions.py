"""rxhubs.partitions / consume in virtual time: claims, joins and leaves, expiry, stealing, handover, stop."""

from __future__ import annotations

from typing import Any

import pytest
from reactivex import operators as ops
from reactivex.testing import ReactiveTest, TestScheduler

import rxhubs
from rxhubs import CloseReason, Ownership, PartitionStream, Position
from rxhubs._shutdown import shutdown_scope
from rxhubs.balancing import presence_group
from rxhubs.balancing._looks import look_gap
from rxhubs.errors import ConfigurationError
from rxhubs.stores import InMemoryCheckpointStore
from rxhubs.testing import InMemoryEventHub, marble_test
from tests.balancing.kit import GROUP, Group

on_next, on_completed = ReactiveTest.on_next, ReactiveTest.on_completed
I = 10.0  # noqa: E741 - the load-balancing interval of these tests


def test_marbles_one_consumer_claims_every_partition_at_its_first_round() -> None:
    with marble_test() as t:
        hub = t.hub(partition_count=3)
        store = InMemoryCheckpointStore()
        source = rxhubs.partitions(hub, GROUP, store, owner_id="a").pipe(ops.map(lambda s: s.partition_id))
        assert t.start(source, disposed=230.0) == [on_next(200.0, "0"), on_next(200.0, "1"), on_next(200.0, "2")]


def test_marbles_consume_merges_the_partitions_batches() -> None:
    with marble_test() as t:
        hub = t.hub({"0": "-a---c", "1": "---b---d"})
        source = rxhubs.consume(hub, GROUP, InMemoryCheckpointStore(), owner_id="a").pipe(
            ops.map(lambda b: "".join(e.body_as_str() for e in b))
        )
        assert t.start(source, disposed=210.0) == t.exp("-a-b-c-d")


def test_claims_over_successive_intervals_a_second_consumer_gets_half_within_two_intervals() -> None:
    g = Group(32, interval=I)
    g.add("a", at=0.0)
    g.run(1.0)
    assert g.counts() == {"a": 32}
    g.add("b", at=15.0)
    g.run(15.0 + 2 * I)
    assert g.counts() == {"a": 16, "b": 16}
    assert all(len(r) == 1 for r in g.readers_per_partition().values())
    # a's sixteen were handed over (completed with OWNERSHIP_LOST), none lost to expiry
    assert [reason for _, _, reason in g.consumers["a"].closed] == [CloseReason.OWNERSHIP_LOST] * 16
    assert g.store_owners() == {str(p): ("a" if p < 16 else "b") for p in range(32)}


def test_a_newcomer_claims_a_handed_over_partition_within_a_look_not_at_its_next_round() -> None:
    """b joins at 5 s; a sees it at its round at 10 s and releases half at once. b's next round is due at 15 s,
    but b, awaiting a handover, looks at the records from a's next round (10 s) every look_gap seconds: it
    holds its half one look later."""
    g = Group(8, interval=I)
    g.add("a", at=0.0)
    b = g.add("b", at=5.0)
    g.run(9.9)
    assert g.counts() == {"a": 8, "b": 0}
    g.run(10.0 + look_gap(I) + 0.01)
    assert g.counts() == {"a": 4, "b": 4}
    rounds = {t for t, verb in b.store.calls if verb == "claim_ownership"}
    looks = [t for t, verb in b.store.calls if verb == "list_ownership" and t not in rounds]
    assert looks and min(looks) >= 10.0, b.store.calls  # not before a could have seen b (a renewed at 0)
    assert all(len(r) == 1 for r in g.readers_per_partition().values())


def test_a_handover_seen_half_done_is_looked_at_again_one_gap_later_not_at_the_owners_next_round() -> None:
    """a releases its idle partitions at once but partition 7 only when its batch in flight finished (3 s of work):
    b's look catches the first releases and claims them; the last one follows in the next look, not at a's next
    round (20 s), which is when a consumer that trusted only the owner's round would look again."""
    g = Group(8, interval=I, work=3.0)
    g.add("a", at=0.0)
    b = g.add("b", at=5.0)
    g.at(9.5, lambda: g.hub.send([b"x"], partition_id="7"))  # a batch of partition 7 in flight at a's round
    g.run(10.0 + look_gap(I) + 0.01)
    assert g.counts() == {"a": 5, "b": 3}  # 4, 5 and 6 were released at once; 7 is still draining at a
    g.run(12.5 + look_gap(I) + 0.01)  # its batch finished at 12.5 s; a released it then
    assert g.counts() == {"a": 4, "b": 4}
    assert b.owned == {"4", "5", "6", "7"}
    assert all(len(r) == 1 for r in g.readers_per_partition().values())


def test_a_newcomer_whose_round_falls_between_the_owners_renewal_and_its_release_looks_again_at_once() -> None:
    """a balances at 10 s (renews, sees b) and hands over partitions 4-7 once their batches in flight finished
    (6 s of work, at 15.5 s). b's round at 15 s sees a's renewal but no release yet: a has balanced since b began
    awaiting, so the release is under way, and b looks one gap later instead of at a's next round (20 s)."""
    g = Group(8, interval=I, work=6.0)
    g.add("a", at=0.0)
    b = g.add("b", at=5.0)
    g.at(9.5, lambda: [g.hub.send([b"x"], partition_id=str(p)) for p in range(4, 8)])
    g.run(15.0 + 0.01)
    assert g.counts() == {"a": 8, "b": 0}  # a is still draining 4-7
    g.run(15.0 + look_gap(I) + 0.01)  # released at 15.5 s, seen by the look at 16.25 s
    assert b.owned == {"4", "5", "6", "7"}
    assert all(len(r) == 1 for r in g.readers_per_partition().values())


def test_looks_stop_once_nothing_is_awaited_store_calls_in_steady_state_are_one_round_per_interval() -> None:
    g = Group(8, interval=I)
    g.add("a", at=0.0)
    b = g.add("b", at=5.0)
    g.run(40.0)
    assert g.counts() == {"a": 4, "b": 4}
    g.run(40.0 + 10 * I)
    steady = [verb for t, verb in b.store.calls if 40.0 <= t < 40.0 + 10 * I]
    # each round: the group's records, the presence records, one claim; no looks in between
    assert steady.count("list_ownership") == 2 * 10 and steady.count("claim_ownership") == 10


def test_awaiting_looks_end_after_one_expiration_when_the_owner_never_releases() -> None:
    """An owner that never finishes its handover (batches that never complete) does not cost looks forever."""
    g = Group(4, interval=I, work=10_000.0)
    g.traffic(0.5, 2.0)
    g.add("a", at=0.0)
    b = g.add("b", at=5.0)
    g.run(59.0)  # a gives up waiting for its batches 60 s after the revoke
    assert g.counts() == {"a": 4, "b": 0}
    rounds = {t for t, verb in b.store.calls if verb == "claim_ownership"}
    looks = [t for t, verb in b.store.calls if verb == "list_ownership" and t not in rounds]
    assert looks and min(looks) >= 10.0  # b awaited from a's next round on
    assert max(looks) <= 5.0 + g.expiry + look_gap(I)  # and stopped looking one expiration after its first round


def test_a_third_consumer_joins_and_leaves_nothing_waits_for_expiry() -> None:
    g = Group(12, interval=I)
    g.add("a", at=0.0)
    g.add("b", at=3.0)
    g.run(3.0 + 2 * I)
    assert g.counts() == {"a": 6, "b": 6}
    c = g.add("c", at=40.0)
    g.run(40.0 + 2 * I)
    assert g.counts() == {"a": 4, "b": 4, "c": 4}
    g.at(70.0, c.leave)
    g.run(70.0 + I)  # released at once: the others claim at their next round, long before the 30 s expiry
    assert sorted(g.store_owners().values()).count("c") == 0
    assert {n: v for n, v in g.counts().items() if n != "c"} == {"a": 6, "b": 6}
    presence = g.store.observe_list_ownership(
        g.hub.fully_qualified_namespace, g.hub.eventhub_name, presence_group(GROUP)
    )
    assert {r.partition_id: r.owner_id for r in presence.run()} == {"a": "a", "b": "b", "c": ""}


def test_rebalance_32_partitions_1_4_2_within_two_intervals_each_time() -> None:
    g = Group(32, interval=I)
    g.add("a", at=0.0)
    for n, at in zip("bcd", (20.0, 21.0, 22.5), strict=True):
        g.add(n, at=at)
    g.run(22.5 + 2 * I)
    assert g.counts() == {"a": 8, "b": 8, "c": 8, "d": 8}
    g.at(60.0, g.consumers["c"].leave)
    g.at(60.0, g.consumers["d"].leave)
    g.run(60.0 + 2 * I)
    assert {n: len(c.owned) for n, c in g.consumers.items() if n in "ab"} == {"a": 16, "b": 16}


def test_a_silent_crash_is_taken_over_after_expiry() -> None:
    g = Group(8, interval=I, expiry=30.0)
    g.add("a", at=0.0)
    b = g.add("b", at=1.0)
    g.traffic(0.0, 120.0, every=1.0)
    g.run(30.0)
    assert g.counts() == {"a": 4, "b": 4}
    g.at(40.0, b.crash)
    g.run(40.0)
    renewed = max(t for t, verb in b.store.calls if verb == "claim_ownership")  # b's last round
    g.run(renewed + 30.0 - 0.01)  # b's records are live until one expiry after it, nobody takes them before
    assert g.counts() == {"a": 4}
    g.run(renewed + 30.0 + I / 8)  # a looks again right after they expire (not at its next round)
    assert g.counts() == {"a": 8}
    g.run(125.0)
    assert g.missing() == []  # b's unfinished work is read again from its checkpoints


def test_stealing_from_a_consumer_that_does_not_cooperate() -> None:
    """An owner without a presence record (the SDK's processor) keeps renewing; rxhubs steals its surplus."""
    g = Group(8, interval=I)
    hub = g.hub
    etags: dict[str, str | None] = {str(p): None for p in range(8)}

    def sdk_renews(*_: Any) -> None:
        claims = [
            Ownership(hub.fully_qualified_namespace, hub.eventhub_name, GROUP, p, "sdk", None, e)
            for p, e in etags.items()
        ]
        won = g.store.observe_claim_ownership(claims).run()
        kept = {w.partition_id: w.etag for w in won}
        etags.clear()
        etags.update(kept)

    g.scheduler.schedule_periodic(I, sdk_renews)
    g.at(0.0, sdk_renews)
    g.add("rx", at=5.0)
    g.run(5.0 + 2 * I)
    assert g.counts() == {"rx": 4}
    assert sorted(etags) == ["0", "1", "2", "3"]  # the SDK lost its compare-and-swap on the stolen four


def test_release_on_dispose_and_the_presence_record_is_released_too() -> None:
    g = Group(4, interval=I)
    a = g.add("a", at=0.0)
    g.run(5.0)
    g.at(6.0, a.leave)
    g.run(6.5)
    assert g.store_owners() == {str(p): "" for p in range(4)}
    presence = g.store.observe_list_ownership(
        g.hub.fully_qualified_namespace, g.hub.eventhub_name, presence_group(GROUP)
    )
    assert [r.owner_id for r in presence.run()] == [""]


def test_graceful_handover_no_event_processed_by_two_owners_at_once_and_no_duplicates() -> None:
    g = Group(8, interval=I, work=0.8, checkpoint_interval=5.0)
    g.add("a", at=0.0)
    g.traffic(0.0, 100.0, every=0.25)
    g.add("b", at=23.0)
    g.add("c", at=47.0)
    g.run(130.0)
    assert g.counts() == {"a": 3, "b": 3, "c": 2}
    assert g.overlaps() == []
    assert g.duplicates() == []
    assert g.missing() == []
    assert len(g.ledger) == sum(g.sent.values()) == 8 * 400


def test_graceful_stop_flushes_checkpoints_releases_everything_and_completes() -> None:
    scheduler = TestScheduler()
    hub = InMemoryEventHub(3, clock=lambda: scheduler.now)
    store = InMemoryCheckpointStore()
    for pid in hub.partition_ids:
        hub.send([b"x"] * 5, partition_id=pid)
    seen: list[Any] = []
    with shutdown_scope() as stop:
        subscription = (
            rxhubs.consume(hub, GROUP, store, owner_id="a", load_balancing_interval=I)
            .pipe(rxhubs.operators.checkpoint(store, max_interval=60.0))
            .subscribe(seen.append, on_completed=lambda: seen.append("done"), scheduler=scheduler)
        )
    scheduler.advance_to(1.0)
    hub.send([b"y"], partition_id="1")
    scheduler.advance_to(2.0)
    stop.request()
    scheduler.advance_to(3.0)
    assert seen[-1] == "done"
    ns, name = hub.fully_qualified_namespace, hub.eventhub_name
    assert {c.partition_id: c.sequence_number for c in store.observe_list_checkpoints(ns, name, GROUP).run()} == {
        "0": 4,
        "1": 5,
        "2": 4,
    }
    assert {o.owner_id for o in store.observe_list_ownership(ns, name, GROUP).run()} == {""}
    subscription.dispose()


def test_a_failing_partition_does_not_stop_the_others_and_is_claimed_again_later() -> None:
    from rxhubs.errors import ReceiverClosedError

    g = Group(3, interval=I)
    a = g.add("a", at=0.0)
    g.traffic(0.0, 60.0, every=1.0)
    g.at(10.5, lambda: g.hub.inject_error("1", ReceiverClosedError("link broke for good")))
    g.run(12.0)
    assert [p for p, _ in a.errors] == ["1"]
    assert a.owned == {"0", "2"}
    assert g.store_owners()["1"] == ""  # released (after its checkpoint) for anyone to take
    g.run(70.0)
    assert a.owned == {"0", "1", "2"}
    assert g.missing() == []


def test_a_store_outage_shorter_than_the_expiry_takes_nothing_down() -> None:
    g = Group(4, interval=I, expiry=30.0)
    a = g.add("a", at=0.0)
    g.traffic(0.0, 80.0, every=1.0)
    g.run(5.0)
    g.at(5.0, lambda: setattr(g.store, "available", False))
    g.at(20.0, lambda: setattr(g.store, "available", True))  # last renewal at 0: expiry would be at 30
    g.run(90.0)
    assert a.closed == []
    assert a.owned == {"0", "1", "2", "3"}
    assert g.missing() == []
    assert g.checkpoints() == {p: 79 for p in "0123"}


def test_a_store_outage_beyond_the_expiry_stops_reading_then_resumes() -> None:
    g = Group(2, interval=I, expiry=30.0)
    a = g.add("a", at=0.0)
    g.traffic(0.0, 120.0, every=1.0)
    g.run(5.0)
    g.at(5.0, lambda: setattr(g.store, "available", False))
    g.run(29.5)
    assert a.owned == {"0", "1"}
    g.run(30.0)  # last renewal sent at 0: given up at 30, when a peer may take over, so it is the only reader
    assert a.owned == set()
    assert [reason for _, _, reason in a.closed] == [CloseReason.OWNERSHIP_LOST] * 2
    g.at(50.0, lambda: setattr(g.store, "available", True))
    g.run(130.0)
    assert a.owned == {"0", "1"}
    assert g.missing() == []


def test_a_reader_cut_off_by_a_higher_owner_level_ends_and_is_not_renewed() -> None:
    g = Group(2, interval=I)
    a = g.add("a", at=0.0)
    g.run(2.0)
    intruder = g.hub.receiver("0", GROUP, owner_level=5)
    g.at(3.0, lambda: intruder.receive_nowait(1))
    g.run(4.5)
    assert a.owned == {"1"}
    assert a.closed == [(3.0, "0", CloseReason.OWNERSHIP_LOST)]
    g.run(25.0)
    assert a.owned == {"1"}  # not re-claimed while its record is live; nor renewed
    assert g.store_owners()["0"] == "a"


def test_a_renewal_lost_to_another_consumer_ends_the_stream_and_no_checkpoint_follows() -> None:
    g = Group(1, interval=I, checkpoint_interval=1.0)
    a = g.add("a", at=0.0)
    g.traffic(0.0, 40.0, every=0.5)
    g.run(5.0)
    hub = g.hub

    def overwrite(*_: Any) -> None:
        (record,) = g.store.observe_list_ownership(hub.fully_qualified_namespace, hub.eventhub_name, GROUP).run()
        g.store.observe_claim_ownership([Ownership(*_key(record), "0", "thief", None, record.etag)]).run()

    g.at(12.0, overwrite)
    g.run(21.0)
    assert a.owned == set()
    assert a.closed[0][1:] == ("0", CloseReason.OWNERSHIP_LOST)
    written = g.checkpoints()["0"]
    g.run(40.0)
    assert g.checkpoints()["0"] == written
    assert g.store_owners()["0"] == "thief"


def _key(record: Ownership) -> tuple[str, str, str]:
    return record.fully_qualified_namespace, record.eventhub_name, record.consumer_group


def test_reads_start_after_the_checkpoint_or_at_default_start() -> None:
    scheduler = TestScheduler()
    hub = InMemoryEventHub(2, clock=lambda: scheduler.now)
    store = InMemoryCheckpointStore()
    ns, name = hub.fully_qualified_namespace, hub.eventhub_name
    for pid in "01":
        hub.send([b"x"] * 10, partition_id=pid)
    store.observe_update_checkpoint(rxhubs.Checkpoint(ns, name, GROUP, "0", None, 6)).run()
    starts: dict[str, Position] = {}
    rxhubs.partitions(hub, GROUP, store, owner_id="a", default_start=Position.latest()).subscribe(
        lambda s: starts.setdefault(s.partition_id, s.start), scheduler=scheduler
    )
    scheduler.advance_to(1.0)
    assert starts == {"0": Position.from_sequence_number(6), "1": Position.latest()}


def test_start_is_a_reset_of_older_checkpoints_but_newer_ones_win() -> None:
    g = Group(1, interval=I, checkpoint_interval=1.0)
    ns, name = g.hub.fully_qualified_namespace, g.hub.eventhub_name
    g.hub.send([b"x"] * 10, partition_id="0")
    g.sent["0"] = 10
    g.store.observe_update_checkpoint(rxhubs.Checkpoint(ns, name, GROUP, "0", None, 8)).run()
    a = g.add("a", at=0.0, start=Position.earliest())
    g.run(1.0)
    assert a.streams["0"].start == Position.earliest()
    g.run(3.0)
    assert g.checkpoints() == {"0": 9}
    g.at(4.0, a.leave)
    b = g.add("b", at=5.0, start=Position.earliest())  # started after a wrote 9: 9 is newer than its baseline?
    g.run(6.0)
    # b's baseline was taken when it started (checkpoint 9), so its start overrides 9 as well
    assert b.streams["0"].start == Position.earliest()
    c = g.add("c", at=20.0)
    g.at(19.0, b.leave)
    g.run(21.0)
    assert c.streams["0"].start == Position.from_sequence_number(9)


def test_hooks_are_called_with_contexts_and_reasons() -> None:
    scheduler = TestScheduler()
    hub = InMemoryEventHub(2)
    store = InMemoryCheckpointStore()
    calls: list[tuple[str, str, Any]] = []
    source = rxhubs.partitions(
        hub,
        GROUP,
        store,
        owner_id="a",
        on_partition_initialize=lambda ctx: calls.append(("init", ctx.partition_id, None)),
        on_partition_close=lambda ctx, reason: calls.append(("close", ctx.partition_id, reason)),
    )
    with shutdown_scope() as stop:
        source.pipe(ops.merge_all()).subscribe(scheduler=scheduler)
    scheduler.advance_to(1.0)
    stop.request()
    scheduler.advance_to(2.0)
    assert calls == [
        ("init", "0", None),
        ("init", "1", None),
        ("close", "0", CloseReason.SHUTDOWN),
        ("close", "1", CloseReason.SHUTDOWN),
    ]


def test_a_partition_stream_is_unicast() -> None:
    scheduler = TestScheduler()
    streams: list[PartitionStream] = []
    rxhubs.partitions(InMemoryEventHub(1), GROUP, InMemoryCheckpointStore()).subscribe(
        streams.append, scheduler=scheduler
    )
    scheduler.advance_to(1.0)
    errors: list[Exception] = []
    streams[0].subscribe(scheduler=scheduler)
    streams[0].subscribe(on_error=errors.append, scheduler=scheduler)
    assert isinstance(errors[0], ConfigurationError)


def test_bad_options_raise_configuration_errors() -> None:
    hub, store = InMemoryEventHub(1), InMemoryCheckpointStore()
    for kwargs in (
        {"strategy": "eager"},
        {"load_balancing_interval": 0},
        {"ownership_expiration": 5.0},
        {"owner_id": "a/b"},
        {"start": "yesterday"},
        {"max_batch_size": 0},
        {"owner_level": -1},
    ):
        with pytest.raises(ConfigurationError):
            rxhubs.partitions(hub, GROUP, store, **kwargs)
    with pytest.raises(ConfigurationError):
        rxhubs.partitions(hub, "", store)
    with pytest.raises(ConfigurationError):
        rxhubs.partitions(hub, GROUP, None)
    errors: list[Exception] = []
    rxhubs.partitions(hub, GROUP, store).subscribe(on_error=errors.append)  # no scheduler, no loop
    assert isinstance(errors[0], ConfigurationError)


def test_the_sdk_position_forms_are_accepted_per_partition_with_inclusive() -> None:
    hub = InMemoryEventHub(4)
    for pid in hub.partition_ids:
        hub.send([f"{pid}-{n}".encode() for n in range(5)], partition_id=pid)
    third = hub.events("2")[2]
    scheduler, first = TestScheduler(), {}
    rxhubs.consume(
        hub,
        GROUP,
        InMemoryCheckpointStore(),
        owner_id="a",
        default_start="@latest",  # partitions not named: only what comes next
        start={"0": "-1", "1": 2, "2": third.offset, "3": third.enqueued_time},
        start_inclusive={"1": True},
    ).subscribe(lambda b: first.setdefault(b.partition_id, b.first_sequence_number), scheduler=scheduler)
    scheduler.advance_to(1.0)
    assert first == {"0": 0, "1": 2, "2": 3, "3": 0}  # partition 3's events were all sent after that time
    with pytest.raises(ConfigurationError, match=r"start\['1'\]"):
        rxhubs.consume(hub, GROUP, InMemoryCheckpointStore(), start={"1": 2.5})
