"""Scenario ``handover``: events processed by two owners when a second consumer joins, rxhubs vs the SDK.

One emulator (own process), one Azurite, 8 partitions under a steady load. Consumer A starts alone; B joins;
both run a while; both stop. Each records every (partition, sequence number) it processed (each batch takes
20 ms of "work"); an event both processed was processed by two owners. The official processor
(``EventHubConsumerClient`` with the official blob store, checkpointing every batch as its samples do) and
rxhubs (``consume`` + ``checkpoint``) run in turn with the same intervals (2 s balancing, 6 s expiry).
Target: 0 for rxhubs (the official processor was measured at 250 of 30,905 in the brief's test).

For each partition that moved from A to B it also reports the handover's timing: the old owner's last event
to the new owner's first (the gap), the new owner's claim (its ``on_partition_initialize``) to its first
event, and A's cold start (process start to its first event); and, per consumer, the checkpoint-store
requests per load-balancing interval (a counting proxy around each side's store) and the TCP connections to
the hub it held at the end. Medians over the moved partitions; each side's figures are its own, from the
same run.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from rxhubs.bench._handover_worker import INTERVAL
from rxhubs.bench._procs import emulator_process
from rxhubs.bench._report import figure

PARTITIONS = 8
RATE = 800  # events/s


def _producer(conn: str, stop: threading.Event) -> None:
    from azure.eventhub import EventData, EventHubProducerClient

    with EventHubProducerClient.from_connection_string(conn) as producer:
        n = 0
        while not stop.is_set():
            for p in range(PARTITIONS):
                batch = producer.create_batch(partition_id=str(p))
                for _ in range(RATE // PARTITIONS // 10):
                    batch.add(EventData(str(n)))
                    n += 1
                producer.send_batch(batch)
            time.sleep(0.1)


def _trial(impl: str, env: dict[str, str], folder: Path, alone: float, together: float) -> dict[str, Any]:
    """Run A, then B as well; return what each recorded (see _handover_worker), and the run's length."""
    container = f"handover-{uuid.uuid4().hex[:10]}"
    if impl == "sdk":
        import asyncio

        from azure.storage.blob.aio import ContainerClient

        async def create() -> None:
            async with ContainerClient.from_connection_string(env["RXHUBS_BENCH_STORAGE"], container) as c:
                await c.create_container()

        asyncio.run(create())
    procs = {}
    began = time.time()
    for owner in ("a", "b"):
        if owner == "b":
            time.sleep(alone)
        procs[owner] = subprocess.Popen(
            [sys.executable, "-m", "rxhubs.bench._handover_worker", "--impl", impl, "--owner", owner,
             "--container", container, "--out", str(folder / f"{impl}-{owner}.json")],
            env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )
        out = procs[owner].stdout
        if out is not None:
            out.readline()  # "ready"
    time.sleep(together)
    for proc in procs.values():
        proc.send_signal(signal.SIGTERM)
    for proc in procs.values():
        proc.wait(timeout=120)
    records = {owner: json.loads((folder / f"{impl}-{owner}.json").read_text()) for owner in ("a", "b")}
    records["seconds"] = time.time() - began
    return records


def _median(values: list[float]) -> float | None:
    return round(statistics.median(values), 3) if values else None


def summarize(records: dict[str, Any], together: float) -> dict[str, Any]:
    """Overlap, handover timing, store requests and connections from the two consumers' records."""
    a, b = records["a"], records["b"]
    seen_a = {(p, s) for p, s, _ in a["processed"]}
    seen_b = {(p, s) for p, s, _ in b["processed"]}
    last_a: dict[str, float] = {}
    first_b: dict[str, float] = {}
    for p, _, t in a["processed"]:
        last_a[p] = max(t, last_a.get(p, t))
    for p, _, t in b["processed"]:
        first_b[p] = min(t, first_b.get(p, t))
    moved = sorted(set(last_a) & set(first_b))
    gaps = [first_b[p] - last_a[p] for p in moved]
    claim_to_first = [first_b[p] - min(b["claims"][p]) for p in moved if b["claims"].get(p)]
    first_a = min((t for _, _, t in a["processed"]), default=None)
    intervals = records["seconds"] / INTERVAL
    return {
        "twice": len(seen_a & seen_b), "events": len(seen_a | seen_b), "by_a": len(seen_a), "by_b": len(seen_b),
        "moved": len(moved), "gap_median": _median(gaps), "gap_max": round(max(gaps), 3) if gaps else None,
        "claim_to_first_median": _median(claim_to_first),
        "cold_start": round(first_a - a["started"], 3) if first_a is not None else None,
        "store_requests_per_interval": round((a["store_calls"] + b["store_calls"]) / 2 / intervals, 1),
        "connections_per_consumer": [a["connections"], b["connections"]],
    }


def run(args: Any = None) -> list[dict[str, Any]]:
    """One trial per implementation, the official processor first; report overlaps and totals."""
    from rxhubs.testing._azurite import Azurite

    quick = bool(getattr(args, "quick", False))
    alone, together = (8.0, 20.0) if quick else (10.0, 40.0)
    results: dict[str, dict[str, Any]] = {}
    with emulator_process({"handover": PARTITIONS}) as conns, Azurite() as azurite, \
            tempfile.TemporaryDirectory() as tmp:
        env = {"RXHUBS_BENCH_EVENTHUB": conns["handover"], "RXHUBS_BENCH_STORAGE": azurite.connection_string}
        stop = threading.Event()
        producer = threading.Thread(target=_producer, args=(conns["handover"], stop), daemon=True)
        producer.start()
        try:
            for impl in ("sdk", "rxhubs"):
                results[impl] = summarize(_trial(impl, env, Path(tmp), alone, together), together)
        finally:
            stop.set()
            producer.join(timeout=30)
    ours, theirs = results["rxhubs"], results["sdk"]
    baseline = "azure-eventhub EventHubConsumerClient + official blob store"

    def timing(metric: str, key: str, target: str | None) -> dict[str, Any]:
        mine, other = ours[key], theirs[key]
        met = None if target is None or mine is None else mine <= float(target.split()[1])
        return figure("handover", metric, "s", mine, other, baseline, target, higher_is_better=False, met=met,
                      partitions_moved_rxhubs=ours["moved"], partitions_moved_baseline=theirs["moved"])

    return [
        figure(
            "handover", "events_processed_by_two_owners", "events", ours["twice"], theirs["twice"], baseline, "0",
            # a newcomer that processed nothing proves nothing
            higher_is_better=False, met=ours["twice"] == 0 and ours["by_b"] > 0,
            events_rxhubs=ours["events"], events_baseline=theirs["events"], by_a_rxhubs=ours["by_a"],
            by_b_rxhubs=ours["by_b"], by_a_baseline=theirs["by_a"], by_b_baseline=theirs["by_b"],
            partitions=PARTITIONS,
        ),
        timing("old_owner_last_to_new_owner_first_median", "gap_median", "<= 0.5 s"),
        timing("old_owner_last_to_new_owner_first_max", "gap_max", None),
        timing("claim_to_first_event_median", "claim_to_first_median", "<= 0.5 s"),
        timing("cold_start_to_first_event", "cold_start", None),
        figure("handover", "store_requests_per_consumer_per_interval", "requests", ours["store_requests_per_interval"],
               theirs["store_requests_per_interval"], baseline, None, higher_is_better=False),
        figure("handover", "connections_per_consumer", "connections", max(ours["connections_per_consumer"]),
               max(theirs["connections_per_consumer"]), baseline, None, higher_is_better=False,
               rxhubs_a_b=ours["connections_per_consumer"], baseline_a_b=theirs["connections_per_consumer"]),
    ]
