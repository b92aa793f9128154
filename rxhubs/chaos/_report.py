"""The chaos run's report: every check over the run's files, the verdict, and the bench figures.

A run's output folder holds ``schedule.json`` (the seed's plan), ``run.json`` (what was done when: faults
with their real times, process kills/pauses/restarts, the partition count over time), ``producer.jsonl``
(``{"id", "p", "t", "ok"}`` per event sent), ``stored.jsonl`` (the hub's contents read back at the end),
``links.jsonl`` (the emulator's link log) and one ``ledger-NAME.INCARNATION.jsonl`` per consumer process.
:func:`analyze` is pure; :func:`report_dir` reads a folder (``python -m rxhubs.chaos._report DIR``
re-checks a finished run).
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from rxhubs.bench._report import figure
from rxhubs.chaos._check import check_checkpoints, check_events, check_exclusive, read_jsonl, sessions
from rxhubs.chaos._plan import FAULT_TYPES
from rxhubs.chaos._recovery import by_type, drain_seconds, healthy, lag_series, owned_series, recovery

#: Report keys that must be 0 for a PASS.
MUST_BE_ZERO = ("lost", "phantoms", "wrong_partition", "internal_violations", "duplicates_unexplained",
                "processed_outside_ownership", "checkpoints_ahead", "checkpoint_regressions", "double_receivers")


def analyze(*, stored: list[dict[str, Any]], sent: list[dict[str, Any]], ledger: list[dict[str, Any]],
            run: dict[str, Any], link_log: list[dict[str, Any]]) -> dict[str, Any]:
    """The full report of one run (see the module docs of ``_check`` and ``_recovery``)."""
    procs = run.get("procs", [])
    report: dict[str, Any] = {"seed": run.get("seed"), "duration_s": run.get("duration"),
                              "produced": len(sent), "produced_acked": sum(bool(r.get("ok")) for r in sent)}
    report.update(check_events(stored, ledger, procs))
    report.update(check_checkpoints(stored, ledger))
    if run.get("link_log", True):
        report.update(check_exclusive(link_log))
    else:
        report.update({"double_receivers": None, "exclusivity": "not checked: the emulator kept no link log"})
    first: dict[tuple[str, int], float] = {}
    for r in ledger:
        if r.get("k") == "ev":
            key = (r["p"], r["s"])
            first[key] = min(r["t"], first.get(key, r["t"]))
    send_times = {r["id"]: r["t"] for r in sent}
    begin, stop = run["t0"], run["producer_stop"]
    end = max([stop, *first.values()]) + 1.0
    times, lags = lag_series(stored, send_times, first, begin, end)
    owner = owned_series(sessions(ledger, procs), procs, times)
    ok = healthy(times, lags, owner, [tuple(x) for x in run.get("partitions_at", [])])
    faults = run.get("faults", [])
    rows = recovery(faults, times, ok, begin)
    injected = Counter(f["type"] for f in faults if f.get("injected"))
    report.update({
        "faults_injected": sum(injected.values()), "faults_by_type": dict(sorted(injected.items())),
        "fault_types_injected": f"{len(injected)}/{len(FAULT_TYPES)}",
        "faults_not_injected": [f"{f['type']}@{f['start'] - begin:.0f}s: {f.get('error')}" for f in faults
                                if not f.get("injected")],
        "recovery_by_type": by_type(rows),
        "recovery_failures": [r for r in rows if not r["met"]],
        "drain_s": drain_seconds(stored, first, stop),
        "max_lag_s": round(max((max(v) for v in lags.values()), default=0.0), 2),
        "procs": dict(Counter(r["event"] for r in procs)),
    })
    failures = [f"{key}={report[key]}" for key in MUST_BE_ZERO if report.get(key)]
    failures += [f"{r['type']}@{r['start'] - begin:.0f}s recovered in {r['recovery_s']} s > {r['allowed_s']} s"
                 for r in report["recovery_failures"]]
    failures += [f"not injected: {x}" for x in report["faults_not_injected"]]
    if run.get("stored_expected") not in (None, len(stored)):
        failures.append(f"read back {len(stored)} of the {run['stored_expected']} events the hub holds")
    if report["double_receivers"] is None:
        failures.append("exclusivity not checked (no link log)")
    if report["faults_injected"] == 0:
        failures.append("no fault was injected")
    if report["processed_unique"] and not report["checkpoint_attempts"]:
        failures.append("no checkpoint write was recorded (the ledger store missed the verb rxhubs used)")
    if report["processed_unique"] == 0:
        failures.append("nothing was processed")
    report["failures"] = failures
    report["verdict"] = "PASS" if not failures else "FAIL"
    report["series"] = {"t": [round(t - begin, 2) for t in times],
                        "lag": {p: [round(x, 2) for x in v] for p, v in sorted(lags.items())},
                        "owner": {p: v for p, v in sorted(owner.items())}}
    report["recoveries"] = [{**r, "start": round(r["start"] - begin, 2), "end": round(r["end"] - begin, 2),
                             "ref": round(r["ref"] - begin, 2),
                             "recovered_at": None if r["recovered_at"] is None else round(r["recovered_at"] - begin, 2)}
                            for r in rows]
    return report


def load_dir(out: Path) -> dict[str, Any]:
    """The inputs of :func:`analyze` from a run's folder."""
    ledger: list[dict[str, Any]] = []
    for path in sorted(out.glob("ledger-*.jsonl")):
        ledger.extend(read_jsonl(path))
    return {"stored": list(read_jsonl(out / "stored.jsonl")), "sent": list(read_jsonl(out / "producer.jsonl")),
            "ledger": ledger, "run": json.loads((out / "run.json").read_text()),
            "link_log": list(read_jsonl(out / "links.jsonl"))}


def report_dir(out: Path) -> dict[str, Any]:
    """Check a finished run's folder: write ``chaos_report.json`` (without the series) and the lag plot."""
    from rxhubs.chaos._plot import plot_lag

    report = analyze(**load_dir(out))
    plot_lag(out / "chaos_lag.png", report)
    brief = {k: v for k, v in report.items() if k != "series"}
    (out / "chaos_report.json").write_text(json.dumps(brief, indent=2))
    return report


def figures(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The bench JSON lines of a chaos run (no baseline: the official processor does not run here)."""

    def one(metric: str, unit: str, value: Any, target: str | None, met: bool | None, **extra: Any) -> dict[str, Any]:
        return figure("chaos", metric, unit, value, None, None, target, higher_is_better=False, met=met,
                      seed=report["seed"], **extra)

    # each recovery against what it was allowed (its type's bound, extended by faults that overlapped it): the
    # figure "met" judges, so the two never disagree (the type's bound alone read 1.86 on a run that met it)
    rows = report.get("recoveries", [])
    worst = [r["recovery_s"] / r["allowed_s"] for r in rows if r["recovery_s"] is not None and r["allowed_s"]]
    return [
        one("events_lost", "events", report["lost"], "0", report["lost"] == 0, stored=report["stored"]),
        one("duplicates_unexplained", "events", report["duplicates_unexplained"], "0",
            report["duplicates_unexplained"] == 0, by_cause=report["duplicates_by_cause"]),
        one("duplicates", "events", report["duplicates"], None, None,
            max_per_handover=report["duplicates_max_per_handover"]),
        one("checkpoints_ahead_of_processing", "checkpoints", report["checkpoints_ahead"], "0",
            report["checkpoints_ahead"] == 0),
        one("checkpoint_regressions", "checkpoints", report["checkpoint_regressions"], "0",
            report["checkpoint_regressions"] == 0),
        one("double_exclusive_receivers", "instants", report["double_receivers"], "0",
            report["double_receivers"] == 0),
        one("recovery_over_allowed_worst", "ratio", round(max(worst), 3) if worst else None, "<= 1",
            not report["recovery_failures"], by_type={k: v["p95_s"] for k, v in report["recovery_by_type"].items()}),
        one("faults_injected", "faults", report["faults_injected"], None, None,
            types=report["fault_types_injected"]),
        one("verdict", "pass", report["verdict"] == "PASS", "PASS", report["verdict"] == "PASS",
            failures=report["failures"][:5]),
    ]


def main(argv: list[str]) -> int:
    report = report_dir(Path(argv[0]))
    print(json.dumps({k: v for k, v in report.items() if k not in ("series", "recoveries")}, indent=2))
    print(report["verdict"])
    return 0 if report["verdict"] == "PASS" else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
