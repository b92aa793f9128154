"""hops.window in virtual time: close, late, crash and resume, handover, a paused former owner, idle, bounds."""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

import pytest
from reactivex import operators as ops

import rxhubs
from rxhubs import operators as hops
from rxhubs import windows as hw
from rxhubs.errors import ConfigurationError, StateError
from rxhubs.testing import marble_test
from tests.state.window_kit import CLOCK, DESIGN, T0, device, heartbeat, lookup, saved, session_with, shown

X = "d1@0=2 d2@0=1"  # the design's closed windows


def counts(**options: Any) -> Any:
    return hops.window("counts", key=device, windows=hw.tumbling(60), aggregate=hw.count(), clock=CLOCK, **options)


def run(diagram: str, batches: dict[str | float, Any], operator: Any, show: Any = shown) -> tuple[list[Any], list[Any]]:
    """Run ``operator`` over a cold diagram; the recorded shown results and the batches it passed on."""
    out: list[Any] = []
    with marble_test() as t:
        records = t.start(t.cold(diagram, batches).pipe(operator, ops.do_action(out.append), ops.map(show)))
        return records, out


def exp(diagram: str, lookup: dict[str | float, Any] | None = None) -> list[Any]:
    with marble_test() as t:
        return t.exp(diagram, {"o": "o", "x": X, **(lookup or {})})


def test_marbles_windows_close_when_the_watermark_passes_their_end_and_completion_closes_nothing() -> None:
    records, out = run("-a-b-c-d-|", lookup(), counts())
    assert records == exp("-o-o-o-x-|")
    # every batch went on with its events, origin and one delta; open windows after each batch: 1 1 2 1
    assert [len(b.events) for b in out] == [1, 1, 1, 1]
    assert all(b._origin is not None and len(b._state) == 1 for b in out)
    assert [len(saved(out[: i + 1])["counts"].keys) for i in range(4)] == [1, 1, 2, 1]
    assert saved(out)["counts"].meta == {"t": 65_000_000 + _t0(), "wm": 65_000_000 + _t0(), "seq": 3, "late": 0}


def _t0() -> int:
    return int(T0.timestamp()) * 1_000_000


def test_marbles_a_late_event_goes_to_the_side_output_and_is_counted() -> None:
    records, out = run("-a-b-c-d-e-|", lookup(), counts())
    assert records == exp("-o-o-o-x-o-|")
    assert [[e.body for e in b.late] for b in out] == [[], [], [], [], [b"d1@30"]]
    assert out[-1].late_count == 1 and saved(out)["counts"].meta["late"] == 1
    _, dropped = run("-a-b-c-d-e-|", lookup(), counts(late="drop"))
    assert dropped[-1].late == () and dropped[-1].late_count == 1


def test_marbles_grace_keeps_a_window_open_for_disorder() -> None:
    records, out = run("-a-b-c-d-e-f-|", lookup({**DESIGN, "f": ("d3", 75)}), counts(grace=10))
    # with 10 s of grace, e (30 s) still counts; f (75 s) moves the watermark to 65 and closes [0, 60)
    assert records == exp("-o-o-o-o-o-y-|", {"y": "d1@0=3 d2@0=1"})
    assert all(b.late_count == 0 for b in out)


def test_marbles_crash_and_resume_from_the_committed_state_equals_the_uninterrupted_run() -> None:
    whole, _ = run("-a-b-c-d-e-|", lookup(), counts())
    # run 1: the work after b fails (the pipeline dies); the checkpoint had committed b with its state
    _, first = run("-a-b-c#", lookup(session=session_with(None)), counts())
    committed = saved(first[:2])
    assert committed["counts"].keys == {'["d1",1767225600000000]': 2}
    # run 2, a new owner: it restores the pair and reads on after b
    records, second = run("---c-d-e-|", lookup(session=session_with(committed)), counts())
    assert records == exp("---o-x-o-|")  # the same results as the uninterrupted run from c on
    assert [r.value.value for r in whole[2:5]] == [r.value.value for r in records[:3]]
    assert [e.body for e in second[-1].late] == [b"d1@30"]  # e is still late: the watermark was restored
    assert saved(second, committed) == saved(run("-a-b-c-d-e-|", lookup(), counts())[1])
    # a crash after d: the restored watermark (65) alone makes e late, as it was in the uninterrupted run
    after_d = saved(first[:3] + second[:2])
    records, third = run("-e-|", lookup(session=session_with(after_d)), counts())
    assert records == exp("-o-|") and third[0].late_count == 1
    assert saved(third, after_d)["counts"].keys == {'["d1",1767225660000000]': 1}  # [0, 60) not opened again


def test_marbles_events_already_in_the_restored_state_are_not_counted_twice() -> None:
    _, first = run("-a-b-|", lookup(session=session_with(None)), counts())
    committed = saved(first)
    records, _ = run("-b-c-d-|", lookup(session=session_with(committed)), counts())  # b read again
    assert records == exp("-o-o-x-|")


def test_marbles_handover_the_new_owner_closes_the_windows_the_former_owner_opened() -> None:
    a_records, a_out = run("-a-b-|", lookup(session=session_with(None)), counts())  # A releases after b
    assert a_records == exp("-o-o-|")  # A emits nothing: its stream ending closes nothing
    b_records, _ = run("---c-d-|", lookup(session=session_with(saved(a_out))), counts())
    assert b_records == exp("---o-x-|")


def test_marbles_a_new_session_restarts_from_its_restored_state_and_a_former_owners_straggler_passes() -> None:
    first = session_with(None)
    old = lookup(session=first)
    committed = saved([counts_only(old["a"])])  # the checkpoint committed a only
    first.lose()  # the partition moved; then it came back to this consumer, which restores a
    second = lookup(session=session_with(committed))
    batches = {"A": old["a"], "b": second["b"], "c": second["c"], "d": second["d"], "B": old["b"]}
    records, out = run("-b-c-B-d-|", batches, counts())
    assert records == exp("-o-o-o-x-|")  # the straggler B (old session) changes nothing and carries no delta
    assert out[2]._state == () and out[2].results == ()


def counts_only(batch: Any) -> Any:
    _, out = run("-a-|", {"a": batch}, counts())
    return out[0]


def test_a_changed_window_definition_fails_the_partition_loudly() -> None:
    _, first = run("-a-b-|", lookup(session=session_with(None)), counts())
    failures: list[Any] = []
    _, out = run("-c-d-|", lookup(session=session_with(saved(first), failures)), counts(grace=5))
    assert [op for op, _ in failures] == ["process"]
    assert isinstance(failures[0][1], StateError) and "other parameters" in str(failures[0][1])
    assert out == []  # nothing of that session goes on: it is read again after the fix


def test_without_balancing_a_state_error_fails_the_stream() -> None:
    def not_json(acc: Any, e: Any) -> Any:
        return {e.properties["dev"]}  # a set: not JSON-able

    op = hops.window("sets", key=device, windows=hw.tumbling(60), aggregate=hw.fold(None, not_json), clock=CLOCK)
    with marble_test() as t:
        results = t.start(t.cold("-a-b-|", lookup()).pipe(op))
    assert len(results) == 1 and isinstance(results[0].value.exception, StateError)
    assert "not JSON-able" in str(results[0].value.exception)


@pytest.mark.parametrize("aggregate", [hw.count(), hw.sum(lambda e: 1)], ids=["count", "sum"])
def test_an_unhashable_key_fails_the_stream_with_a_state_error_naming_it(aggregate: Any) -> None:
    op = hops.window("lists", key=lambda e: (device(e), [1]), windows=hw.tumbling(60), aggregate=aggregate,
                     clock=CLOCK)
    with marble_test() as t:
        results = t.start(t.cold("-a-b-|", lookup()).pipe(op))
    assert len(results) == 1 and isinstance(results[0].value.exception, StateError)
    assert "must be hashable" in str(results[0].value.exception)
    assert "('d1', [1])" in str(results[0].value.exception)


def test_a_state_over_its_cap_fails_the_partition_rather_than_growing(caplog: pytest.LogCaptureFixture) -> None:
    spec = {letter: (f"dev{i}", 10) for i, letter in enumerate("abcdefgh")}
    failures: list[Any] = []
    with caplog.at_level(logging.ERROR, "rxhubs.operators"):
        _, out = run("-a-b-c-d-e-f-g-h-|", lookup(spec, session_with(None, failures)), counts(max_state_bytes=100))
    assert len(out) == 3  # each window costs ~30 bytes: the fourth batch would pass the cap
    assert len(failures) == 1 and "max_state_bytes=100" in str(failures[0][1])
    assert "stopping the partition" in caplog.text


def test_marbles_updates_emit_each_changed_window_and_the_closed_ones_final() -> None:
    def show(b: Any) -> str:
        return " ".join(f"{r.key}@{int((r.start - T0).total_seconds())}={r.value}{'!' if r.final else ''}"
                        for r in b.results) or "o"

    records, _ = run("-a-b-c-d-|", lookup(), counts(emit="updates"), show)
    expected = {"p": "d1@0=1", "q": "d1@0=2", "r": "d2@0=1", "s": "d1@0=2! d2@0=1! d1@60=1"}
    assert records == exp("-p-q-r-s-|", expected)


def test_marbles_hopping_windows_count_each_event_in_every_window_it_falls_in() -> None:
    op = hops.window("hop", key=device, windows=hw.hopping(60, 30), aggregate=hw.count(), clock=CLOCK)
    records, _ = run("-a-b-c-d-|", lookup(), op)
    # a (10) is in [-30,30) and [0,60); b (50) in [0,60) and [30,90); c likewise; d (65) in [30,90), [60,120)
    # b moves the watermark to 50: [-30,30) closes; d to 65: [0,60) closes
    assert records == exp("-o-p-o-y-|", {"p": "d1@-30=1", "y": "d1@0=2 d2@0=1"})
    _, late = run("-a-b-c-d-e-|", lookup(), op)
    assert late[-1].late_count == 1  # e (30) is late for [0,60) and still counts in [30,90)
    assert dict(saved(late)["hop"].keys)['["d1",1767225630000000]'] == 3


def test_marbles_session_windows_merge_and_close_a_gap_after_their_last_event() -> None:
    spec = {"a": ("d1", 0), "b": ("d1", 20), "c": ("d1", 5), "d": ("d2", 40), "e": ("d1", 80), "f": ("d1", 200)}
    op = hops.window("s", key=device, windows=hw.session(30), aggregate=hw.count(), clock=CLOCK, grace=20)
    records, _ = run("-a-b-c-d-e-f-|", lookup(spec), op)
    # d1: a, b, c form [0, 50); e (80) moves the watermark to 60 and closes it, then starts [80, 110);
    # d2: [40, 70). f (200) moves the watermark to 180
    assert records == exp("-o-o-o-o-p-y-|", {"p": "d1@0=3", "y": "d2@40=1 d1@80=1"})


def test_marbles_sum_min_max_and_a_fold_with_tuple_keys_survive_a_restore_unchanged() -> None:
    def pair(e: Any) -> Any:
        return (e.properties["dev"], "x")

    def show(b: Any) -> str:
        return " ".join(f"{r.key}={r.value}" for r in b.results) or "o"

    for aggregate, expected in [
        (hw.sum(lambda e: e.properties["ts"]), "('d1', 'x')=60 ('d2', 'x')=55"),
        (hw.min(lambda e: e.properties["ts"]), "('d1', 'x')=10 ('d2', 'x')=55"),
        (hw.max(lambda e: e.properties["ts"]), "('d1', 'x')=50 ('d2', 'x')=55"),
        (hw.fold((), lambda acc, e: (*acc, e.properties["ts"])), "('d1', 'x')=[10, 50] ('d2', 'x')=[55]"),
    ]:
        def op(aggregate: Any = aggregate) -> Any:
            return hops.window("agg", key=pair, windows=hw.tumbling(60), aggregate=aggregate, clock=CLOCK)

        whole, _ = run("-a-b-c-d-|", lookup(), op(), show)
        _, first = run("-a-b-|", lookup(session=session_with(None)), op(), show)
        resumed, _ = run("-c-d-|", lookup(session=session_with(saved(first))), op(), show)
        assert [r.value.value for r in whole[2:4]] == [r.value.value for r in resumed[:2]]
        assert whole[3].value.value == expected


def test_marbles_an_idle_caught_up_partition_ticks_its_windows_closed_and_its_state_empties() -> None:
    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    spec = {"a": ("d1", 1), "b": ("d1", 3), "c": ("d2", 5)}
    batches = lookup(spec)
    for letter, b in batches.items():  # enqueued on the virtual clock: 201, 203, 205 s after the epoch
        ev = b.events[0]
        batches[letter] = b.with_events([rxhubs.Event(ev.body, ev.sequence_number, ev.offset,
                                                      epoch + dt.timedelta(seconds=200 + spec[str(letter)][1]),
                                                      properties=ev.properties)])
    batches["n"] = heartbeat(7)  # the hub holds events not read yet: not caught up
    batches["h"] = heartbeat(2)  # caught up
    diagram = "-a-b-c-h-h-n-n-n-n-h-h-h-h|"

    def op(**idle: Any) -> Any:
        return hops.window("idle", key=device, windows=hw.tumbling(10), aggregate=hw.count(), **idle)

    still, _ = run(diagram, batches, op())
    assert all(r.value.value == "o" for r in still[:-1])  # pure event time: the window [200, 210) stays open
    records, out = run(diagram, batches, op(idle=hw.CaughtUp(after=3, skew=1)))
    # caught up at 7 and 9 (not silent for 3 s yet); not caught up from 11 to 17; caught up again at 19, silent
    # for 3 s at 23: stream time moves to now - skew = 222, past the window's end (210)
    closed = [r for r in records[:-1] if r.value.value != "o"]
    assert [r.time - 200 for r in closed] == [23.0]
    assert [r.value.value for r in closed] == [
        f"d1@{200 - int(T0.timestamp())}=2 d2@{200 - int(T0.timestamp())}=1"
    ]
    assert saved(out)["idle"].keys == {}  # closed windows leave the state: it is back to empty


def test_marbles_idle_on_a_real_partition_source_with_heartbeats() -> None:
    with marble_test() as t:
        hub = t.hub({"0": "-a-b-c"})
        source = rxhubs.partition_batches(hub, "0", emit_empty=True, max_wait=1.0)
        op = hops.window("idle", key=lambda e: "all", windows=hw.tumbling(10), aggregate=hw.count(),
                         idle=hw.CaughtUp(after=3, skew=1))
        records = t.start(source.pipe(op, ops.filter(lambda b: bool(b.results)),
                                      ops.map(lambda b: (b.results[0].start.timestamp(), b.results[0].value))))
    assert [r.value.value for r in records] == [(200.0, 3)]
    assert 211 <= records[0].time <= 213  # the first heartbeat once now - skew passed the window's end


def test_bad_options_are_configuration_errors() -> None:
    good: dict[str, Any] = {"key": device, "windows": hw.tumbling(60), "aggregate": hw.count()}
    for bad in [
        {"windows": 60}, {"aggregate": len}, {"emit": "sometimes"}, {"late": "ignore"}, {"grace": -1},
        {"idle": 5}, {"clock": "wall"}, {"max_state_bytes": 0}, {"key": 3},
        {"windows": hw.session(10), "aggregate": hw.fold(0, lambda a, e: a)},
        {"clock": hw.EventTime(lambda e: 0), "idle": hw.CaughtUp()},
    ]:
        with pytest.raises(ConfigurationError):
            hops.window("w", **{**good, **bad})
    with pytest.raises(ConfigurationError):
        hops.window("", **good)
    for bad_window in [lambda: hw.tumbling(0), lambda: hw.hopping(10, 20), lambda: hw.session(-1)]:
        with pytest.raises(ConfigurationError):
            bad_window()


def test_a_windowed_pipeline_under_balancing_is_checkpointed_as_usual() -> None:
    with marble_test() as t:
        hub = t.hub({"0": "-a-b---c", "1": "--d--e"})
        store = t.store()
        pipeline = rxhubs.consume(hub, "$Default", store, owner_id="me").pipe(
            hops.window("per_partition", key=lambda e: e.body.decode(), windows=hw.tumbling(4), aggregate=hw.count()),
            hops.checkpoint(store, max_interval=0.0),
        )
        checkpoints = t.checkpoints_at(hub, store, 20)
        records = t.start(pipeline)
    batches = [r.value.value for r in records if r.value.kind == "N"]
    assert all(isinstance(b, hw.WindowBatch) and [d.name for d in b._state] == ["per_partition"] for b in batches)
    assert all(b._session is not None and b._origin is not None for b in batches)  # what the checkpoint needs
    closed = sorted((b.partition_id, r.key, int(r.start.timestamp()), r.value) for b in batches for r in b.results)
    # each partition's own watermark: c (207) and e (205) closed [200, 204); c's and e's windows stay open
    assert closed == [("0", "a", 200, 1), ("0", "b", 200, 1), ("1", "d", 200, 1)]
    assert checkpoints == {"0": 2, "1": 1}


def test_marbles_an_event_time_clock_with_max_delay_also_moves_with_enqueued_time() -> None:
    batches = lookup({"a": ("d1", 10), "b": ("d1", 20)})
    late_enqueued = batches["b"].events[0]  # b's own time is 20 s, but the service enqueued it at 70 s
    batches["b"] = batches["b"].with_events([rxhubs.Event(
        late_enqueued.body, 1, "10", T0 + dt.timedelta(seconds=70), properties=late_enqueued.properties)])

    def op(max_delay: float | None) -> Any:
        clock = hw.EventTime(lambda e: T0 + dt.timedelta(seconds=e.properties["ts"]), max_delay=max_delay)
        return hops.window("w", key=device, windows=hw.tumbling(60), aggregate=hw.count(), clock=clock)

    records, _ = run("-a-b-|", batches, op(None))
    assert records == exp("-o-o-|")  # only the events' own times: stream time 20
    records, out = run("-a-b-|", batches, op(5))
    # stream time is at least 70 - 5 = 65 at b: b (20) is late for [0, 60), which closes with a alone
    assert records == exp("-o-p-|", {"p": "d1@0=1"}) and out[1].late_count == 1
