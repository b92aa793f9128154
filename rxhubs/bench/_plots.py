"""Plots for docs/performance.md: a rebalance timeline and throughput bars.

``rxhubs bench SCENARIO --plot OUT_DIR`` (or ``python -m rxhubs.bench._plots OUT_DIR [FIGURES.jsonl]``)
writes ``rebalance_timeline.png`` (a second consumer
joins an owner of 32 partitions: partitions it reads, per load-balancing interval, for rxhubs and for the
official processor's rules, both simulated in virtual time by the ``rebalance`` scenario's machinery) and,
given the JSON lines of ``rxhubs bench ... --json``, ``throughput.png`` (events/s of rxhubs and its baseline
for every events/s figure).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from rxhubs.bench.rebalance._official import _Official
from rxhubs.bench.rebalance._scenario import _Rx
from rxhubs.bench.rebalance._sim import INTERVAL, SAMPLE, _Group, _World

JOIN_AT = 60.0


def rebalance_timeline(partitions: int = 32, intervals: float = 20.0) -> dict[str, list[tuple[float, int]]]:
    """Per side, (intervals since the second consumer joined, partitions it reads), sampled every 0.5 s."""
    series: dict[str, list[tuple[float, int]]] = {}
    for name, side_type in (("rxhubs", _Rx), ("official processor rules", _Official)):
        world = _World(partitions)
        side: _Group = side_type(world)
        join = side.join  # type: ignore[attr-defined]
        world.scheduler.schedule_absolute(0.0, lambda *_, j=join: j("first"))
        world.scheduler.schedule_absolute(JOIN_AT, lambda *_, j=join: j("second"))
        points = []
        steps = int(intervals * INTERVAL / SAMPLE)
        for k in range(steps + 1):
            t = JOIN_AT + k * SAMPLE
            world.scheduler.advance_to(t)
            points.append((k * SAMPLE / INTERVAL, len(side.reading("second"))))
        series[name] = points
    return series


def plot_rebalance(out: Path, series: Mapping[str, list[tuple[float, int]]], partitions: int = 32) -> Path:
    """A step plot of the newcomer's partitions over intervals."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.6), dpi=110)
    for name, points in series.items():
        ax.step([x for x, _ in points], [y for _, y in points], where="post", label=name, linewidth=2)
    ax.axhline(partitions // 2, color="grey", linestyle=":", linewidth=1)
    ax.set_xlabel("load-balancing intervals since the second consumer joined")
    ax.set_ylabel("partitions the newcomer reads")
    ax.set_title(f"A second consumer joins an owner of {partitions} partitions")
    ax.legend(loc="lower right")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    path = out / "rebalance_timeline.png"
    fig.savefig(path)
    plt.close(fig)
    return path


def plot_throughput(out: Path, figures: Iterable[Mapping[str, Any]]) -> Path | None:
    """Bars of rxhubs vs baseline for every events/s figure."""
    rows = [f for f in figures if f.get("unit") == "events/s" and f.get("baseline")]
    if not rows:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"{f['scenario']}\n{f['metric'].replace('events_per_s_', '')}" for f in rows]
    fig, ax = plt.subplots(figsize=(max(6, 1.3 * len(rows)), 3.8), dpi=110)
    xs = range(len(rows))
    ax.bar([x - 0.2 for x in xs], [f["rxhubs"] for f in rows], width=0.4, label="rxhubs")
    ax.bar([x + 0.2 for x in xs], [f["baseline"] for f in rows], width=0.4, label="baseline (same run)")
    ax.set_xticks(list(xs), labels, fontsize=7)
    ax.set_ylabel("events/s")
    ax.set_title("rxhubs against its baseline, same machine, same run")
    ax.legend()
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    path = out / "throughput.png"
    fig.savefig(path)
    plt.close(fig)
    return path


def draw(out: Path, figures: Iterable[Mapping[str, Any]], *, rebalance: bool) -> list[Path]:
    """The plots of a benchmark run: throughput bars (if it measured events/s), the rebalance timeline."""
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    if rebalance:
        paths.append(plot_rebalance(out, rebalance_timeline()))
    bars = plot_throughput(out, list(figures))
    if bars is not None:
        paths.append(bars)
    return paths


def main(argv: list[str]) -> int:
    out = Path(argv[0]) if argv else Path("docs/img")
    out.mkdir(parents=True, exist_ok=True)
    print(plot_rebalance(out, rebalance_timeline()))
    if len(argv) > 1:
        lines = Path(argv[1]).read_text().splitlines()
        path = plot_throughput(out, [json.loads(line) for line in lines if line.startswith("{")])
        if path:
            print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
