"""hops.scan_state in virtual time: step outputs, expiry by event time, restore, deletes, bounds, bad options."""

from __future__ import annotations

from typing import Any

import pytest
from reactivex import operators as ops

from rxhubs import operators as hops
from rxhubs.errors import ConfigurationError, StateError
from rxhubs.testing import marble_test
from tests.state.window_kit import CLOCK, batches_of, device, event, lookup, saved, session_with

SPEC = {"a": ("k1", 0), "b": ("k1", 10), "c": ("k2", 20), "d": ("k2", 90)}


def every_second(n: Any, e: Any) -> tuple[Any, list[str]]:
    n = (n or 0) + 1
    return n, [f"{device(e)}: {n}"] if n % 2 == 0 else []


def scan(**options: Any) -> Any:
    return hops.scan_state("pairs", key=device, step=every_second, ttl=60, clock=CLOCK, **options)


def show(batch: Any) -> str:
    return f"{list(batch.outputs)} {list(batch.expired)}"


def run(diagram: str, batches: Any, op: Any) -> tuple[list[Any], list[Any]]:
    out: list[Any] = []
    with marble_test() as t:
        return t.start(t.cold(diagram, batches).pipe(op, ops.do_action(out.append), ops.map(show))), out


def values(records: list[Any]) -> list[Any]:
    return [r.value.value for r in records if r.value.kind == "N"]


def test_marbles_outputs_and_keys_expiring_by_event_time() -> None:
    records, out = run("-a-b-c-d-|", lookup(SPEC), scan())
    assert values(records) == [
        "[] []", "['k1: 2'] []", "[] []", "[] [('k2', 1), ('k1', 2)]",  # at d (90): k2 touched 70 s on, k1 swept
    ]
    assert [len(saved(out[: i + 1])["pairs"].keys) for i in range(4)] == [1, 1, 2, 1]
    assert saved(out)["pairs"].keys == {'"k2"': [1, 1767225690000000]}  # k2 began again at d


def test_marbles_crash_and_resume_gives_the_uninterrupted_outputs() -> None:
    whole, _ = run("-a-b-c-d-|", lookup(SPEC), scan())
    _, first = run("-a-b-c#", lookup(SPEC, session_with(None)), scan())
    committed = saved(first[:1])  # the checkpoint had a
    resumed, _ = run("---b-c-d-|", lookup(SPEC, session_with(committed)), scan())
    assert values(resumed) == values(whole)[1:]


def test_results_do_not_depend_on_how_events_were_batched() -> None:
    evs = [event(i, d, t) for i, (d, t) in enumerate(SPEC.values())]
    one, _ = run("-x-|", {"x": batches_of(evs, [])[0]}, scan())
    _, apart = run("-a-b-c-d-|", lookup(SPEC), scan())
    assert values(one) == ["['k1: 2'] [('k2', 1), ('k1', 2)]"]
    assert [o for b in apart for o in b.outputs] == ["k1: 2"]
    assert sorted(x for b in apart for x in b.expired) == [("k1", 2), ("k2", 1)]


def test_a_step_returning_none_deletes_the_key() -> None:
    op = hops.scan_state("once", key=device, step=lambda s, e: (None if s else 1, [s]), ttl=3600, clock=CLOCK)
    _, out = run("-a-b-|", lookup(SPEC), op)
    assert [b.outputs for b in out] == [(None,), (1,)]
    assert saved(out)["once"].keys == {}


def test_state_that_is_not_json_or_too_large_fails_the_partition() -> None:
    failures: list[Any] = []
    op = hops.scan_state("sets", key=device, step=lambda s, e: ({1}, None), ttl=60, clock=CLOCK)
    _, out = run("-a-b-|", lookup(SPEC, session_with(None, failures)), op)
    assert out == [] and isinstance(failures[0][1], StateError) and "not JSON-able" in str(failures[0][1])
    failures.clear()
    op = hops.scan_state("big", key=device, step=lambda s, e: ("x" * 100, None), ttl=60, clock=CLOCK,
                         max_state_bytes=150)
    _, out = run("-a-b-c-d-|", lookup(SPEC, session_with(None, failures)), op)
    assert len(out) == 2 and "max_state_bytes=150" in str(failures[0][1])  # k2's state would pass the cap


def test_a_changed_ttl_fails_the_restore_and_bad_options_are_refused() -> None:
    _, first = run("-a-|", lookup(SPEC, session_with(None)), scan())
    failures: list[Any] = []
    _, out = run("-b-|", lookup(SPEC, session_with(saved(first), failures)), hops.scan_state(
        "pairs", key=device, step=every_second, ttl=120, clock=CLOCK))
    assert out == [] and "other parameters" in str(failures[0][1])
    for bad in [{"ttl": 0}, {"step": 3}, {"clock": "wall"}, {"max_state_bytes": -1}]:
        with pytest.raises(ConfigurationError):
            hops.scan_state("x", **{"key": device, "step": every_second, "ttl": 60, **bad})
