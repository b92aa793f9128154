"""Scenario ``throughput``: events/s of ``consume`` + ``checkpoint`` against the raw azure-eventhub consumer.

Same emulator (its own process), same Azurite, same pre-filled partitions (1 KB events), fresh processes
and a fresh checkpoint container per trial, alternating implementations. The SDK side is
``EventHubConsumerClient.receive_batch`` with the official aio blob checkpoint store:

Both sides read every event's body and sequence number, the least a real consumer does.

* ``tuned``: both with batch 1000 and prefetch 2000, both tracking last-enqueued properties (rxhubs does by
  default, for lag), both checkpointing each partition once per 5 s: the ratio shows what rxhubs does per
  event against what the SDK does (target >= 1.0x).
* ``defaults``: both out of the box; the SDK checkpointing every batch as its samples do, rxhubs with
  ``hops.checkpoint(store)``'s defaults (target >= 2x: what users feel).
"""

from __future__ import annotations

import statistics
import uuid
from typing import Any

from rxhubs.bench._procs import emulator_process, prefill, run_worker
from rxhubs.bench._report import figure, sized

PARTITIONS = 4
HUB = "bench"


def _prefill(connection_string: str, events: int) -> None:
    prefill(connection_string, PARTITIONS, events, b"x" * 1024)


def run(args: Any = None) -> list[dict[str, Any]]:
    """Alternate SDK and rxhubs trials per profile; report medians.

    ``rxhubs`` and ``baseline`` are the medians of each side's rates; ``ratio`` is the median of the ratios of
    the pairs (each rxhubs trial against the SDK trial just before it), which load that comes and goes
    during a run moves less; ``pair_ratios`` lists them.
    """
    from rxhubs.testing._azurite import Azurite

    events = sized(args, 100_000, 40_000, 4_000)
    repeat = sized(args, 3, 1, 1)
    figures = []
    with emulator_process({HUB: PARTITIONS}) as conns, Azurite() as azurite:
        _prefill(conns[HUB], events)
        env = {"RXHUBS_BENCH_EVENTHUB": conns[HUB], "RXHUBS_BENCH_STORAGE": azurite.connection_string}
        for profile, target in (("tuned", ">= 1.0x"), ("defaults", ">= 2.0x")):
            rates: dict[str, list[float]] = {"sdk": [], "rxhubs": []}
            for _ in range(repeat):
                for impl in ("sdk", "rxhubs"):
                    result = run_worker(
                        "rxhubs.bench._throughput_worker",
                        ["--impl", impl, "--profile", profile, "--events", str(events),
                         "--container", f"bench-{uuid.uuid4().hex[:12]}"],
                        env,
                    )
                    rates[impl].append(result["events_per_s"])
            pairs = [r / s for r, s in zip(rates["rxhubs"], rates["sdk"], strict=True)]
            result = figure(
                "throughput", f"events_per_s_{profile}", "events/s",
                round(statistics.median(rates["rxhubs"])), round(statistics.median(rates["sdk"])),
                "azure-eventhub EventHubConsumerClient + official blob checkpoint store", target,
                partitions=PARTITIONS, events=events, event_bytes=1024, trials=repeat,
                pair_ratios=[round(r, 3) for r in pairs],
            )
            result["ratio"] = round(statistics.median(pairs), 4)
            result["met"] = result["ratio"] >= float(target.split()[1].rstrip("x"))
            figures.append(result)
    return figures
