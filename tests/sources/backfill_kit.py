"""What the backfill tests share: an emulator hub that kept 500 events of 2,000 per partition, Capture on."""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import rxhubs
from rxhubs.emulator import BackgroundEmulator
from rxhubs.sources import Capture

HUB = "telemetry"
PER_PARTITION = 2000
RETAINED = 500
FAST = {"load_balancing_interval": 1.0, "ownership_expiration": 3.0, "max_wait": 0.2}


def emulator_with_history(root: Path, partitions: int = 2, **options: Any) -> BackgroundEmulator:
    options.setdefault("capture_window", 1.0)
    return BackgroundEmulator({HUB: partitions}, retain_events=RETAINED, capture=root, **options).start()


async def fill(conn: str, partitions: int, count: int = PER_PARTITION, first: int = 0, chunk: int = 250) -> None:
    """Send ``count`` events ``p-i`` to each partition (in batches)."""
    hub = rxhubs.EventHub.from_connection_string(conn)
    try:
        for pid in map(str, range(partitions)):
            for lo in range(first, first + count, chunk):
                await hub.send([f"{pid}-{i}" for i in range(lo, min(first + count, lo + chunk))], partition_id=pid)
    finally:
        await hub.close()


async def captured(capture: Capture, partitions: int, count: int, timeout: float = 60.0) -> None:
    """Wait until Capture holds ``count`` events of every partition."""
    deadline = time.monotonic() + timeout
    while True:
        held = []
        for pid in map(str, range(partitions)):
            held.append(sum([len(e) async for e in capture.read(HUB, pid)]))
        if all(h >= count for h in held):
            return
        assert time.monotonic() < deadline, f"Capture held {held} events, not {count} per partition"
        await asyncio.sleep(0.2)


class Seen:
    """Every batch's events by partition, in the order they arrived."""

    def __init__(self) -> None:
        self.by_partition: dict[str, list[int]] = defaultdict(list)
        self.bodies: dict[str, list[bytes]] = defaultdict(list)

    def __call__(self, batch: rxhubs.EventBatch) -> None:
        self.by_partition[batch.partition_id].extend(e.sequence_number for e in batch)
        self.bodies[batch.partition_id].extend(e.body for e in batch)

    def count(self) -> int:
        return sum(len(v) for v in self.by_partition.values())


async def run_until(pipeline: Any, done: Any, timeout: float = 60.0) -> None:
    stop = rxhubs.Shutdown()
    runner = asyncio.get_running_loop().create_task(rxhubs.arun(pipeline, shutdown=stop, signals=()))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not runner.done():
        if await done():
            break
        await asyncio.sleep(0.1)
    stop.request()
    await runner
