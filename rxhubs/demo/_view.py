"""What the demo shows: a live table of partitions, and the final summary."""

from __future__ import annotations

from dataclasses import dataclass

CLEAR = "\x1b[H\x1b[2J"


@dataclass
class Snapshot:
    """The state of the consumer group at one moment."""

    elapsed: float
    owners: dict[str, str]
    checkpoints: dict[str, int]
    last_enqueued: dict[str, int]

    @property
    def written(self) -> int:
        """Events checkpointed (written by the sink, then checkpointed)."""
        return sum(c + 1 for c in self.checkpoints.values())

    @property
    def caught_up(self) -> bool:
        """Every partition checkpointed up to its last enqueued event."""
        return all(self.checkpoints.get(p, -1) >= last for p, last in self.last_enqueued.items())


def _rate(history: list[tuple[float, int]], window: float = 3.0) -> float:
    if len(history) < 2:
        return 0.0
    t1, w1 = history[-1]
    earlier = [(t, w) for t, w in history if t <= t1 - window] or history[:1]
    t0, w0 = earlier[-1]
    return (w1 - w0) / (t1 - t0) if t1 > t0 else 0.0


def render_live(
    snap: Snapshot,
    history: list[tuple[float, int]],
    sent: int,
    running: list[str],
    timeline: list[tuple[float, str]],
    live: bool,
) -> str:
    """The live view (a full screen on a terminal, a one-line status otherwise)."""
    rate = _rate(history)
    head = (
        f"rxhubs demo  t={snap.elapsed:5.1f}s  sent {sent:,}  checkpointed {snap.written:,}  "
        f"{rate:,.0f} events/s  consumers: {', '.join(running) or '-'}"
    )
    if not live:
        owners: dict[str, int] = {}
        for owner in snap.owners.values():
            owners[owner or "-"] = owners.get(owner or "-", 0) + 1
        lag = sum(max(0, snap.last_enqueued[p] - snap.checkpoints.get(p, -1)) for p in snap.last_enqueued)
        split = " ".join(f"{o}:{n}" for o, n in sorted(owners.items()))
        return f"{head}  lag {lag:,}  partitions {split}"
    lines = [CLEAR + head, "", f"{'partition':>9}  {'owner':<12} {'checkpoint':>11} {'last enqueued':>14} {'lag':>7}"]
    for p in sorted(snap.last_enqueued, key=lambda x: int(x) if x.isdigit() else x):
        cp = snap.checkpoints.get(p, -1)
        last = snap.last_enqueued[p]
        lines.append(f"{p:>9}  {snap.owners.get(p) or '-':<12} {cp:>11,} {last:>14,} {max(0, last - cp):>7,}")
    lines.append("")
    lines.extend(f"  {t:6.1f}s  {text}" for t, text in timeline[-8:])
    return "\n".join(lines)


@dataclass
class DemoSummary:
    """What the demo proved."""

    sent: dict[str, int]
    distinct: dict[str, int]
    rows: int
    seconds: float
    timeline: list[tuple[float, str]]
    sink: str

    @property
    def lost(self) -> int:
        """Events sent but never written."""
        return sum(max(0, self.sent[p] - self.distinct.get(p, 0)) for p in self.sent)

    @property
    def duplicates(self) -> int:
        """Rows written more than once (at-least-once: bounded by the checkpoint window)."""
        return self.rows - sum(self.distinct.values())


def render_summary(summary: DemoSummary) -> str:
    """The final proof: per partition, events sent and written, then totals."""
    lines = ["", f"Summary ({summary.sink}, {summary.seconds:.0f} s)", ""]
    lines.append(f"{'partition':>9} {'sent':>9} {'written':>9} {'lost':>6}")
    for p in sorted(summary.sent, key=lambda x: int(x) if x.isdigit() else x):
        sent, got = summary.sent[p], summary.distinct.get(p, 0)
        lines.append(f"{p:>9} {sent:>9,} {got:>9,} {max(0, sent - got):>6,}")
    total = sum(summary.sent.values())
    lines += [
        "",
        f"events sent: {total:,}   written (distinct): {sum(summary.distinct.values()):,}   "
        f"duplicates: {summary.duplicates:,}   lost: {summary.lost:,}",
        "",
        "Timeline:",
        *(f"  {t:6.1f}s  {text}" for t, text in summary.timeline),
        "",
        "RESULT: no event lost" if summary.lost == 0 else f"RESULT: {summary.lost} events LOST",
    ]
    return "\n".join(lines)
