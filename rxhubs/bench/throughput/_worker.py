"""One throughput trial in a fresh process: rxhubs or the raw SDK, tuned or on defaults.

Connection strings come from RXHUBS_BENCH_EVENTHUB and RXHUBS_BENCH_STORAGE; prints one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import time
from typing import Any

TUNED: dict[str, Any] = {"max_batch_size": 1000, "prefetch": 2000}
CHECKPOINT_INTERVAL = 5.0


def touch(events: list[tuple[bytes, int]]) -> int:
    """The least a real consumer does with each event: read its body and sequence number (both sides alike)."""
    return len(events)


class Clock:
    """First and last event times of a trial, and the CPU the cyclic garbage collector took between them."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.count = 0
        self.first: float | None = None
        self.last = 0.0
        self.done = asyncio.Event()
        self.gc_seconds = 0.0
        self.gc_full = 0  # full collections
        self._gc_start = 0.0
        gc.callbacks.append(self._gc)

    def _gc(self, phase: str, info: dict[str, Any]) -> None:
        if self.first is None or self.count >= self.target:
            return
        if phase == "start":
            self._gc_start = time.thread_time()
        else:
            self.gc_seconds += time.thread_time() - self._gc_start
            self.gc_full += info["generation"] == 2

    def saw(self, n: int) -> None:
        now, cpu = time.perf_counter(), time.process_time()
        if self.first is None:
            self.first, self.first_cpu = now, cpu
            self.first_batch = n
        self.count += n
        self.last, self.last_cpu = now, cpu
        if self.count >= self.target:
            self.done.set()

    def result(self) -> dict[str, Any]:
        seconds = self.last - (self.first or self.last)
        measured = self.count - getattr(self, "first_batch", 0)
        cpu = self.last_cpu - self.first_cpu if self.first is not None else 0.0  # this process: one core at most
        return {"events": self.count, "seconds": seconds, "events_per_s": measured / seconds if seconds else 0.0,
                "cpu_us_per_event": cpu / measured * 1e6 if measured > 0 else 0.0,
                "gc_us_per_event": self.gc_seconds / measured * 1e6 if measured > 0 else 0.0,
                "gc_full_collections": self.gc_full}


async def sdk(args: argparse.Namespace, clock: Clock) -> None:
    from azure.eventhub.aio import EventHubConsumerClient
    from azure.eventhub.extensions.checkpointstoreblobaio import BlobCheckpointStore
    from azure.storage.blob.aio import ContainerClient

    async with ContainerClient.from_connection_string(os.environ["RXHUBS_BENCH_STORAGE"], args.container) as c:
        await c.create_container()  # the official store does not create its container
    store = BlobCheckpointStore.from_connection_string(os.environ["RXHUBS_BENCH_STORAGE"], args.container)
    client = EventHubConsumerClient.from_connection_string(
        os.environ["RXHUBS_BENCH_EVENTHUB"], consumer_group="$Default", checkpoint_store=store
    )
    last_checkpoint: dict[str, float] = {}

    async def on_batch(context: Any, events: list[Any]) -> None:
        if not events:
            return
        clock.saw(touch([(b"".join(e.body), e.sequence_number) for e in events]))
        if args.profile == "defaults":
            await context.update_checkpoint()  # the SDK samples' habit: one write per batch
        else:
            now = time.monotonic()
            if now - last_checkpoint.get(context.partition_id, 0.0) >= CHECKPOINT_INTERVAL:
                last_checkpoint[context.partition_id] = now
                await context.update_checkpoint()

    options: dict[str, Any] = TUNED if args.profile == "tuned" else {}
    if args.profile == "tuned":  # rxhubs tracks last-enqueued properties (for lag); tuned alike means both do
        options = {**options, "track_last_enqueued_event_properties": True}
    task = asyncio.create_task(client.receive_batch(on_batch, starting_position="-1", **options))
    await clock.done.wait()
    await client.close()
    task.cancel()
    await store.close()


async def rxhubs_trial(args: argparse.Namespace, clock: Clock) -> None:
    from reactivex import operators as ops

    import rxhubs
    from rxhubs import operators as hops
    from rxhubs._shutdown import Shutdown
    from rxhubs.stores import BlobCheckpointStore

    store = BlobCheckpointStore.from_connection_string(os.environ["RXHUBS_BENCH_STORAGE"], args.container)
    hub = rxhubs.EventHub.from_connection_string(os.environ["RXHUBS_BENCH_EVENTHUB"])
    options = TUNED if args.profile == "tuned" else {}
    stop = Shutdown()
    def handle(batch: rxhubs.EventBatch) -> None:
        clock.saw(touch([(e.body, e.sequence_number) for e in batch.events]))

    pipeline: Any = rxhubs.consume(hub, "$Default", store, **options).pipe(
        ops.do_action(handle),
        hops.checkpoint(store, max_interval=CHECKPOINT_INTERVAL),
    )
    runner = asyncio.create_task(rxhubs.arun(pipeline, shutdown=stop, signals=()))
    await clock.done.wait()
    stop.request()
    await runner
    await hub.close()
    await store.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--impl", choices=["sdk", "rxhubs"], required=True)
    parser.add_argument("--profile", choices=["tuned", "defaults"], required=True)
    parser.add_argument("--events", type=int, required=True)
    parser.add_argument("--container", required=True)
    args = parser.parse_args()

    async def trial() -> dict[str, Any]:
        clock = Clock(args.events)
        await (sdk(args, clock) if args.impl == "sdk" else rxhubs_trial(args, clock))
        return clock.result()

    print(json.dumps(asyncio.run(trial())), flush=True)


if __name__ == "__main__":
    main()
