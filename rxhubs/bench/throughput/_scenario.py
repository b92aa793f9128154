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

Each pair of trials runs three processes: the SDK, rxhubs on its default receive path (native, the compiled
frame reader; targets >= 3x tuned, >= 5x defaults) and rxhubs with ``RXHUBS_NO_EXTENSIONS=1`` (the pure-Python
path; the targets above). Besides events/s, each side's CPU time per event (the consumer is one process, so
this is per core), of which the cyclic garbage collector's (``gc_us_per_event`` on the CPU figure), and the
machine's load average at each trial.
"""

from __future__ import annotations

import os
import statistics
import uuid
from typing import Any

from rxhubs.bench._procs import emulator_process, prefill, run_worker
from rxhubs.bench._report import figure, sized

PARTITIONS = 4
HUB = "bench"
#: The three sides of each pair of trials: the raw SDK, rxhubs on its default (native) path, rxhubs pure-Python.
IMPLS: dict[str, dict[str, str]] = {"sdk": {}, "rxhubs": {"RXHUBS_NO_EXTENSIONS": ""},
                                    "pure": {"RXHUBS_NO_EXTENSIONS": "1"}}
#: Targets per profile: (native path, pure path) against the SDK.
PROFILES = {"tuned": (">= 3.0x", ">= 1.0x"), "defaults": (">= 5.0x", ">= 2.0x")}


def _prefill(connection_string: str, events: int) -> None:
    prefill(connection_string, PARTITIONS, events, b"x" * 1024)


def run(args: Any = None) -> list[dict[str, Any]]:
    """Alternate SDK, rxhubs (native) and rxhubs (pure) trials per profile; report medians.

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
        for profile, targets in PROFILES.items():
            rates: dict[str, list[float]] = {impl: [] for impl in IMPLS}
            cpu: dict[str, list[float]] = {impl: [] for impl in IMPLS}
            collector: dict[str, list[float]] = {impl: [] for impl in IMPLS}
            loads: list[float] = []
            for _ in range(repeat):
                for impl, impl_env in IMPLS.items():
                    result = run_worker(
                        "rxhubs.bench.throughput._worker",
                        ["--impl", "sdk" if impl == "sdk" else "rxhubs", "--profile", profile, "--events", str(events),
                         "--container", f"bench-{uuid.uuid4().hex[:12]}"],
                        {**env, **impl_env},
                    )
                    rates[impl].append(result["events_per_s"])
                    cpu[impl].append(result["cpu_us_per_event"])
                    collector[impl].append(result.get("gc_us_per_event", 0.0))
                    loads.append(os.getloadavg()[0])
            for impl, target in (("rxhubs", targets[0]), ("pure", targets[1])):
                figures += _figures(profile, impl, target, rates, cpu, loads, events, repeat)
                figures[-1]["gc_us_per_event"] = round(statistics.median(collector[impl]), 2)  # of the CPU figure
    return figures


def _figures(
    profile: str, impl: str, target: str, rates: dict[str, list[float]], cpu: dict[str, list[float]],
    loads: list[float], events: int, repeat: int,
) -> list[dict[str, Any]]:
    """events/s and CPU us/event (per core: the consumer is one process) of ``impl`` against the SDK's trials."""
    name = "" if impl == "rxhubs" else "_pure"
    path = "native (compiled frame reader)" if impl == "rxhubs" else "pure-Python (RXHUBS_NO_EXTENSIONS=1)"
    out = []
    for metric, values, higher in ((f"events_per_s_{profile}{name}", rates, True),
                                   (f"cpu_us_per_event_{profile}{name}", cpu, False)):
        pairs = [(r / s if higher else s / r) if r and s else 0.0
                 for r, s in zip(values[impl], values["sdk"], strict=True)]
        result = figure(
            "throughput", metric, "events/s" if higher else "us/event",
            round(statistics.median(values[impl]), 1 if not higher else None),
            round(statistics.median(values["sdk"]), 1 if not higher else None),
            "azure-eventhub EventHubConsumerClient + official blob checkpoint store", target,
            higher_is_better=higher, receive_path=path, partitions=PARTITIONS, events=events, event_bytes=1024,
            trials=repeat, pair_ratios=[round(r, 3) for r in pairs], load_average=[round(x, 2) for x in loads],
        )
        result["ratio"] = round(statistics.median(pairs), 4)
        result["met"] = result["ratio"] >= float(target.split()[1].rstrip("x"))
        out.append(result)
    return out
