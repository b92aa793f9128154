"""Scenario ``publish``: events/s from hub A to hub B, rxhubs against the raw SDK, in the same run.

rxhubs is ``consume`` + ``hops.publish`` + ``checkpoint``; the SDK is ``EventHubConsumerClient.receive_batch``
feeding ``EventHubProducerClient.send_batch``.

Same emulator (its own process), same pre-filled source (4 partitions, 512-byte events), fresh processes per
trial, alternating implementations; each side reads A from the start and publishes to B, an event counting
once its send was acknowledged. rxhubs also checkpoints (in memory, every 5 s); the SDK side does not.
"""

from __future__ import annotations

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
    repeat = sized(args, 3, 1, 1)
    with emulator_process({"a": PARTITIONS, "b": PARTITIONS}) as conns:
        _prefill(conns["a"], events)
        env = {"RXHUBS_BENCH_SOURCE": conns["a"], "RXHUBS_BENCH_TARGET": conns["b"]}
        rates: dict[str, list[float]] = {"sdk": [], "rxhubs": []}
        for _ in range(repeat):
            for impl in ("sdk", "rxhubs"):
                result = run_worker("rxhubs.bench.publish._worker", ["--impl", impl, "--events", str(events)], env)
                rates[impl].append(result["events_per_s"])
    pairs = [r / s for r, s in zip(rates["rxhubs"], rates["sdk"], strict=True)]
    result = figure(
        "publish", "events_per_s_hub_to_hub", "events/s",
        round(statistics.median(rates["rxhubs"])), round(statistics.median(rates["sdk"])),
        "azure-eventhub EventHubConsumerClient.receive_batch -> EventHubProducerClient.send_batch", ">= 1.0x",
        partitions=PARTITIONS, events=events, event_bytes=BODY, trials=repeat,
        pair_ratios=[round(r, 3) for r in pairs],
    )
    result["ratio"] = round(statistics.median(pairs), 4)
    result["met"] = result["ratio"] >= 1.0
    return [result]
