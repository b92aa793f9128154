"""Scenario ``publish``: events/s from hub A to hub B, rxhubs against the raw SDK and against reading alone.

rxhubs is ``consume`` + ``hops.publish`` + ``checkpoint``; the SDK is ``EventHubConsumerClient.receive_batch``
feeding ``EventHubProducerClient.send_batch``; "consume" is rxhubs' same pipeline without the publish.

Same emulator (its own process), same pre-filled source (4 partitions, 512-byte events), fresh processes per
trial, interleaved (each rxhubs trial between an SDK and a ``consume`` trial, their order swapped every round;
each ratio is the median of the rounds' pairs); each side reads A from the start and publishes to B, an event counting
once its send was acknowledged. rxhubs also checkpoints (in memory, every 5 s); the SDK side does not.
Two figures: hub to hub against the SDK (target >= 5x) and against ``consume`` in the same run (>= 0.5x: the
publish costs at most as much as the read). The rxhubs trials must have sent on the native path.
"""

from __future__ import annotations

import os
import statistics
from typing import Any

from rxhubs.bench._procs import emulator_process, prefill, run_worker
from rxhubs.bench._report import figure, sized

PARTITIONS = 4
BODY = 512


def _prefill(connection_string: str, events: int) -> None:
    prefill(connection_string, PARTITIONS, events, b"x" * BODY)


def run(args: Any = None) -> list[dict[str, Any]]:
    """Alternate SDK and rxhubs trials; report the medians and the median of the paired ratios."""
    events = sized(args, 60_000, 20_000, 2_000)
    repeat = sized(args, 5, 1, 1)
    with emulator_process({"a": PARTITIONS, "b": PARTITIONS}) as conns:
        _prefill(conns["a"], events)
        env = {"RXHUBS_BENCH_SOURCE": conns["a"], "RXHUBS_BENCH_TARGET": conns["b"]}
        rates: dict[str, list[float]] = {"sdk": [], "rxhubs": [], "consume": []}
        paths: set[str] = set()
        for trial in range(repeat):
            # rxhubs always between its two baselines, their order swapped every trial: a load that rises or
            # falls during a run favours neither side of a pair
            for impl in ("sdk", "rxhubs", "consume") if trial % 2 == 0 else ("consume", "rxhubs", "sdk"):
                result = run_worker("rxhubs.bench.publish._worker", ["--impl", impl, "--events", str(events)], env)
                rates[impl].append(result["events_per_s"])
                paths.update(result.get("send_paths", ()))
    if paths != {"native-send"}:
        raise RuntimeError(f"publish bench: rxhubs sent on {sorted(paths) or 'no recorded path'}, not natively")
    extra: dict[str, Any] = {"partitions": PARTITIONS, "events": events, "event_bytes": BODY, "trials": repeat,
             "send_path": "native-send", "load_average": [round(x, 2) for x in os.getloadavg()]}
    out = []
    for name, baseline_name, target in (
        ("sdk", "azure-eventhub EventHubConsumerClient.receive_batch -> EventHubProducerClient.send_batch", 5.0),
        ("consume", "rxhubs.consume + checkpoint, no publish (reading alone, same run)", 0.5),
    ):
        pairs = [r / b for r, b in zip(rates["rxhubs"], rates[name], strict=True)]
        result = figure(
            "publish", "events_per_s_hub_to_hub" if name == "sdk" else "events_per_s_hub_to_hub_vs_consume",
            "events/s", round(statistics.median(rates["rxhubs"])), round(statistics.median(rates[name])),
            baseline_name, f">= {target}x", pair_ratios=[round(r, 3) for r in pairs], **extra,
        )
        result["ratio"] = round(statistics.median(pairs), 4)
        result["met"] = result["ratio"] >= target
        out.append(result)
    return out
