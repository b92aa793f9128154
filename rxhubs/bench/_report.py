"""The shape of a benchmark figure, and how figures print."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

T = TypeVar("T")

KEYS = ("scenario", "metric", "unit", "rxhubs", "baseline", "baseline_name", "ratio", "target", "met")


def figure(
    scenario: str,
    metric: str,
    unit: str,
    rxhubs: float,
    baseline: float | None,
    baseline_name: str | None,
    target: str | None,
    *,
    higher_is_better: bool = True,
    met: bool | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """One measured figure; ``ratio`` is rxhubs/baseline (or baseline/rxhubs when lower is better).

    ``target`` is text such as ``">= 0.95x"`` or ``"<= 2 intervals"``; ``met`` is computed from a ratio
    target when not given. Each figure carries the machine's load average (1, 5 and 15 minutes) when it was
    taken, unless the scenario gave its own ``load_average``: a figure is read beside the load it was taken under.

    Example:
        >>> f = figure("overhead", "events_per_s", "events/s", 990.0, 1000.0, "plain loop", ">= 0.95x")
        >>> f["ratio"], f["met"]
        (0.99, True)
        >>> len(f["load_average"]), figure("x", "m", "u", 1.0, None, None, None, load_average=[0.5])["load_average"]
        (3, [0.5])
    """
    ratio: float | None = None
    if baseline:
        ratio = round(rxhubs / baseline if higher_is_better else baseline / rxhubs if rxhubs else 0.0, 4)
    if met is None and target and ratio is not None and target.rstrip().endswith("x"):
        op, _, value = target.partition(" ")
        bound = float(value.rstrip("x"))
        met = ratio >= bound if op == ">=" else ratio <= bound if op == "<=" else None
    result: dict[str, Any] = {
        "scenario": scenario,
        "metric": metric,
        "unit": unit,
        "rxhubs": rxhubs,
        "baseline": baseline,
        "baseline_name": baseline_name,
        "ratio": ratio,
        "target": target,
        "met": met,
    }
    result.update(extra)
    result.setdefault("load_average", [round(x, 2) for x in os.getloadavg()])
    return result


def to_json_lines(figures: Iterable[Mapping[str, Any]]) -> str:
    """One JSON object per line."""
    return "\n".join(json.dumps(dict(f), sort_keys=False) for f in figures)


def format_table(figures: Iterable[Mapping[str, Any]]) -> str:
    """A plain-text table of figures."""
    rows = [[_cell(f.get(k)) for k in KEYS] for f in figures]
    header = list(KEYS)
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines.extend("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows)
    return "\n".join(lines)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.4g}" if abs(value) < 1000 else f"{value:,.0f}"
    return str(value)


def sized(args: Any, full: T, quick: T, smoke: T) -> T:
    """A scenario's size for this run: ``--smoke`` (CI: the least that runs every step), ``--quick``, or full.

    ``args`` is the command line's namespace or any object; missing attributes count as False.

    Example:
        >>> import types
        >>> sized(types.SimpleNamespace(quick=True), 100_000, 20_000, 2_000)
        20000
        >>> sized(types.SimpleNamespace(quick=True, smoke=True), 100_000, 20_000, 2_000)
        2000
        >>> sized(None, 100_000, 20_000, 2_000)
        100000
    """
    if getattr(args, "smoke", False):
        return smoke
    return quick if getattr(args, "quick", False) else full
