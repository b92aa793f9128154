"""Shaped batches: at low traffic, hand the sink a batch per 50 events or 2 seconds, not one per event.

Each batch costs the sink one call here (an HTTP request, a table write, a Spark job in real pipelines). With
``min_batch_size=50, max_wait=2.0`` a partition's batch is delivered once it holds 50 events, or 2 s after its
first event arrived, whichever comes first; the checkpoint is written after the sink, once per batch.

Runs against the hub in $EVENTHUB_CONNECTION_STRING, or starts a local emulator when it is not set.
    python examples/shaped_batches.py
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time

import rxhubs
from rxhubs import operators as hops
from rxhubs.emulator import Emulator

RATE = 10  # events per second per partition: a quiet hub
SECONDS = 5


class Sink:
    """A sink that pays one call per batch (think: one HTTP request)."""

    def __init__(self) -> None:
        self.calls = 0
        self.events = 0
        self.expected: int | None = None
        self.complete = asyncio.Event()

    async def write(self, batch: rxhubs.EventBatch) -> None:
        self.calls += 1
        self.events += len(batch)
        print(f"partition {batch.partition_id}: one call for {len(batch)} events")
        self.expect(self.expected)

    def expect(self, count: int | None) -> None:
        self.expected = count
        if count is not None and self.events >= count:
            self.complete.set()


async def produce(hub: rxhubs.EventHub, partition_ids: list[str]) -> int:
    start, sent = time.monotonic(), 0
    for tick in range(RATE * SECONDS):
        await asyncio.sleep(max(0.0, start + tick / RATE - time.monotonic()))
        for pid in partition_ids:
            await hub.send([f'{{"tick": {tick}}}'.encode()], partition_id=pid)
            sent += 1
    return sent


async def main(connection_string: str) -> int:
    hub = rxhubs.EventHub.from_connection_string(connection_string)
    store = rxhubs.stores.InMemoryCheckpointStore()
    sink, stop = Sink(), rxhubs.Shutdown()
    partition_ids = list(await hub.get_partition_ids())
    # Read what is sent from now on: after each partition's last event now ("@latest" would mean the last event
    # when a partition is first read, which on a slow machine can come after the first events below were sent).
    now = {pid: (await hub.get_partition_properties(pid)).last_enqueued_sequence_number for pid in partition_ids}
    pipeline = rxhubs.consume(
        hub, "$Default", store, min_batch_size=50, max_wait=2.0,
        default_start={pid: rxhubs.Position.from_sequence_number(seq) for pid, seq in now.items()},
    ).pipe(
        hops.process(sink.write),
        hops.checkpoint(store),  # after the sink: the checkpoint covers only what the sink took
    )
    running = asyncio.ensure_future(rxhubs.arun(pipeline, shutdown=stop))
    try:
        await asyncio.sleep(1.0)  # the consumer claims its partitions
        sent = await produce(hub, partition_ids)
        sink.expect(sent)
        await asyncio.wait_for(sink.complete.wait(), 30.0)  # the last batches come 2 s after their first event
        stop.request()
        await running
    finally:
        await hub.close()
    print(f"{sent} events, {sink.calls} sink calls, {store.calls['update_checkpoint']} checkpoint writes")
    return 0 if sink.events == sent and sink.calls < sent / 10 else 1


async def run() -> int:
    conn = os.environ.get("EVENTHUB_CONNECTION_STRING")
    async with contextlib.AsyncExitStack() as stack:
        if not conn:
            emulator = await stack.enter_async_context(Emulator(hubs={"telemetry": 2}))
            conn = emulator.connection_string("telemetry")
        return await main(conn)


if __name__ == "__main__":
    raise SystemExit(asyncio.run(run()))
