"""The chaos run's checker and plan, on synthetic ledgers: each failure kind is caught, each explained case is not.

Pure functions, no processes: a run's files are built here record by record (see ``rxhubs.chaos._worker``
for their shape) and checked.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rxhubs.chaos._check import check_checkpoints, check_events, check_exclusive, read_jsonl
from rxhubs.chaos._plan import CONSUMERS, FAULT_TYPES, _occupies, make_schedule
from rxhubs.chaos._recovery import healthy, lag_series, recovery
from rxhubs.chaos._report import analyze, figures


class Run:
    """A synthetic run: what the hub stored, what the producer sent, the consumers' ledgers, the processes."""

    def __init__(self, events: int = 10, partitions: int = 1) -> None:
        self.stored = [{"p": str(p), "s": s, "id": f"{p}-{s}", "ip": str(p)} for p in range(partitions)
                       for s in range(events)]
        self.sent = [{"id": e["id"], "p": e["p"], "t": 100.0 + e["s"], "ok": True} for e in self.stored]
        self.ledger: list[dict[str, Any]] = []
        self.procs: list[dict[str, Any]] = []

    def own(self, who: str, p: str, t: float, op: str = "open", reason: str | None = None) -> Run:
        c, i = who.split(".")
        self.ledger.append({"k": "own", "op": op, "p": p, "reason": reason, "c": c, "i": int(i), "t": t})
        return self

    def ev(self, who: str, p: str, seqs: range | list[int], t: float, step: float = 0.01) -> Run:
        c, i = who.split(".")
        for k, s in enumerate(seqs):
            self.ledger.append({"k": "ev", "p": p, "s": s, "id": f"{p}-{s}", "c": c, "i": int(i), "t": t + k * step})
        return self

    def cp(self, who: str, p: str, s: int, t: float, ok: bool = True) -> Run:
        c, i = who.split(".")
        self.ledger.append({"k": "cp", "p": p, "s": s, "t0": t, "t": t + 0.05, "ok": ok, "c": c, "i": int(i)})
        return self

    def proc(self, who: str, event: str, t: float) -> Run:
        c, i = who.split(".")
        self.procs.append({"c": c, "i": int(i), "event": event, "t": t})
        return self

    def events(self) -> dict[str, Any]:
        return check_events(self.stored, self.ledger, self.procs)


def clean() -> Run:
    """c1.1 owns p0, processes 0-9 (one a second from t=100.5) and checkpoints 4 then 9."""
    run = Run().own("c1.1", "0", 100.0)
    for s in range(10):
        run.ev("c1.1", "0", [s], 100.5 + s)
    return run.cp("c1.1", "0", 4, 105.0).cp("c1.1", "0", 9, 110.0)


def test_a_clean_run_has_nothing_to_report() -> None:
    run = clean()
    found = run.events()
    assert (found["lost"], found["phantoms"], found["internal_violations"], found["duplicates"]) == (0, 0, 0, 0)
    assert found["processed_unique"] == found["stored"] == 10
    assert found["processed_outside_ownership"] == 0
    cps = check_checkpoints(run.stored, run.ledger)
    assert (cps["checkpoints_ahead"], cps["checkpoint_regressions"]) == (0, 0)


def test_an_event_nobody_processed_is_lost() -> None:
    run = Run().own("c1.1", "0", 100.0).ev("c1.1", "0", [0, 1, 2, 4, 5, 6, 7, 8, 9], 101.0)
    found = run.events()
    assert found["lost"] == 1 and found["lost_examples"] == [("0", 3)]


def test_processing_what_the_hub_never_stored_or_stored_elsewhere_is_a_phantom() -> None:
    run = clean()
    run.ledger.append({"k": "ev", "p": "0", "s": 10, "id": "0-10", "c": "c1", "i": 1, "t": 111.0})  # not stored
    run.ledger.append({"k": "ev", "p": "0", "s": 3, "id": "other", "c": "c1", "i": 1, "t": 111.1})  # other id
    run.stored[5]["ip"] = "1"  # the producer meant it for partition 1
    found = run.events()
    assert found["phantoms"] == 2 and found["wrong_partition"] == 1


def test_one_session_reading_backwards_or_twice_is_an_internal_violation() -> None:
    run = Run().own("c1.1", "0", 100.0).ev("c1.1", "0", [0, 1, 2, 3, 2, 3, 4, 5, 6, 7, 8, 9], 101.0)
    found = run.events()
    assert found["internal_violations"] == 1 and found["internal_examples"][0]["first_bad"] == 2
    assert found["duplicates"] == 0  # inside one session it is an internal violation, not a duplicate


def test_duplicates_after_a_crash_are_explained_by_it() -> None:
    run = Run(events=13).own("c1.1", "0", 100.0).ev("c1.1", "0", range(10), 101.0).cp("c1.1", "0", 4, 101.2)
    run.proc("c1.1", "kill", 102.0)
    run.own("c2.1", "0", 115.0).ev("c2.1", "0", range(5, 13), 115.5)
    found = run.events()
    assert found["duplicates"] == 5 and found["duplicates_by_cause"] == {"crash": 5}
    assert found["duplicates_unexplained"] == 0 and found["lost"] == 0
    assert found["duplicates_max_per_handover"] == 5
    assert found["sessions_by_end"] == {"crash": 1, "open": 1}


def test_duplicates_after_a_handover_or_a_reopen_name_the_close_reason() -> None:
    run = Run(events=12).own("c1.1", "0", 100.0).ev("c1.1", "0", range(8), 101.0).cp("c1.1", "0", 5, 101.2)
    run.own("c1.1", "0", 102.0, "close", "ownership_lost")
    run.own("c2.1", "0", 103.5).ev("c2.1", "0", range(6, 10), 104.0).cp("c2.1", "0", 9, 104.2)
    run.own("c2.1", "0", 105.0, "close", "ownership_lost").own("c2.1", "0", 106.5)  # a stolen link, re-claimed
    run.ev("c2.1", "0", [8, 9, 10, 11], 107.0)  # the checkpoint it read was written before 105.5? no: 104.25
    found = run.events()
    assert found["duplicates_by_cause"] == {"handover:ownership_lost": 2}
    assert found["duplicates_unexplained"] == 2  # 8 and 9 lie at or below checkpoint 9, which it started from


def test_a_newcomer_starting_from_a_checkpoint_a_late_write_moved_back_names_that_cause() -> None:
    run = Run(events=12).own("c1.1", "0", 100.0).ev("c1.1", "0", range(10), 101.0).cp("c1.1", "0", 9, 101.2)
    run.own("c1.1", "0", 102.0, "close", "ownership_lost").cp("c2.1", "0", 4, 103.0)  # c2.1's late write
    run.own("c3.1", "0", 105.0).ev("c3.1", "0", range(5, 12), 105.5)
    found = run.events()
    assert found["duplicates_by_cause"] == {"regressed_checkpoint": 5} and found["duplicates_unexplained"] == 0
    assert check_checkpoints(run.stored, run.ledger)["checkpoint_regressions"] == 1


def test_a_zombie_processing_after_it_resumed_is_explained_as_zombie() -> None:
    run = Run(events=14).own("c1.1", "0", 100.0).ev("c1.1", "0", range(8), 101.0).cp("c1.1", "0", 7, 101.2)
    run.proc("c1.1", "stop", 102.0)
    run.own("c2.1", "0", 116.0).ev("c2.1", "0", range(8, 14), 116.5)
    run.proc("c1.1", "cont", 120.0)
    run.ev("c1.1", "0", [8, 9], 120.1).own("c1.1", "0", 120.3, "close", "expired")
    found = run.events()
    assert found["duplicates_by_cause"] == {"zombie": 2} and found["duplicates_unexplained"] == 0


def test_two_readers_at_once_or_a_reread_below_the_checkpoint_are_unexplained() -> None:
    run = Run(events=10).own("c1.1", "0", 100.0).ev("c1.1", "0", range(6), 101.0).cp("c1.1", "0", 5, 101.2)
    run.own("c2.1", "0", 103.0).ev("c2.1", "0", range(4, 10), 103.5)  # c1.1 never let go: two readers
    found = run.events()
    assert found["duplicates_unexplained"] == 2 and found["unexplained_examples"][0]["again"] == "c2.1"
    run = Run(events=10).own("c1.1", "0", 100.0).ev("c1.1", "0", range(6), 101.0).cp("c1.1", "0", 5, 101.2)
    run.own("c1.1", "0", 102.0, "close", "ownership_lost").own("c2.1", "0", 103.0).ev("c2.1", "0", range(3, 10), 103.5)
    found = run.events()
    assert found["duplicates_unexplained"] == 3  # 3, 4, 5: at or below checkpoint 5, written before it opened


def test_processing_a_partition_before_owning_it_is_counted() -> None:
    run = Run().ev("c1.1", "0", range(10), 99.0).own("c1.1", "0", 200.0)
    assert run.events()["processed_outside_ownership"] == 10


def test_a_checkpoint_ahead_of_processed_work_is_caught() -> None:
    run = clean()
    run.cp("c1.1", "0", 9, 106.0)  # event 9 is processed at 109.5
    found = check_checkpoints(run.stored, run.ledger)
    assert found["checkpoints_ahead"] == 1 and found["ahead_examples"][0]["s"] == 9
    run = clean()
    run.cp("c2.1", "0", 9, 111.0)  # processed by c1.1, but never by the writer
    assert check_checkpoints(run.stored, run.ledger)["checkpoints_ahead"] == 1


def test_a_late_successful_write_below_the_checkpoint_is_a_regression_and_a_fenced_one_is_not() -> None:
    run = clean().cp("c1.1", "0", 4, 112.0, ok=False)
    found = check_checkpoints(run.stored, run.ledger)
    assert found["checkpoint_regressions"] == 0 and found["checkpoint_attempts"] == {"ok": 2, "failed": 1}
    run = clean().cp("c1.1", "0", 4, 112.0)
    found = check_checkpoints(run.stored, run.ledger)
    assert found["checkpoint_regressions"] == 1 and found["regression_examples"][0]["below"] == 9


def link(t: float, conn: str, event: str, level: int | None = 0, p: str = "0") -> dict[str, Any]:
    return {"t": t, "conn": conn, "hub": "chaos", "cg": "$Default", "p": p, "level": level, "event": event,
            "cond": None}


def test_two_exclusive_receivers_at_once_are_caught_from_the_link_log() -> None:
    handover = [link(1.0, "a", "attach"), link(5.0, "b", "attach"), link(5.0, "a", "detach"), link(9.0, "b", "detach")]
    assert check_exclusive(handover)["double_receivers"] == 0
    overlap = [link(1.0, "a", "attach"), link(5.0, "b", "attach"), link(6.5, "a", "detach"), link(9.0, "b", "detach")]
    found = check_exclusive(overlap)
    assert found["double_receivers"] == 1 and found["double_receiver_max_s"] == 1.5
    refused = [link(1.0, "a", "attach"), link(2.0, "b", "refuse"), link(3.0, "b", "attach"), link(3.0, "a", "detach")]
    assert check_exclusive(refused)["double_receivers"] == 0 and check_exclusive(refused)["exclusive_links"] == 2
    readers = [link(1.0, "a", "attach", None), link(2.0, "b", "attach"), link(3.0, "c", "attach", None, "1")]
    assert check_exclusive(readers)["double_receivers"] == 0  # non-exclusive readers may overlap
    never_detached = [link(1.0, "a", "attach"), link(5.0, "b", "attach"), link(8.0, "b", "detach")]
    assert check_exclusive(never_detached)["double_receivers"] == 1


def test_lag_is_the_age_of_the_oldest_unprocessed_event() -> None:
    stored = [{"p": "0", "s": s, "id": str(s)} for s in range(3)]
    sent = {"0": 10.0, "1": 11.0, "2": 12.0}
    first = {("0", 0): 10.5, ("0", 1): 16.0, ("0", 2): 16.0}
    times, lags = lag_series(stored, sent, first, 10.0, 17.0, step=1.0)
    assert times == [10.0 + k for k in range(8)]
    assert lags["0"] == [0.0, 0.0, 1.0, 2.0, 3.0, 4.0, 0.0, 0.0]


def test_recovery_is_measured_from_the_fault_and_a_second_fault_extends_the_time_allowed() -> None:
    times = [k * 0.25 for k in range(400)]
    ok = [not 10.0 <= t < 34.0 for t in times]  # unhealthy from 10 to 34 s
    faults = [{"type": "hub_reset", "start": 8.0, "end": 12.0, "injected": True},
              {"type": "hub_latency", "start": 14.0, "end": 20.0, "injected": True},
              {"type": "steal", "start": 60.0, "end": 60.0, "injected": True},
              {"type": "kill", "start": 70.0, "end": 70.0, "injected": False}]
    rows = recovery(faults, times, ok)
    assert [r["type"] for r in rows] == ["hub_reset", "hub_latency", "steal"]
    reset, latency, steal = rows
    assert reset["recovery_s"] == 22.0 and reset["recovered_at"] == 34.0  # over its own bound (20 s)
    assert reset["met"] is True and reset["allowed_s"] == 23.0  # hub_latency ends at 20 with its bound 15
    assert latency["recovery_s"] == 14.0 and latency["met"] is True
    assert steal["recovery_s"] == 0.0 and steal["cluster"] == []
    alone = recovery(faults[:1], times, ok)[0]
    assert alone["met"] is False and alone["allowed_s"] == FAULT_TYPES["hub_reset"].bound


def test_healthy_needs_every_partition_of_the_time_owned_and_caught_up() -> None:
    times = [0.0, 1.0, 2.0]
    lags = {"0": [0.0, 0.0, 3.0], "1": [0.0, 0.0, 0.0], "4": [9.0, 9.0, 9.0]}
    owner: dict[str, list[str | None]] = {"0": ["c1", "c1", "c1"], "1": ["c2", None, "c2"]}
    assert healthy(times, lags, owner, [(0.0, 2)]) == [True, False, False]
    assert healthy(times, lags, owner, [(0.0, 2), (0.5, 6)]) == [True, False, False]


def test_analyze_gives_pass_for_a_clean_run_and_fail_naming_each_failure(tmp_path: Path) -> None:
    run = clean()
    info = {"seed": 1, "duration": 20, "t0": 99.0, "producer_stop": 110.0, "procs": run.procs,
            "partitions_at": [(99.0, 1)],
            "faults": [{"type": "hub_reset", "target": "c1", "start": 100.0, "end": 101.0, "injected": True},
                       {"type": "kill", "target": "c2", "start": 102.0, "end": 103.0, "injected": False,
                        "error": "boom"}]}
    links = [link(100.0, "a", "attach")]
    report = analyze(stored=run.stored, sent=run.sent, ledger=run.ledger, run=info, link_log=links)
    assert report["failures"] == ["not injected: kill@3s: boom"], report["failures"]
    info["faults"] = info["faults"][:1]
    report = analyze(stored=run.stored, sent=run.sent, ledger=run.ledger, run=info, link_log=links)
    assert report["verdict"] == "PASS" and report["faults_by_type"] == {"hub_reset": 1}
    assert report["recovery_by_type"]["hub_reset"]["met"] == 1
    verdict = figures(report)[-1]
    assert verdict["metric"] == "verdict" and verdict["met"] is True
    short = analyze(stored=run.stored, sent=run.sent, ledger=run.ledger, run={**info, "stored_expected": 11},
                    link_log=links)
    assert short["failures"] == ["read back 10 of the 11 events the hub holds"]
    unwritten = [r for r in run.ledger if r["k"] != "cp"]
    blind = analyze(stored=run.stored, sent=run.sent, ledger=unwritten, run=info, link_log=links)
    assert blind["failures"] == ["no checkpoint write was recorded (the ledger store missed the verb rxhubs used)"]
    run.ledger = [r for r in run.ledger if r.get("s") != 7]
    report = analyze(stored=run.stored, sent=run.sent, ledger=run.ledger, run=info, link_log=links)
    assert report["verdict"] == "FAIL" and "lost=1" in report["failures"]
    assert "checkpoints_ahead=1" in report["failures"]  # checkpoint 9 was written with 7 never processed


def test_a_torn_last_line_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "ledger-c1.1.jsonl"
    path.write_text(json.dumps({"k": "start"}) + "\n" + '{"k": "ev", "p": "0", "s"')
    assert list(read_jsonl(path)) == [{"k": "start"}]


@pytest.mark.parametrize("seed", [1, 2, 3, 42])
def test_an_eight_minute_plan_injects_every_type_and_keeps_a_consumer_unfaulted(seed: int) -> None:
    plan = make_schedule(seed, 480)
    assert {f.type for f in plan} == set(FAULT_TYPES)
    assert sum(f.type == "partitions" for f in plan) == 1
    assert make_schedule(seed, 480) == plan and make_schedule(seed + 100, 480) != plan
    for t in [k * 0.5 for k in range(960)]:
        active = [f for f in plan if _occupies(f)[0] <= t < _occupies(f)[1]]
        assert len(active) <= 2, (t, active)
        assert sum(f.target is None for f in active) <= 1
        targets = [f.target for f in active if f.target is not None]
        assert len(set(targets)) == len(targets) and len(targets) < len(CONSUMERS)
    assert all(f.end + FAULT_TYPES[f.type].bound <= 475 for f in plan)
    assert all(f.end - f.start >= FAULT_TYPES[f.type].duration[0] - 0.01 for f in plan)


def test_a_short_plan_still_injects_faults() -> None:
    plan = make_schedule(3, 60)
    assert plan and all(f.start >= 9.0 and f.end <= 40.0 for f in plan)
