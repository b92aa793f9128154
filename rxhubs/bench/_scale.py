"""``rxhubs bench scale``: beyond this machine, by simulation (1,024 partitions, 1 -> 200 -> 50 consumers).

The simulation itself lives in :mod:`rxhubs.bench._rebalance` (the real planner and balancing loop in virtual
time over the in-memory store, the official processor's rules side by side); this scenario runs only its
1,024-partition part, so it can be measured on its own.
"""

from __future__ import annotations

import logging
from typing import Any

from rxhubs.bench._rebalance import OFFICIAL, _intervals, _Official, _Rx, _scale, _World
from rxhubs.bench._report import figure

PARTITIONS = 1024


def run(args: Any) -> list[dict[str, Any]]:
    """Run the 1,024-partition simulation; ``args.quick`` shrinks it to 1 -> 60 -> 15 consumers."""
    quick = bool(getattr(args, "quick", False))
    quiet = logging.getLogger("rxhubs")
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # crashed consumers' failed releases are expected here
    try:
        ours = _scale(_Rx(_World(PARTITIONS)), quick)
        theirs = _scale(_Official(_World(PARTITIONS)), quick)
    finally:
        quiet.setLevel(level)
    figures: list[dict[str, Any]] = []
    for (step, mine, moved, calls), (_, base, base_moved, base_calls) in zip(ours, theirs, strict=True):
        scenario = f"scale {PARTITIONS} partitions {step}"
        figures.append(_intervals(scenario, mine, base))
        figures.append(
            figure(
                scenario, "partitions_moved", "partitions", moved, base_moved, OFFICIAL, None, higher_is_better=False
            )
        )
        figures.append(
            figure(
                scenario,
                "store_calls_per_consumer_per_interval",
                "calls",
                round(calls, 2),
                round(base_calls, 2),
                OFFICIAL,
                None,
                higher_is_better=False,
            )
        )
    return figures
