"""``rxhubs bench scale``: beyond this machine, by simulation (1,024 partitions, 1 -> 200 -> 50 consumers).

The simulation itself lives in :mod:`rxhubs.bench._rebalance` (the real planner and balancing loop in virtual
time over the in-memory store, the official processor's rules side by side); this scenario runs only its
1,024-partition part, so it can be measured on its own.
"""

from __future__ import annotations

import logging
from typing import Any

from rxhubs.bench._rebalance import scale_figures

PARTITIONS = 1024


def run(args: Any) -> list[dict[str, Any]]:
    """Run the 1,024-partition simulation; ``args.quick`` shrinks it to 1 -> 60 -> 15 consumers."""
    quick = bool(getattr(args, "quick", False))
    quiet = logging.getLogger("rxhubs")
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # crashed consumers' failed releases are expected here
    try:
        return scale_figures("scale", quick, PARTITIONS)
    finally:
        quiet.setLevel(level)
