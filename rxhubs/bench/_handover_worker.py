"""One consumer of the ``handover`` scenario: the official processor or rxhubs, recording what it processed.

Connection strings come from RXHUBS_BENCH_EVENTHUB / RXHUBS_BENCH_STORAGE. It runs until SIGTERM (rxhubs:
graceful stop; the SDK: close), then writes the (partition, sequence number) pairs it processed to --out.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
from typing import Any

INTERVAL = 2.0
EXPIRY = 6.0
WORK_S = 0.02  # per batch, so a batch is in flight when ownership moves


async def sdk(args: argparse.Namespace, processed: list[tuple[str, int]], stop: asyncio.Event) -> None:
    from azure.eventhub.aio import EventHubConsumerClient
    from azure.eventhub.extensions.checkpointstoreblobaio import BlobCheckpointStore

    store = BlobCheckpointStore.from_connection_string(os.environ["RXHUBS_BENCH_STORAGE"], args.container)
    client = EventHubConsumerClient.from_connection_string(
        os.environ["RXHUBS_BENCH_EVENTHUB"],
        consumer_group="$Default",
        checkpoint_store=store,
        load_balancing_interval=INTERVAL,
        partition_ownership_expiration_interval=EXPIRY,
    )

    async def on_batch(context: Any, events: list[Any]) -> None:
        if not events:
            return
        await asyncio.sleep(WORK_S)
        processed.extend((context.partition_id, e.sequence_number) for e in events)
        await context.update_checkpoint()

    task = asyncio.create_task(client.receive_batch(on_batch, starting_position="-1", max_batch_size=100))
    await stop.wait()
    await client.close()
    task.cancel()
    await store.close()


async def rx(args: argparse.Namespace, processed: list[tuple[str, int]], stop: asyncio.Event) -> None:
    from reactivex import operators as ops

    import rxhubs
    from rxhubs import operators as hops
    from rxhubs.stores import BlobCheckpointStore

    store = BlobCheckpointStore.from_connection_string(os.environ["RXHUBS_BENCH_STORAGE"], args.container)
    hub = rxhubs.EventHub.from_connection_string(os.environ["RXHUBS_BENCH_EVENTHUB"])
    shutdown = rxhubs.Shutdown()

    def work(batch: rxhubs.EventBatch) -> None:
        processed.extend((batch.partition_id, e.sequence_number) for e in batch)

    pipeline: Any = rxhubs.consume(
        hub, "$Default", store, owner_id=args.owner, load_balancing_interval=INTERVAL, ownership_expiration=EXPIRY,
        max_batch_size=100,
    ).pipe(ops.do_action(work), hops.checkpoint(store, max_interval=1.0))
    runner = asyncio.create_task(rxhubs.arun(pipeline, shutdown=shutdown, signals=()))
    await stop.wait()
    shutdown.request()
    await runner
    await hub.close()
    await store.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--impl", choices=["sdk", "rxhubs"], required=True)
    parser.add_argument("--owner", required=True)
    parser.add_argument("--container", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    processed: list[tuple[str, int]] = []

    async def go() -> None:
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        print("ready", flush=True)
        await (sdk(args, processed, stop) if args.impl == "sdk" else rx(args, processed, stop))

    asyncio.run(go())
    with open(args.out, "w") as out:
        json.dump(processed, out)


if __name__ == "__main__":
    main()
