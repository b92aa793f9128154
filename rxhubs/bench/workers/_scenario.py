"""Scenario ``workers``: events/s of ``run_workers`` with 2 worker processes against 1, on one machine.

8 partitions pre-filled with 1 KB events in an emulator running in its own process; each trial a fresh
process running :func:`rxhubs.run_workers` over a fresh SQLite store, 1 and 2 workers alternating; each
worker reads every event's body and sequence number and checkpoints every 5 s. The rate runs from the
first event processed to the last, so process start-up is not counted. The emulator shares the machine's
cores with the workers: on 2 cores, 2 workers and the emulator compete for them.
"""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path
from typing import Any

from rxhubs.bench._procs import emulator_process, prefill, run_worker
from rxhubs.bench._report import figure, sized

PARTITIONS = 8
HUB = "bench"


def _prefill(connection_string: str, events: int) -> None:
    prefill(connection_string, PARTITIONS, events, b"x" * 1024)


def run(args: Any = None) -> list[dict[str, Any]]:
    """Alternate 1-worker and 2-worker trials; report the median rates and the ratio of medians."""
    events = sized(args, 200_000, 80_000, 8_000)
    repeat = sized(args, 3, 1, 1)
    rates: dict[int, list[float]] = {1: [], 2: []}
    splits: list[list[int]] = []
    with emulator_process({HUB: PARTITIONS}) as conns, tempfile.TemporaryDirectory() as tmp:
        _prefill(conns[HUB], events)
        env = {"RXHUBS_BENCH_EVENTHUB": conns[HUB]}
        for trial in range(repeat):
            for workers in (1, 2):
                folder = Path(tmp) / f"{trial}-{workers}"
                result = run_worker(
                    "rxhubs.bench.workers._trial",
                    ["--workers", str(workers), "--store", str(folder / "cp.sqlite"), "--out", str(folder / "out"),
                     "--events", str(events)],
                    env,
                )
                rates[workers].append(result["events_per_s"])
                if workers == 2:
                    splits.append(result["per_worker"])
    return [
        figure(
            "workers", "events_per_s_2_workers", "events/s",
            round(statistics.median(rates[2])), round(statistics.median(rates[1])),
            "rxhubs.run_workers with 1 worker (same run)", ">= 1.7x",
            partitions=PARTITIONS, events=events, event_bytes=1024, trials=repeat,
            split_2_workers=splits,
        )
    ]
