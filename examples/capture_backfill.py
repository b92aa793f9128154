"""History past the retention: read a hub's Event Hubs Capture files first, then the hub, as one stream.

Needs ``pip install 'rxhubs[capture]'``. Starts a local emulator that keeps only the newest 500 events of each
partition (``retain_events``, a stand-in for days of retention) and writes Event Hubs Capture files (Avro, the
service's naming and schema) into a folder. 2,000 events go to each of 2 partitions: the hub keeps 500, Capture
all of them. ``rxhubs.consume(..., backfill=Capture(folder))`` from the start reads the 1,500 older events of
each partition from the files, switches to the hub at the next sequence number, and goes on with live events:
every event once, in order.
    python examples/capture_backfill.py
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from collections import defaultdict
from pathlib import Path

from reactivex import operators as ops

import rxhubs
from rxhubs import operators as hops
from rxhubs.emulator import Emulator
from rxhubs.sources import Capture

PARTITIONS, HISTORY, LIVE = 2, 2000, 100


async def send(hub: rxhubs.EventHub, first: int, count: int) -> None:
    for pid in map(str, range(PARTITIONS)):
        for lo in range(first, first + count, 500):
            await hub.send([f"reading {i}".encode() for i in range(lo, min(first + count, lo + 500))],
                           partition_id=pid)


async def captured(capture: Capture, count: int) -> None:
    """Wait until Capture's files hold ``count`` events of each partition (a file per second here)."""
    while True:
        held = [sum([len(events) async for events in capture.read("telemetry", pid)])
                for pid in map(str, range(PARTITIONS))]
        if min(held) >= count:
            return
        await asyncio.sleep(0.2)


async def main() -> int:
    folder = Path(os.environ.get("RXHUBS_EXAMPLE_OUT") or tempfile.mkdtemp()) / "capture"
    async with Emulator(hubs={"telemetry": PARTITIONS}, retain_events=500, capture=folder,
                        capture_window=1.0) as emulator:
        hub = rxhubs.EventHub.from_connection_string(emulator.connection_string("telemetry"))
        capture = Capture(folder, poll_interval=0.5)
        try:
            await send(hub, 0, HISTORY)
            await asyncio.wait_for(captured(capture, HISTORY), timeout=60)
            props = await hub.get_partition_properties("0")
            print(f"the hub retains {props.beginning_sequence_number}..{props.last_enqueued_sequence_number}; "
                  f"Capture holds 0..{HISTORY - 1}")
            seen: dict[str, list[int]] = defaultdict(list)
            stop = rxhubs.Shutdown()
            live_sent = asyncio.Event()

            def keep(batch: rxhubs.EventBatch) -> None:
                seen[batch.partition_id].extend(e.sequence_number for e in batch)
                total = sum(map(len, seen.values()))
                if total >= PARTITIONS * HISTORY and not live_sent.is_set():
                    live_sent.set()
                    asyncio.get_running_loop().create_task(send(hub, HISTORY, LIVE))
                if total >= PARTITIONS * (HISTORY + LIVE):
                    stop.request()

            store = rxhubs.stores.InMemoryCheckpointStore()
            pipeline = rxhubs.consume(hub, "$Default", store, backfill=capture, default_start="-1",
                                      load_balancing_interval=1.0).pipe(
                ops.do_action(keep), hops.checkpoint(store, max_interval=1.0))
            await asyncio.wait_for(rxhubs.arun(pipeline, shutdown=stop, signals=()), timeout=120)
        finally:
            await capture.close()
            await hub.close()
    ok = all(seen[pid] == list(range(HISTORY + LIVE)) for pid in map(str, range(PARTITIONS)))
    print(f"read {sum(map(len, seen.values()))} events: each partition 0..{HISTORY + LIVE - 1} once, in order: {ok}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
