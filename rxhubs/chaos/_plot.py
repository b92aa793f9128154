"""The chaos run's picture: lag over time with the faults shaded, and who owned each partition."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rxhubs.chaos._plan import FAULT_TYPES, LAG_OK

COLOURS = {"hub": "tab:orange", "store": "tab:purple", "emulator": "tab:red", "process": "tab:brown",
           "clock": "tab:olive"}
OWNERS = {"c1": "tab:blue", "c2": "tab:green", "c3": "tab:cyan"}


def plot_lag(path: Path, report: dict[str, Any]) -> Path:
    """Draw the run's lag and ownership into ``path`` (PNG).

    Top: the largest lag over partitions (log scale), each fault a shaded span with its name and target, its
    recovery point a tick; bottom: each partition's owner over time (blank: nobody).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.artist import Artist
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    series = report["series"]
    t = series["t"]
    lags = series["lag"]
    worst = [max(values) for values in zip(*lags.values(), strict=True)] if lags else [0.0] * len(t)
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(13, 6.5), dpi=100, sharex=True,
                                      gridspec_kw={"height_ratios": [3, 1.4]})
    ceiling = max(max(worst, default=1.0), 10.0) * 3
    for k, row in enumerate(report.get("recoveries", [])):
        kind = FAULT_TYPES[row["type"]]
        colour = COLOURS[kind.target]
        width = max(row["end"] - row["start"], 0.8)
        top.axvspan(row["start"], row["start"] + width, color=colour, alpha=0.18, linewidth=0)
        label = row["type"].replace("_", " ") + (f" {row['target']}" if row["target"] else "")
        top.text(row["start"], ceiling / (1.9 ** (k % 4)), label, fontsize=7, rotation=0, va="top",
                 color=colour, clip_on=True)
        if row["recovered_at"] is not None:
            top.plot([row["recovered_at"]], [LAG_OK], marker="v" if row["met"] else "X",
                     color=colour if row["met"] else "red", markersize=6)
    for _p, values in lags.items():
        top.plot(t, [max(v, 0.01) for v in values], linewidth=0.5, alpha=0.35, label=None)
    top.plot(t, [max(v, 0.01) for v in worst], color="black", linewidth=1.2, label="largest lag over partitions")
    top.axhline(LAG_OK, color="grey", linestyle="--", linewidth=0.8)
    top.set_yscale("log")
    top.set_ylim(0.05, ceiling * 1.2)
    top.set_ylabel("lag (s, log)")
    verdict = report.get("verdict", "?")
    top.set_title(f"rxhubs bench chaos, seed {report.get('seed')}: {verdict}; lost {report.get('lost')}, "
                  f"duplicates {report.get('duplicates')} (unexplained {report.get('duplicates_unexplained')}), "
                  f"{report.get('faults_injected')} faults", fontsize=10)
    handles: list[Artist] = [Patch(color=c, alpha=0.3, label=f"{name} fault") for name, c in COLOURS.items()]
    handles.append(Line2D([], [], color="black", label="largest lag; v = recovered (X: over bound)"))
    top.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=7)
    top.grid(alpha=0.25)
    owners = series["owner"]
    step = (t[1] - t[0]) if len(t) > 1 else 1.0
    for row, (_p, who) in enumerate(sorted(owners.items(), key=lambda kv: int(kv[0]))):
        spans: dict[str, list[tuple[float, float]]] = {}
        k = 0
        while k < len(who):
            if who[k] is None:
                k += 1
                continue
            j = k
            while j < len(who) and who[j] == who[k]:
                j += 1
            spans.setdefault(str(who[k]), []).append((t[k], (j - k) * step))
            k = j
        for owner, bars in spans.items():
            bottom.broken_barh(bars, (row - 0.4, 0.8), color=OWNERS.get(owner, "grey"))
    bottom.set_yticks(range(len(owners)), [f"p{p}" for p in sorted(owners, key=int)], fontsize=7)
    bottom.legend(handles=[Patch(color=c, label=n) for n, c in OWNERS.items()], loc="upper left",
                  bbox_to_anchor=(1.005, 1.0), fontsize=7)
    bottom.set_xlabel("seconds since the run began")
    bottom.set_ylabel("owner")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
