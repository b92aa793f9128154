"""The chaos run's ledger checker, liveness half: lag over time, partitions owned, recovery per fault.

* **Lag** at time t, per partition: t minus the send time of the oldest event sent by t that nobody had
  processed by t (0 when everything sent was processed); the run's lag is the largest over partitions.
* **Owned** at time t: partitions (of those the hub had then) with a session (``_check.sessions``) whose
  incarnation was alive and not paused at t.
* **Recovered** after a fault: from its reference point (its start or end, by type: ``_plan``), the first
  sample from which every partition is owned and the lag is under 2 s for 3 s in a row. A fault meets its
  bound when it recovered by "reference + bound"; another fault that began before the first had recovered
  and before that deadline (and had not itself recovered before the first's reference) extends the deadline
  to its own "reference + bound"; extensions do not chain (a fault that began after the first's own deadline
  cannot excuse it).
"""

from __future__ import annotations

import bisect
import heapq
import statistics
from collections import defaultdict
from typing import Any

from rxhubs.chaos._check import Session
from rxhubs.chaos._plan import FAULT_TYPES, LAG_OK, STABLE

STEP = 0.25


def lag_series(stored: list[dict[str, Any]], sent: dict[str, float], first_processed: dict[tuple[str, int], float],
               begin: float, end: float, step: float = STEP) -> tuple[list[float], dict[str, list[float]]]:
    """Sample times and, per partition, the lag at each (seconds); events without a send time are skipped."""
    times = [begin + k * step for k in range(int((end - begin) / step) + 1)]
    per: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for e in stored:
        t_sent = sent.get(e.get("id") or "")
        if t_sent is not None:
            per[e["p"]].append((t_sent, first_processed.get((e["p"], e["s"]), float("inf"))))
    lags: dict[str, list[float]] = {}
    for p, events in per.items():
        events.sort()
        heap: list[tuple[float, float]] = []
        k = 0
        series = []
        for t in times:
            while k < len(events) and events[k][0] <= t:
                heapq.heappush(heap, events[k])
                k += 1
            while heap and heap[0][1] <= t:
                heapq.heappop(heap)
            series.append(t - heap[0][0] if heap else 0.0)
        lags[p] = series
    return times, lags


def owned_series(all_sessions: list[Session], procs: list[dict[str, Any]], times: list[float]
                 ) -> dict[str, list[str | None]]:
    """Per partition, at each sample: the consumer whose live, unpaused incarnation owns it (None: nobody)."""
    paused: dict[tuple[str, int], list[tuple[float, float]]] = defaultdict(list)
    stopped_at: dict[tuple[str, int], float] = {}
    for r in sorted(procs, key=lambda r: r["t"]):
        key = (r["c"], r["i"])
        if r["event"] == "stop":
            stopped_at[key] = r["t"]
        elif r["event"] == "cont" and key in stopped_at:
            paused[key].append((stopped_at.pop(key), r["t"]))
    for key, t in stopped_at.items():
        paused[key].append((t, float("inf")))
    owner: dict[str, list[str | None]] = {}
    for s in all_sessions:
        series = owner.setdefault(s.p, [None] * len(times))
        end = s.end if s.end is not None else float("inf")
        gaps = paused.get((s.c, s.i), [])
        for k in range(bisect.bisect_left(times, s.open), bisect.bisect_left(times, end)):
            if not any(a <= times[k] < b for a, b in gaps):
                series[k] = s.c
    return owner


def healthy(times: list[float], lags: dict[str, list[float]], owner: dict[str, list[str | None]],
            partitions_at: list[tuple[float, int]]) -> list[bool]:
    """At each sample: every partition the hub had is owned, and the lag is under ``LAG_OK``."""
    result = []
    for k, t in enumerate(times):
        count = max((n for at, n in partitions_at if at <= t), default=partitions_at[0][1] if partitions_at else 0)
        pids = [str(p) for p in range(count)]
        ok = all(owner.get(p, [None] * len(times))[k] is not None for p in pids)
        ok = ok and all(lags.get(p, [0.0] * len(times))[k] < LAG_OK for p in pids)
        result.append(ok)
    return result


def _recovered_at(times: list[float], ok: list[bool], ref: float) -> float | None:
    need = int(STABLE / STEP)
    run = 0
    for k, t in enumerate(times):
        if t < ref:
            continue
        run = run + 1 if ok[k] else 0
        if run > need:
            return times[k - need]
    return None


def recovery(faults: list[dict[str, Any]], times: list[float], ok: list[bool], origin: float = 0.0
             ) -> list[dict[str, Any]]:
    """Per injected fault: reference, recovery seconds, bound allowed (cluster-aware), met.

    ``origin`` is subtracted from the times in each row's ``cluster`` labels (``type@seconds``).
    """
    rows = []
    for f in faults:
        if not f.get("injected"):
            continue
        kind = FAULT_TYPES[f["type"]]
        ref = f["start"] if kind.measure_from == "start" else f["end"]
        at = _recovered_at(times, ok, ref)
        rows.append({"type": f["type"], "target": f.get("target"), "start": f["start"], "end": f["end"], "ref": ref,
                     "recovered_at": at, "recovery_s": None if at is None else round(at - ref, 2),
                     "bound_s": kind.bound})
    for row in rows:
        if row["recovered_at"] is None:
            row["met"], row["allowed_s"], row["cluster"] = False, row["bound_s"], []
            continue
        deadline = row["ref"] + row["bound_s"]
        # a fault that hit before this one recovered and before its own deadline (and had not itself recovered
        # before this one's reference point) may extend it to its own deadline; no chains through a third
        cluster = [o for o in rows if o is not row and o["start"] < min(row["recovered_at"], deadline)
                   and (o["recovered_at"] or float("inf")) > row["ref"]]
        allowed = max([deadline] + [o["ref"] + o["bound_s"] for o in cluster])
        row["allowed_s"] = round(allowed - row["ref"], 2)
        row["cluster"] = [f"{o['type']}@{o['start'] - origin:.0f}" for o in cluster]
        row["met"] = row["recovered_at"] <= allowed
    return rows


def by_type(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Recovery p50/p95/max per fault type, with the bound and how many met it."""
    grouped: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        grouped[row["type"]].append(row)
    summary = {}
    for name, group in sorted(grouped.items()):
        values = sorted(r["recovery_s"] for r in group if r["recovery_s"] is not None)
        summary[name] = {
            "n": len(group), "met": sum(bool(r["met"]) for r in group), "bound_s": FAULT_TYPES[name].bound,
            "p50_s": round(statistics.median(values), 2) if values else None,
            "p95_s": _p95(values), "max_s": values[-1] if values else None,
            "not_recovered": sum(r["recovery_s"] is None for r in group),
        }
    return summary


def _p95(values: list[float]) -> float | None:
    if not values:
        return None
    return values[min(len(values) - 1, round(0.95 * (len(values) - 1)))]


def drain_seconds(stored: list[dict[str, Any]], first_processed: dict[tuple[str, int], float], stop: float
                  ) -> float | None:
    """Seconds from the producer's stop until the last stored event was first processed (None: some never)."""
    last = stop
    for e in stored:
        t = first_processed.get((e["p"], e["s"]))
        if t is None:
            return None
        last = max(last, t)
    return round(last - stop, 2)
