"""The chaos run's ledger checker, safety half: pure functions over the ledgers (see ``_worker``).

Inputs (plain dicts, as the JSON-lines files hold them):

* ``stored``: what the hub stored, read back at the end: ``{"p", "s", "id", "ip"}`` (``ip`` the partition the
  producer meant it for);
* ``ledger``: every consumer incarnation's records (``ev``, ``own``, ``cp``, ``start``, ``stop``);
* ``procs``: what the orchestrator did to processes: ``{"c", "i", "event": "start"|"kill"|"stop"|"cont", "t"}``;
* ``link_log``: the emulator's receiver links: ``{"t", "conn", "hub", "cg", "p", "level", "event", "cond"}``.

A **session** is one incarnation's ownership of one partition, from its ``open`` record to its ``close`` record,
its kill, or the end of its ledger. Jepsen's checks, on the consumer side (faults.md section 2):

* lost: a stored event nobody processed [unseen / lost write];
* phantom: a processed (partition, sequence number) the hub did not store, with another id, or stored in a
  partition the producer did not mean [G1a analogue; .NET EventTracking];
* internal: within one session, a sequence number processed twice or not above the one before it
  [nonmonotonic-poll / int-poll-skip];
* duplicates across sessions, each explained by a handover between them: the older session ended (closed,
  killed, or paused as a zombie) and the event lies above the checkpoint the newer one started from
  (the last checkpoint written a second before it opened); cause ``crash``, ``zombie`` or the close reason,
  or ``regressed_checkpoint`` when that checkpoint was below one written earlier (a late write moved it back:
  the regression itself fails the run);
* checkpoints ahead: a checkpoint written (successfully) while a stored event at or below it was not yet
  processed by anyone, or before the writing incarnation itself processed that event; regressions: a
  successful write below one that had completed before it began (a zombie's late write);
* exclusivity: two exclusive receivers (an owner level) attached to one (hub, group, partition) at once.
"""

from __future__ import annotations

import bisect
import itertools
import json
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

OPEN_SLACK = 1.0  # a checkpoint completed this long before a session opened may not have been read by it


def read_jsonl(path: str | Path) -> Iterator[dict[str, Any]]:
    """The records of a JSON-lines file; a torn last line (a kill -9 mid-write) is skipped."""
    with open(path) as lines:
        for line in lines:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict):
                yield record


@dataclass
class Session:
    """One incarnation's ownership of one partition."""

    c: str
    i: int
    p: str
    open: float
    end: float | None = None
    how: str = "open"  # the close reason, "crash" (killed), "exit" (the process ended) or "open"
    seqs: list[int] = field(default_factory=list)

    @property
    def key(self) -> tuple[str, int, str, float]:
        return self.c, self.i, self.p, self.open


def _incarnation_ends(ledger: Iterable[dict[str, Any]], procs: Iterable[dict[str, Any]]) -> dict[tuple[str, int],
                                                                                                    tuple[float, str]]:
    ends: dict[tuple[str, int], tuple[float, str]] = {}
    for r in ledger:
        if r.get("k") == "stop":
            ends[(r["c"], r["i"])] = (r["t"], "exit")
    for r in procs:
        if r["event"] == "kill":
            ends[(r["c"], r["i"])] = (r["t"], "crash")
    return ends


def sessions(ledger: list[dict[str, Any]], procs: list[dict[str, Any]]) -> list[Session]:
    """Every session, from the ``own`` records and the kills."""
    ends = _incarnation_ends(ledger, procs)
    found: list[Session] = []
    current: dict[tuple[str, int, str], Session] = {}
    for r in sorted((r for r in ledger if r.get("k") == "own"), key=lambda r: r["t"]):
        key = (r["c"], r["i"], r["p"])
        if r["op"] == "open":
            session = Session(r["c"], r["i"], r["p"], r["t"])
            current[key] = session
            found.append(session)
        elif key in current and current[key].end is None:
            current[key].end, current[key].how = r["t"], str(r.get("reason"))
    for session in found:
        end = ends.get((session.c, session.i))
        if session.end is None and end is not None:
            session.end, session.how = end
    return found


def _stops(procs: list[dict[str, Any]]) -> dict[tuple[str, int], list[float]]:
    stops: dict[tuple[str, int], list[float]] = defaultdict(list)
    for r in procs:
        if r["event"] == "stop":
            stops[(r["c"], r["i"])].append(r["t"])
    return stops


def _session_index(all_sessions: list[Session]) -> dict[tuple[str, int, str], tuple[list[float], list[Session]]]:
    by: dict[tuple[str, int, str], list[Session]] = defaultdict(list)
    for s in all_sessions:
        by[(s.c, s.i, s.p)].append(s)
    return {k: ([s.open for s in v], v) for k, v in by.items()}


def _checkpoints(ledger: list[dict[str, Any]]) -> dict[str, list[tuple[float, float, int, str, int]]]:
    """Successful checkpoint writes per partition: (began, completed, sequence number, c, i), by completion."""
    cps: dict[str, list[tuple[float, float, int, str, int]]] = defaultdict(list)
    for r in ledger:
        if r.get("k") == "cp" and r.get("ok"):
            cps[r["p"]].append((r["t0"], r["t"], r["s"], r["c"], r["i"]))
    for writes in cps.values():
        writes.sort(key=lambda w: w[1])
    return cps


def _checkpoint_before(writes: list[tuple[float, float, int, str, int]], t: float) -> tuple[int, int]:
    """The checkpoint stored at ``t`` (the last write completed by then) and the highest written by then."""
    done = [w[2] for w in writes if w[1] <= t]
    return (done[-1], max(done)) if done else (-1, -1)


def check_events(stored: list[dict[str, Any]], ledger: list[dict[str, Any]], procs: list[dict[str, Any]]
                 ) -> dict[str, Any]:
    """Lost, phantom, internal and duplicate counts (duplicates by cause; examples of each failure)."""
    all_sessions = sessions(ledger, procs)
    index = _session_index(all_sessions)
    stops = _stops(procs)
    cps = _checkpoints(ledger)
    truth = {(e["p"], e["s"]): e for e in stored}
    wrong_partition = [e for e in stored if e.get("ip") is not None and str(e["ip"]) != e["p"]]
    seen: dict[tuple[str, int], list[tuple[float, Session | None]]] = defaultdict(list)
    phantoms: list[dict[str, Any]] = []
    outside = 0
    for r in sorted((r for r in ledger if r.get("k") == "ev"), key=lambda r: r["t"]):
        key = (r["p"], r["s"])
        event = truth.get(key)
        if event is None or event.get("id") != r.get("id"):
            phantoms.append({"p": r["p"], "s": r["s"], "id": r.get("id"), "by": f"{r['c']}.{r['i']}"})
        opens, group = index.get((r["c"], r["i"], r["p"]), ([], []))
        at = bisect.bisect_right(opens, r["t"]) - 1
        session = group[at] if at >= 0 else None
        if session is None:
            outside += 1
        else:
            session.seqs.append(r["s"])
        seen[key].append((r["t"], session))
    lost = [k for k in truth if k not in seen]
    internal = []
    for s in all_sessions:
        bad = [b for a, b in zip(s.seqs, s.seqs[1:], strict=False) if b <= a]
        if bad:
            internal.append({"session": f"{s.c}.{s.i} p{s.p}@{s.open:.1f}", "first_bad": bad[0], "count": len(bad)})
    causes: Counter[str] = Counter()
    per_handover: Counter[tuple[Any, ...]] = Counter()
    unexplained: list[dict[str, Any]] = []
    for (p, seq), hits in seen.items():
        for (_, first), (t2, later) in itertools.pairwise(hits):
            if first is None or later is None or first is later:
                continue  # outside ownership (counted) or inside one session (internal)
            cause = _explain(first, later, seq, cps.get(p, []), stops)
            if cause is None:
                unexplained.append({"p": p, "s": seq, "first": f"{first.c}.{first.i}", "again": f"{later.c}.{later.i}",
                                    "t": t2})
            else:
                causes[cause] += 1
                per_handover[(first.key, later.key)] += 1
    return {
        "stored": len(truth), "processed_unique": len(seen), "processed_total": sum(len(h) for h in seen.values()),
        "lost": len(lost), "lost_examples": sorted(lost)[:10],
        "phantoms": len(phantoms), "phantom_examples": phantoms[:10],
        "wrong_partition": len(wrong_partition),
        "internal_violations": len(internal), "internal_examples": internal[:10],
        "processed_outside_ownership": outside,
        "duplicates": sum(causes.values()) + len(unexplained),
        "duplicates_by_cause": dict(sorted(causes.items())),
        "duplicates_unexplained": len(unexplained), "unexplained_examples": unexplained[:10],
        "duplicates_max_per_handover": max(per_handover.values(), default=0),
        "sessions": len(all_sessions), "sessions_by_end": dict(Counter(s.how for s in all_sessions)),
    }


def _explain(a: Session, b: Session, seq: int, writes: list[tuple[float, float, int, str, int]],
             stops: dict[tuple[str, int], list[float]]) -> str | None:
    """Why sessions ``a`` and ``b`` both processed ``seq``, or None if no handover between them explains it."""
    old, new = (a, b) if a.open <= b.open else (b, a)
    if old.end is None:
        return None  # the older session never ended: two readers at once
    start_from, highest = _checkpoint_before(writes, new.open - OPEN_SLACK)
    if seq <= start_from:
        return None  # the newer session read below the checkpoint it started from
    if seq <= highest:
        return "regressed_checkpoint"  # it started from a checkpoint a late write had moved back (a failure)
    if old.how == "crash":
        return "crash"
    paused = any(old.open <= t <= old.end for t in stops.get((old.c, old.i), []))
    if paused:
        return "zombie"
    prefix = "reopen" if (old.c, old.i) == (new.c, new.i) else "handover"
    return f"{prefix}:{old.how}"


def check_checkpoints(stored: list[dict[str, Any]], ledger: list[dict[str, Any]]) -> dict[str, Any]:
    """Checkpoints written ahead of processed work, and regressions (successful writes only)."""
    first: dict[tuple[str, int], float] = {}
    own: set[tuple[str, int, str, int]] = set()
    own_time: dict[tuple[str, int, str, int], float] = {}
    for r in ledger:
        if r.get("k") == "ev":
            key = (r["p"], r["s"])
            first[key] = min(r["t"], first.get(key, r["t"]))
            mine = (r["c"], r["i"], r["p"], r["s"])
            own.add(mine)
            own_time[mine] = min(r["t"], own_time.get(mine, r["t"]))
    covered: dict[str, list[float]] = {}  # per partition: time by which every seq <= s was processed
    for p in {e["p"] for e in stored}:
        top = max(e["s"] for e in stored if e["p"] == p)
        running, times = 0.0, []
        for s in range(top + 1):
            running = max(running, first.get((p, s), float("inf")))
            times.append(running)
        covered[p] = times
    ahead: list[dict[str, Any]] = []
    regressions: list[dict[str, Any]] = []
    attempts = Counter[str]()
    for r in ledger:
        if r.get("k") == "cp":
            attempts["ok" if r.get("ok") else "failed"] += 1
    for p, writes in _checkpoints(ledger).items():
        times = covered.get(p, [])
        for began, _, s, c, i in writes:
            if s >= len(times) or times[s] > began or own_time.get((c, i, p, s), float("inf")) > began:
                ahead.append({"p": p, "s": s, "by": f"{c}.{i}", "t0": began})
        for began, done, s, c, i in writes:
            before = max((w[2] for w in writes if w[1] < began), default=-1)
            if s < before:
                regressions.append({"p": p, "s": s, "below": before, "by": f"{c}.{i}", "t": done})
    return {"checkpoint_attempts": dict(attempts), "checkpoints_ahead": len(ahead), "ahead_examples": ahead[:10],
            "checkpoint_regressions": len(regressions), "regression_examples": regressions[:10]}


def check_exclusive(link_log: list[dict[str, Any]]) -> dict[str, Any]:
    """Instants with two exclusive receivers on one (hub, group, partition), from the emulator's link log."""
    opened: dict[tuple[Any, ...], list[float]] = defaultdict(list)
    intervals: dict[tuple[Any, ...], list[tuple[float, float]]] = defaultdict(list)
    for r in sorted(link_log, key=lambda r: (r["t"], r["event"] != "detach")):
        if r.get("level") is None:
            continue
        where = (r["hub"], str(r["cg"]).lower(), r["p"])
        link = (r["conn"], *where)
        if r["event"] == "attach":
            opened[link].append(r["t"])
        elif r["event"] == "detach" and opened[link]:  # a "refuse" was never attached
            intervals[where].append((opened[link].pop(0), r["t"]))
    last = max((r["t"] for r in link_log), default=0.0)
    for link, starts in opened.items():
        intervals[link[1:]].extend((t, last) for t in starts)
    overlaps = []
    for where, spans in intervals.items():
        spans.sort()
        reach = None
        for a, b in spans:
            if reach is not None and a < reach[1]:
                overlaps.append({"partition": where[2], "group": where[1], "from": a, "seconds": min(b, reach[1]) - a})
            if reach is None or b > reach[1]:
                reach = (a, b)
    return {"exclusive_links": sum(len(v) for v in intervals.values()), "double_receivers": len(overlaps),
            "double_receiver_examples": overlaps[:10],
            "double_receiver_max_s": round(max((o["seconds"] for o in overlaps), default=0.0), 3)}
