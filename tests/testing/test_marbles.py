"""The marble kit: each feature shown in a test (traffic, groups, errors, completion, peers, faults)."""

from __future__ import annotations

import pytest
import reactivex
from reactivex import operators as ops

import rxhubs
from rxhubs import operators as hops
from rxhubs.errors import SinkError
from rxhubs.sources import Backoff
from rxhubs.testing import marble_test, symbols


def test_traffic_elements_are_events_and_batches_read_as_their_symbols() -> None:
    with marble_test() as t:
        hub = t.hub({"0": "-a----bc--d", "1": "---xy"})
        merged = rxhubs.partition_batches(hub, "0").pipe(ops.merge(rxhubs.partition_batches(hub, "1")))
        assert t.start(merged.pipe(symbols())) == t.exp("-a-xy-bc--d")


def test_grouped_sends_arrive_at_one_instant_and_one_pull_reads_them() -> None:
    with marble_test() as t:
        hub = t.hub({"0": "-(a,b)-c"})
        assert [e.sequence_number for e in hub.events("0")] == []  # nothing is sent before the clock runs
        results = t.start(rxhubs.partition_batches(hub, "0").pipe(symbols()))
        assert results == t.exp("-ab----c")


def test_lookup_maps_an_element_to_several_bodies() -> None:
    with marble_test() as t:
        hub = t.hub({"0": "--r"}, lookup={"r": [b'{"t": 1}', b'{"t": 2}']})
        values = t.start(rxhubs.partition_batches(hub, "0").pipe(ops.map(lambda b: [e.body_as_json()["t"] for e in b])))
        assert values == t.exp("--r", {"r": [1, 2]})


def test_enqueued_times_are_virtual() -> None:
    with marble_test(timespan=0.5) as t:
        hub = t.hub({"0": "----a"})
        t.start(rxhubs.partition_batches(hub, "0"))
        (event,) = hub.events("0")
        assert event.enqueued_time.timestamp() == 200.0 + 4 * 0.5


def test_hash_in_traffic_is_a_receiver_fault_retried_from_the_last_event() -> None:
    with marble_test() as t:
        hub = t.hub({"0": "-a-#-b"})
        source = rxhubs.partition_batches(hub, "0", max_wait=100.0, retry=Backoff(initial=3.0))
        # the pull woken by "b" at 5 fails; the retry 3 ticks later reads "b" after "a"
        assert t.start(source.pipe(symbols())) == t.exp("-a------b")


def test_completion_in_expected_diagrams() -> None:
    with marble_test() as t:
        hub = t.hub({"0": "-a-b-c"})
        results = t.start(rxhubs.partition_batches(hub, "0").pipe(symbols(), ops.take(2)))
        assert results == t.exp("-a-(b,|)")


def test_a_sink_failure_at_a_marked_tick_is_an_error_notification() -> None:
    with marble_test() as t:
        hub = t.hub({"0": "-a--b--c"})
        sink = t.sink("----#")
        results = t.start(rxhubs.partition_batches(hub, "0").pipe(sink, symbols()))
        assert [r.value.kind for r in results] == ["N", "E"]
        assert results[0] == t.exp("-a")[0]
        assert results[1].time == 204.0 and isinstance(results[1].value.exception, SinkError)
        assert sink.symbols == ["a"]


def test_checkpoints_at_a_virtual_time() -> None:
    with marble_test() as t:
        hub = t.hub({"0": "-a-b--------c", "1": "--x"})
        store = t.store()
        early = t.checkpoints_at(hub, store, 5)
        late = t.checkpoints_at(hub, store, 25)
        pipeline = rxhubs.consume(hub, "$Default", store, load_balancing_interval=1.0).pipe(
            hops.checkpoint(store, max_interval=10.0)
        )
        t.start(pipeline, disposed=230)
        assert early == {"0": 0, "1": 0}  # "a" and "x" written at once, "b" waits for the interval (11)
        assert late == {"0": 2, "1": 0}  # "c" (12) written at 21


def test_a_store_outage_delays_checkpoints_and_loses_nothing() -> None:
    with marble_test() as t:
        hub = t.hub({"0": "-a-b-c"})
        store = t.store()
        t.outage(store, "--######")  # down from tick 2 to 7
        during = t.checkpoints_at(hub, store, 7)
        after = t.checkpoints_at(hub, store, 30)
        pipeline = rxhubs.consume(hub, "$Default", store, load_balancing_interval=1.0, ownership_expiration=30.0)
        t.start(pipeline.pipe(hops.checkpoint(store, max_interval=1.0)), disposed=240)
        assert during == {"0": 0}
        assert after == {"0": 2}


def test_a_peer_joins_takes_its_share_then_crashes_and_its_partitions_come_back() -> None:
    with marble_test() as t:
        hub = t.hub({"0": "-", "1": "-", "2": "-", "3": "-"})
        store = t.store()
        options = {"load_balancing_interval": 2.0, "ownership_expiration": 6.0}
        peer = t.peer(hub, store, "----------j" + "-" * 19 + "x", owner_id="peer", **options)
        before = t.ownership_at(hub, store, 9)
        shared = t.ownership_at(hub, store, 29)
        after_crash = t.ownership_at(hub, store, 60)
        t.start(rxhubs.consume(hub, "$Default", store, owner_id="me", **options), disposed=300)
        assert set(before.values()) == {"me"}
        assert sorted(shared.values()) == ["me", "me", "peer", "peer"]
        assert set(after_crash.values()) == {"me"}  # expired after the crash, then claimed
        assert peer.batches == []  # the traffic was empty


def test_a_peer_that_stops_gracefully_releases_at_once() -> None:
    with marble_test() as t:
        hub = t.hub({"0": "-", "1": "-"})
        store = t.store()
        options = {"load_balancing_interval": 2.0, "ownership_expiration": 60.0}
        t.peer(hub, store, "j-------s", owner_id="peer", **options)
        while_peer = t.ownership_at(hub, store, 7)
        soon_after = t.ownership_at(hub, store, 13)
        t.start(rxhubs.consume(hub, "$Default", store, owner_id="me", **options), disposed=250)
        assert sorted(while_peer.values()) == ["me", "peer"]
        assert set(soon_after.values()) == {"me"}  # long before the 60 s expiry


def test_a_paused_peer_runs_nothing_until_it_resumes_and_its_partition_is_taken_over_meanwhile() -> None:
    with marble_test() as t:
        hub, store = t.hub({"0": "-a---b------c"}), t.store()
        options = {"load_balancing_interval": 1.0, "ownership_expiration": 4.0}
        checkpointed = lambda s: reactivex.compose(hops.checkpoint(s, max_interval=0.0), symbols())  # noqa: E731
        peer = t.peer(hub, store, "j--p------r", owner_id="peer", pipeline=checkpointed, **options)
        owners = [t.ownership_at(hub, store, tick) for tick in (2, 5, 9, 14)]
        done = t.checkpoints_at(hub, store, 14)
        me = rxhubs.consume(hub, "$Default", store, owner_id="me", **options).pipe(checkpointed(store))
        results = t.start(me, disposed=250)
    assert [o["0"] for o in owners] == ["peer", "peer", "me", "me"]  # no renewal while paused: it expired
    assert peer.batches == ["a"]  # b came while it was paused; after resuming it found the partition gone
    assert [r.value.value for r in results] == ["b", "c"]  # me read on from the peer's checkpoint (a)
    assert done == {"0": 2}  # c, by me


def test_peer_diagrams_reject_unknown_symbols() -> None:
    with marble_test() as t, pytest.raises(ValueError, match="j, s, x"):
        t.peer(t.hub(), t.store(), "-j-q")


def test_start_runs_once() -> None:
    with marble_test() as t:
        t.start(t.cold("-a|"))
        with pytest.raises(RuntimeError):
            t.start(t.cold("-a|"))
