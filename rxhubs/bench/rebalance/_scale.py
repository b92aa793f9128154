"""``rxhubs bench scale``: beyond this machine, by simulation (1,024 partitions, 1 -> 200 -> 50 consumers).

The simulation itself lives in :mod:`rxhubs.bench.rebalance._scenario` (the real planner and balancing loop in virtual
time over the in-memory store, the official processor's rules side by side); this scenario runs only its
1,024-partition part, so it can be measured on its own. ``--real`` runs it in real processes instead, on the emulator
and Azurite (:mod:`rxhubs.bench.rebalance._real`).
"""

from __future__ import annotations

import logging
from typing import Any

from rxhubs.bench._report import sized
from rxhubs.bench.rebalance._scenario import FULL, QUICK, SMOKE, scale_figures

VIRTUAL_TIME = True  # TestScheduler only: figures are deterministic, CI requires every `met`


def run(args: Any) -> list[dict[str, Any]]:
    """The 1,024-partition simulation; ``args.quick``: 1 -> 60 -> 15 consumers (``smoke``: 128 partitions, 20, 5).

    With ``args.real``: real consumer processes instead (:mod:`rxhubs.bench.rebalance._real`).
    """
    if getattr(args, "real", False):
        from rxhubs.bench.rebalance import _real

        return _real.run_real(args)
    quiet = logging.getLogger("rxhubs")
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # crashed consumers' failed releases are expected here
    try:
        return scale_figures("scale", sized(args, FULL, QUICK, SMOKE))
    finally:
        quiet.setLevel(level)
