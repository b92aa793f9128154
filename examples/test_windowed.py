"""Test 4 of docs/testing.md: a windowed pipeline in virtual time (windows close, a late event, a restart).

Readings carry their device and event time (seconds) in the body; ``hops.window`` counts per device and minute.

    python examples/test_windowed.py        (or: pytest examples/test_windowed.py)
"""

from __future__ import annotations

from typing import Any

from reactivex import operators as ops

import rxhubs
from rxhubs import operators as hops
from rxhubs import windows as hw
from rxhubs.testing import marble_test

READINGS = {  # a=d1@10 s, b=d1@50, c=d2@55, d=d1@65 (moves the watermark past 60), e=d1@30 (too late)
    "a": b'{"d": "d1", "t": 10}', "b": b'{"d": "d1", "t": 50}', "c": b'{"d": "d2", "t": 55}',
    "d": b'{"d": "d1", "t": 65}', "e": b'{"d": "d1", "t": 30}',
}


def build(hub: Any, store: Any, **options: Any) -> Any:
    return rxhubs.consume(hub, "$Default", store, **options).pipe(
        hops.window("per_device", key=lambda e: e.body_as_json()["d"], windows=hw.tumbling(60),
                    aggregate=hw.count(), clock=hw.EventTime(lambda e: e.body_as_json()["t"])),
        hops.checkpoint(store, max_interval=1.0),
    )


def shown(batch: hw.WindowBatch) -> str:
    """A batch as what it found: ``key@start=value`` per closed window, ``late:KEY@T`` per late event, or ``.``."""
    words = [f"{r.key}@{int(r.start.timestamp())}={r.value}" for r in batch.results]
    words += [f"late:{e.body_as_json()['d']}@{e.body_as_json()['t']}" for e in batch.late]
    return " ".join(words) or "."


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


if __name__ == "__main__":
    test_windows_close_when_event_time_passes_them_and_a_late_event_is_reported()
    test_a_restarted_consumer_goes_on_from_the_committed_state()
    print("ok")
