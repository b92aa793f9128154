"""Scenario ``handover``: events processed by two owners when a second consumer joins, rxhubs vs the SDK.

One emulator (own process), one Azurite, 8 partitions under a steady load. Consumer A starts alone; B joins;
both run a while; both stop. Each records every (partition, sequence number) it processed (each batch takes
20 ms of "work"); an event both processed was processed by two owners. The official processor
(``EventHubConsumerClient`` with the official blob store, checkpointing every batch as its samples do) and
rxhubs (``consume`` + ``checkpoint``) run in turn with the same intervals (2 s balancing, 6 s expiry).
Target: 0 for rxhubs (the official processor was measured at 250 of 30,905 in the brief's test).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

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


def _trial(
    impl: str, env: dict[str, str], folder: Path, alone: float, together: float
) -> tuple[int, int, int, int]:
    """Run A, then B as well; return (processed by both, processed in all, by A, by B)."""
    container = f"handover-{uuid.uuid4().hex[:10]}"
    if impl == "sdk":
        import asyncio

        from azure.storage.blob.aio import ContainerClient

        async def create() -> None:
            async with ContainerClient.from_connection_string(env["RXHUBS_BENCH_STORAGE"], container) as c:
                await c.create_container()

        asyncio.run(create())
    procs = {}
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
    a = {tuple(x) for x in json.loads((folder / f"{impl}-a.json").read_text())}
    b = {tuple(x) for x in json.loads((folder / f"{impl}-b.json").read_text())}
    return len(a & b), len(a | b), len(a), len(b)


def run(args: Any = None) -> list[dict[str, Any]]:
    """One trial per implementation, the official processor first; report overlaps and totals."""
    from rxhubs.testing._azurite import Azurite

    quick = bool(getattr(args, "quick", False))
    alone, together = (8.0, 20.0) if quick else (10.0, 40.0)
    results: dict[str, tuple[int, int, int, int]] = {}
    with emulator_process({"handover": PARTITIONS}) as conns, Azurite() as azurite, \
            tempfile.TemporaryDirectory() as tmp:
        env = {"RXHUBS_BENCH_EVENTHUB": conns["handover"], "RXHUBS_BENCH_STORAGE": azurite.connection_string}
        stop = threading.Event()
        producer = threading.Thread(target=_producer, args=(conns["handover"], stop), daemon=True)
        producer.start()
        try:
            for impl in ("sdk", "rxhubs"):
                results[impl] = _trial(impl, env, Path(tmp), alone, together)
        finally:
            stop.set()
            producer.join(timeout=30)
    (ours, our_total, our_a, our_b), (theirs, their_total, their_a, their_b) = results["rxhubs"], results["sdk"]
    return [
        figure(
            "handover", "events_processed_by_two_owners", "events", ours, theirs,
            "azure-eventhub EventHubConsumerClient + official blob store", "0",
            higher_is_better=False, met=ours == 0 and our_b > 0,  # a newcomer that processed nothing proves nothing
            events_rxhubs=our_total, events_baseline=their_total, by_a_rxhubs=our_a, by_b_rxhubs=our_b,
            by_a_baseline=their_a, by_b_baseline=their_b, partitions=PARTITIONS,
        )
    ]
