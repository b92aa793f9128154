"""Scenario ``exactly-once``: events/s into Delta exactly once against the at-least-once JSON lines path, same run.

Exactly once is ``consume(positions=sink)`` + ``hops.exactly_once(DeltaSink)`` committing once a second (rows and
the 4 partitions' positions in one Delta commit); at least once is ``jsonl_sink`` + ``hops.checkpoint`` every
second, as ``rxhubs consume --sink jsonl:`` runs it (append + fsync per batch), and a second figure against the
same without the fsync (deltalake does not fsync local files either): the stricter comparison. Same emulator (its
own process), same pre-filled hub (4 partitions, 256-byte events), fresh processes per trial, alternating
implementations, each reading the hub from the start. Target: exactly once at >= 0.8x (the sink is not the
bottleneck). Every trial also checks that its output holds each event once. Each figure also lists, per trial, the
CPU per event of both processes (``cpu_us_per_event``, all threads) and ``tail_s``, the wait from the last event
read to the output that counted it (for Delta up to one commit interval plus the commit: a fixed cost of the
finite run, not of the rate), and ``ratio_before_tail``: the median ratio with each side's rate taken up to its
last event read (every event still committed in the end). ``ratio`` and ``met`` keep the full window.
"""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path
from typing import Any

from rxhubs.bench._procs import emulator_process, prefill, run_worker
from rxhubs.bench._report import figure, sized

PARTITIONS = 4
BODY = 256
IMPLS = ("jsonl", "delta", "jsonl-nofsync")


def _prefill(connection_string: str, events: int) -> None:
    prefill(connection_string, PARTITIONS, events, b"x" * BODY)


def run(args: Any = None) -> list[dict[str, Any]]:
    """Alternate the three implementations; report medians and the medians of the paired ratios."""
    events = sized(args, 200_000, 60_000, 4_000) // PARTITIONS * PARTITIONS
    repeat = sized(args, 3, 1, 1)
    rates: dict[str, list[float]] = {impl: [] for impl in IMPLS}
    cpu: dict[str, list[float]] = {impl: [] for impl in IMPLS}
    tails: dict[str, list[float]] = {impl: [] for impl in IMPLS}
    before_tail: dict[str, list[float | None]] = {impl: [] for impl in IMPLS}  # the rate up to the last read
    commits: list[int] = []
    with emulator_process({"bench": PARTITIONS}) as conns, tempfile.TemporaryDirectory() as folder:
        _prefill(conns["bench"], events)
        env = {"RXHUBS_BENCH_SOURCE": conns["bench"]}
        for trial in range(repeat):
            for impl in IMPLS:
                out = Path(folder) / f"{impl}-{trial}"
                result = run_worker(
                    "rxhubs.bench.exactly_once._worker",
                    ["--impl", impl, "--events", str(events), "--out", str(out)], env,
                )
                if result["rows"] != events:
                    raise RuntimeError(f"{impl} trial wrote {result['rows']} rows for {events} events")
                rates[impl].append(result["events_per_s"])
                cpu[impl].append(round(result["cpu_us_per_event"], 2))
                tails[impl].append(result["tail_s"])
                reading = result["seconds"] - result["tail_s"]
                # None when everything was read before the first output (a --smoke run): no window to measure
                before_tail[impl].append(result["events_per_s"] * result["seconds"] / reading if reading > 0 else None)
                if impl == "delta":
                    commits.append(result["commits"])
    figures = []
    for baseline, metric, name in (
        ("jsonl", "events_per_s_into_delta", "jsonl_sink (fsync per batch) + hops.checkpoint every 1 s"),
        ("jsonl-nofsync", "events_per_s_into_delta_vs_unsynced_jsonl", "jsonl_sink(fsync=False) + hops.checkpoint"),
    ):
        pairs = [d / b for d, b in zip(rates["delta"], rates[baseline], strict=True)]
        pairs_before_tail = [d / b for d, b in zip(before_tail["delta"], before_tail[baseline], strict=True)
                             if d is not None and b]
        result = figure(
            "exactly-once", metric, "events/s",
            round(statistics.median(rates["delta"])), round(statistics.median(rates[baseline])), name, ">= 0.8x",
            partitions=PARTITIONS, events=events, event_bytes=BODY, trials=repeat, commit_interval_s=1.0,
            delta_commits=commits, pair_ratios=[round(r, 3) for r in pairs],
            cpu_us_per_event={"delta": cpu["delta"], baseline: cpu[baseline]},
            tail_s={"delta": tails["delta"], baseline: tails[baseline]},
            ratio_before_tail=round(statistics.median(pairs_before_tail), 4) if pairs_before_tail else None,
        )
        result["ratio"] = round(statistics.median(pairs), 4)
        result["met"] = result["ratio"] >= 0.8
        figures.append(result)
    return figures
