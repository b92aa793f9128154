"""Properties of hops.window: whatever the event times, batch boundaries and crash point, results equal an offline
computation, late events are exactly those an offline watermark calls late, and closed windows leave the state."""

from __future__ import annotations

from collections import Counter
from typing import Any

import reactivex
from hypothesis import given, settings
from hypothesis import strategies as st

from rxhubs import operators as hops
from rxhubs import windows as hw
from rxhubs.state._codec import OperatorState
from tests.state.window_kit import CLOCK, T0, batches_of, device, event, saved, session_with

S = 1_000_000  # microseconds per second
BASE = int(T0.timestamp()) * S

# times on a 5 s grid, so events often fall on window boundaries and at the watermark exactly
times_st = st.integers(0, 80).map(lambda n: n * 5)
events_st = st.lists(st.tuples(st.sampled_from(["d0", "d1", "d2"]), times_st), min_size=1, max_size=40)
cuts_st = st.lists(st.integers(0, 40), max_size=10)
lag_st = st.integers(0, 3)  # batches read but not committed when run 1 crashed
again_st = st.integers(0, 4)  # committed events run 2 reads again (its start moved back, as by checkpoints reset)


def feed(op: Any, batches: list[Any]) -> list[Any]:
    out: list[Any] = []
    errors: list[Any] = []
    reactivex.from_iterable(batches).pipe(op).subscribe(out.append, errors.append)
    assert errors == []
    return out


def crash_and_resume(
    make: Any, evs: list[Any], cuts: list[int], crash: int, recuts: list[int], lag: int = 0, again: int = 0
) -> tuple[list[Any], Any]:
    """Run 1 reads the batches before the crash point, but only those up to ``lag`` batches before it were
    committed when it crashed; run 2 (another batching) restores what was committed and reads on from there, so
    the uncommitted batches are read again. What run 1 emitted from them, run 2 emits again with the same value.
    Run 2 also reads ``again`` committed events before that point: the state holds them, so they count once.

    Returns what a reader downstream keeps (run 1's committed part, then run 2) and the state run 2 commits.
    """
    first = feed(make(), batches_of(evs[:crash], cuts, session_with(None)))
    kept = max(0, len(first) - lag)
    committed = saved(first[:kept])
    resume = max(0, first[kept - 1].events[-1].sequence_number + 1 - again) if kept else 0
    second = feed(make(), batches_of(evs[resume:], recuts, session_with(committed)))
    again = {(r.key, r.start): r.value for b in second for r in b.results}
    for r in (r for b in first[kept:] for r in b.results):  # emitted before the crash, never committed
        assert again.get((r.key, r.start)) == r.value, (r, again.get((r.key, r.start)))
    return first[:kept] + second, saved(second, committed)


def oracle_late(evs: list[tuple[str, int]], grace: int, ends: Any) -> list[int]:
    late, top = [], None
    for i, (_, t) in enumerate(evs):
        top = t if top is None else max(top, t)
        if any(end <= top - grace for end in ends(t)):
            late.append(i)
    return late


@settings(max_examples=60, deadline=None)
@given(events_st, st.sampled_from([0, 5, 30]), st.sampled_from([10, 60]), cuts_st, st.integers(0, 40), cuts_st,
       lag_st, again_st)
def test_tumbling_counts_equal_an_offline_count_for_any_batching_and_crash_point(
    spec: list[tuple[str, int]], grace: int, size: int, cuts: list[int], crash: int, recuts: list[int], lag: int,
    again: int,
) -> None:
    evs = [event(i, d, t) for i, (d, t) in enumerate(spec)]
    crash = min(crash, len(evs))

    def make() -> Any:
        return hops.window("w", key=device, windows=hw.tumbling(size), aggregate=hw.count(), clock=CLOCK, grace=grace)

    out, state = crash_and_resume(make, evs, cuts, crash, recuts, lag, again)
    late = oracle_late(spec, grace, lambda t: [t // size * size + size])
    expected = Counter((d, t // size * size) for i, (d, t) in enumerate(spec) if i not in late)
    found = Counter({(r.key, int(r.start.timestamp()) - BASE // S): r.value for b in out for r in b.results})
    open_now = {tuple(_key(k)): v for k, v in state["w"].keys.items()}
    assert not set(found) & set(open_now)  # a window is either emitted or still open, never both
    assert found + Counter(open_now) == expected
    assert [e.sequence_number for b in out for e in b.late] == late
    assert state["w"].meta["late"] == len(late)


def _key(skey: str) -> tuple[str, int]:
    import json

    key, start = json.loads(skey)
    return key, (start - BASE) // S


@settings(max_examples=40, deadline=None)
@given(events_st, st.sampled_from([0, 20]), cuts_st, st.integers(0, 40), cuts_st, lag_st)
def test_hopping_counts_equal_an_offline_count(
    spec: list[tuple[str, int]], grace: int, cuts: list[int], crash: int, recuts: list[int], lag: int
) -> None:
    size, step = 60, 20
    evs = [event(i, d, t) for i, (d, t) in enumerate(spec)]

    def make() -> Any:
        return hops.window("h", key=device, windows=hw.hopping(size, step), aggregate=hw.count(), clock=CLOCK,
                           grace=grace)

    def starts(t: int) -> list[int]:
        return [s for s in range(t // step * step - size, t + 1, step) if s <= t < s + size]

    out, state = crash_and_resume(make, evs, cuts, min(crash, len(evs)), recuts, lag)
    expected: Counter[Any] = Counter()
    top = None
    for d, t in spec:
        top = t if top is None else max(top, t)
        expected.update((d, s) for s in starts(t) if s + size > top - grace)
    found = Counter({(r.key, int(r.start.timestamp()) - BASE // S): r.value for b in out for r in b.results})
    assert found + Counter({_key(k): v for k, v in state["h"].keys.items()}) == expected
    assert [e.sequence_number for b in out for e in b.late] == oracle_late(
        spec, grace, lambda t: [s + size for s in starts(t)]
    )


@settings(max_examples=40, deadline=None)
@given(events_st, st.sampled_from([0, 15]), cuts_st, st.integers(0, 40), cuts_st, lag_st, again_st)
def test_session_windows_equal_an_offline_sessionization_of_the_events_not_late(
    spec: list[tuple[str, int]], grace: int, cuts: list[int], crash: int, recuts: list[int], lag: int, again: int
) -> None:
    gap = 30
    evs = [event(i, d, t) for i, (d, t) in enumerate(spec)]

    def make() -> Any:
        return hops.window("s", key=device, windows=hw.session(gap), aggregate=hw.count(), clock=CLOCK, grace=grace)

    out, state = crash_and_resume(make, evs, cuts, min(crash, len(evs)), recuts, lag, again)
    kept: dict[str, list[int]] = {}
    top, late = None, []
    for i, (d, t) in enumerate(spec):
        top = t if top is None else max(top, t)
        if t < top - grace:
            late.append(i)
        else:
            kept.setdefault(d, []).append(t)
    expected = set()
    for d, times in kept.items():
        times.sort()
        start, last, n = times[0], times[0], 0
        for t in times:
            if t >= last + gap:
                expected.add((d, start, last + gap, n))
                start, n = t, 0
            last, n = t, n + 1
        expected.add((d, start, last + gap, n))
    seconds = lambda x: int(x.timestamp()) - BASE // S  # noqa: E731
    found = {(r.key, seconds(r.start), seconds(r.end), r.value) for b in out for r in b.results}
    open_now = {(*_key(k), (v[0] - BASE) // S, v[1]) for k, v in state["s"].keys.items()}
    assert found | open_now == expected and not found & open_now
    assert [e.sequence_number for b in out for e in b.late] == late


@settings(max_examples=30, deadline=None)
@given(events_st, cuts_st)
def test_state_shrinks_back_once_event_time_passes_every_window(spec: list[tuple[str, int]], cuts: list[int]) -> None:
    evs = [event(i, d, t) for i, (d, t) in enumerate(spec)]
    op = hops.window("w", key=device, windows=hw.tumbling(60), aggregate=hw.count(), clock=CLOCK, grace=30)
    flush = event(len(evs), "zz", 10_000)
    out = feed(op, batches_of([*evs, flush], cuts))
    state: dict[str, OperatorState] = saved(out)
    assert list(state["w"].keys) == [f'["zz",{BASE + 9960 * S}]']  # only the flushing event's own window is left
    sizes = [len(str(saved(out[: i + 1])["w"].keys)) for i in range(len(out))]
    assert sizes[-1] <= min(sizes) + 40
