"""Test 4 of docs/testing.md: a windowed pipeline in virtual time (windows close, a late event, a restart, a
handover, an idle partition, a paused former owner).

Readings carry their device and event time (seconds) in the body; ``hops.window`` counts per device and minute.

    python examples/test_windowed.py        (or: pytest examples/test_windowed.py)
"""

from __future__ import annotations

from typing import Any

import reactivex
from reactivex import operators as ops

import rxhubs
from rxhubs import operators as hops
from rxhubs import windows as hw
from rxhubs.errors import OwnershipLostError
from rxhubs.testing import marble_test

READINGS = {  # a=d1@10 s, b=d1@50, c=d2@55, d=d1@65 (moves the watermark past 60), e=d1@30 (too late)
    "a": b'{"d": "d1", "t": 10}', "b": b'{"d": "d1", "t": 50}', "c": b'{"d": "d2", "t": 55}',
    "d": b'{"d": "d1", "t": 65}', "e": b'{"d": "d1", "t": 30}',
}


def device(event: rxhubs.Event) -> str:
    return str(event.body_as_json()["d"])


def per_device(store: Any, max_interval: float = 1.0) -> Any:
    """The windowed count per device and minute of event time, its state committed with the checkpoint."""
    return reactivex.compose(
        hops.window("per_device", key=device, windows=hw.tumbling(60), aggregate=hw.count(),
                    clock=hw.EventTime(lambda e: e.body_as_json()["t"])),
        hops.checkpoint(store, max_interval=max_interval),
    )


def build(hub: Any, store: Any, **options: Any) -> Any:
    return rxhubs.consume(hub, "$Default", store, **options).pipe(per_device(store))


def shown(batch: hw.WindowBatch) -> str:
    """A batch as what it found: ``key@start=value`` per closed window, ``late:KEY@T`` per late event, or ``.``."""
    words = [f"{r.key}@{int(r.start.timestamp())}={r.value}" for r in batch.results]
    words += [f"late:{e.body_as_json()['d']}@{e.body_as_json()['t']}" for e in batch.late]
    return " ".join(words) or "."


def closed(batches: list[hw.WindowBatch]) -> list[str]:
    """The windows the batches closed, as ``partition:key@start=value``."""
    return [f"{b.partition_id}:{r.key}@{int(r.start.timestamp())}={r.value}" for b in batches for r in b.results]


def test_windows_close_when_event_time_passes_them_and_a_late_event_is_reported() -> None:
    with marble_test() as t:
        hub = t.hub({"0": "-a-b-c-d-e"}, lookup=READINGS)
        results = t.start(build(hub, t.store()).pipe(ops.map(shown)))
        assert results == t.exp("-o-o-o-x-y", {"o": ".", "x": "d1@0=2 d2@0=1", "y": "late:d1@30"})


def test_a_restarted_consumer_goes_on_from_the_committed_state() -> None:
    with marble_test() as t:
        store = t.store()
        hub = t.hub({"0": "-a-b-c"}, lookup=READINGS)
        t.start(build(hub, store, owner_id="me"), disposed=300)  # stops after c: a, b, c counted, nothing closed
    with marble_test() as t:  # the same store, a new process: d closes the windows a, b and c opened
        hub.send([READINGS["d"], READINGS["e"]], partition_id="0")
        results = t.start(build(hub, store, owner_id="me").pipe(ops.map(shown)))
        assert [r.value.value for r in results] == ["d1@0=2 d2@0=1 late:d1@30"]


def test_a_handover_emits_each_window_once_with_the_count_of_both_owners() -> None:
    balancing = {"load_balancing_interval": 2.0, "ownership_expiration": 10.0}
    with marble_test() as t:
        hub, store = t.hub({"0": "-a-b-c----------d", "1": "-c-a-b----------d"}, lookup=READINGS), t.store()
        b = t.peer(hub, store, "------j", owner_id="b", pipeline=per_device, **balancing)  # joins at 6 s
        owners = t.ownership_at(hub, store, 14)
        a = t.start(build(hub, store, owner_id="a", **balancing), disposed=240)
    assert sorted(owners.values()) == ["a", "b"]  # b took one partition over, with a's counts
    [moved] = [p for p, owner in owners.items() if owner == "b"]
    by_a = closed([r.value.value for r in a if r.value.kind == "N"])
    assert closed(b.batches) == [f"{moved}:d1@0=2", f"{moved}:d2@0=1"]  # b closed what a had counted
    assert sorted(by_a + closed(b.batches)) == ["0:d1@0=2", "0:d2@0=1", "1:d1@0=2", "1:d2@0=1"]  # once each


def test_an_idle_caught_up_partition_closes_its_last_window_only_with_idle() -> None:
    def run(**idle: Any) -> list[tuple[float, str]]:
        with marble_test() as t:  # the default clock: enqueued time, the virtual clock (a at 201 s, b 203, c 205)
            hub, store = t.hub({"0": "-a-b-c"}, lookup=READINGS), t.store()
            pipeline = rxhubs.consume(hub, "$Default", store, emit_empty=True, max_wait=1.0).pipe(  # heartbeats
                hops.window("per_device", key=device, windows=hw.tumbling(10), aggregate=hw.count(), **idle),
                hops.checkpoint(store), ops.map(shown))
            return [(r.time - t.subscribed, r.value.value) for r in t.start(pipeline, disposed=230)]

    without = run()
    assert len(without) == 29 and {shown for _, shown in without} == {"."}  # a beat a second; [200, 210) stays open
    with_idle = run(idle=hw.CaughtUp(after=3, skew=1))  # silent since 205 and caught up: now - 1 s passes 210 at 211
    assert [(tick, shown) for tick, shown in with_idle if shown != "."] == [(11.0, "d1@200=2 d2@200=1")]


def test_a_paused_former_owners_late_checkpoint_is_refused() -> None:
    balancing = {"load_balancing_interval": 5.0, "ownership_expiration": 15.0}
    errors: list[Exception] = []
    with marble_test() as t:
        hub, store = t.hub({"0": "-a-b" + "-" * 19 + "c-d"}, lookup=READINGS), t.store()
        # a writes a's checkpoint at once and b's 3 s later (at 4 s), but is paused at 4 s, until 30 s
        t.peer(hub, store, "j---p" + "-" * 25 + "r", owner_id="a", pipeline=lambda s: per_device(s, 3.0),
               on_partition_error=lambda _, error: errors.append(error), **balancing)
        checkpoints = t.checkpoints_at(hub, store, 35)
        b = rxhubs.consume(hub, "$Default", store, owner_id="b", **balancing).pipe(per_device(store, 3.0))
        results = t.start(b.pipe(ops.map(shown)), disposed=240)  # b takes the partition over once a expired
    assert [type(e) for e in errors] == [OwnershipLostError]  # a's write of b (sequence number 1) was refused
    assert checkpoints == {"0": 3}  # the store kept b's pair: after d, not a's late one after b
    assert [r.value.value for r in results if r.value.value != "."] == ["d1@0=2 d2@0=1"]  # b restored a, read on
    with marble_test() as t:  # a new consumer restores the pair: b's watermark (65 s), so e (30 s) is late
        hub.send([READINGS["e"]], partition_id="0")
        assert [r.value.value for r in t.start(build(hub, store, owner_id="c").pipe(ops.map(shown)))] == [
            "late:d1@30"]


if __name__ == "__main__":
    test_windows_close_when_event_time_passes_them_and_a_late_event_is_reported()
    test_a_restarted_consumer_goes_on_from_the_committed_state()
    test_a_handover_emits_each_window_once_with_the_count_of_both_owners()
    test_an_idle_caught_up_partition_closes_its_last_window_only_with_idle()
    test_a_paused_former_owners_late_checkpoint_is_refused()
    print("ok")
