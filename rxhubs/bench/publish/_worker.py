"""One publish trial in a fresh process: hub A to hub B through rxhubs or through the raw SDK.

Connection strings come from RXHUBS_BENCH_SOURCE and RXHUBS_BENCH_TARGET; prints one JSON object. Both sides
read A from the start with the same batch size and prefetch, and publish each batch's events to B in as few
service batches as fit (no partition key: the service picks the partition), one send at a time per source
partition; an event counts once its send was acknowledged. ``--impl consume`` runs rxhubs' pipeline without the
publish (what reading alone costs in the same run); an rxhubs trial also reports the send paths it took.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from typing import Any

from rxhubs.bench.throughput._worker import Clock

TUNED: dict[str, Any] = {"max_batch_size": 500, "prefetch": 1000}


async def sdk(clock: Clock) -> None:
    from azure.eventhub import EventData
    from azure.eventhub.aio import EventHubConsumerClient, EventHubProducerClient

    consumer = EventHubConsumerClient.from_connection_string(
        os.environ["RXHUBS_BENCH_SOURCE"], consumer_group="$Default"
    )
    producer = EventHubProducerClient.from_connection_string(os.environ["RXHUBS_BENCH_TARGET"])

    async def on_batch(context: Any, events: list[Any]) -> None:
        pending = list(events)
        while pending:
            batch = await producer.create_batch()
            count = 0
            for event in pending:
                data = EventData(b"".join(event.body))
                if event.properties:
                    data.properties = dict(event.properties)
                try:
                    batch.add(data)
                except ValueError:
                    break
                count += 1
            await producer.send_batch(batch)
            del pending[:count]
        if events:
            clock.saw(len(events))

    task = asyncio.create_task(consumer.receive_batch(
        on_batch, starting_position="-1", track_last_enqueued_event_properties=True, **TUNED
    ))
    await clock.done.wait()
    await consumer.close()
    task.cancel()
    await producer.close()


async def rxhubs_trial(clock: Clock, publish: bool = True) -> None:
    from reactivex import operators as ops

    import rxhubs
    from rxhubs import operators as hops

    source = rxhubs.EventHub.from_connection_string(os.environ["RXHUBS_BENCH_SOURCE"])
    target = rxhubs.EventHub.from_connection_string(os.environ["RXHUBS_BENCH_TARGET"])
    store = rxhubs.stores.InMemoryCheckpointStore()
    stop = rxhubs.Shutdown()

    def count(batch: rxhubs.EventBatch) -> None:
        if batch.events:
            clock.saw(len(batch.events))

    pipeline: Any = rxhubs.consume(source, "$Default", store, **TUNED).pipe(
        hops.publish(target) if publish else ops.do_action(None),  # "consume": the pipeline without the publish
        ops.do_action(count),
        hops.checkpoint(store, max_interval=5.0),
    )
    runner = asyncio.create_task(rxhubs.arun(pipeline, shutdown=stop, signals=()))
    await clock.done.wait()
    stop.request()
    await runner
    clock.native_send = target._senders.native  # type: ignore[attr-defined]
    await source.close()
    await target.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--impl", choices=["sdk", "rxhubs", "consume"], required=True)
    parser.add_argument("--events", type=int, required=True)
    args = parser.parse_args()

    async def trial() -> dict[str, Any]:
        clock = Clock(args.events)
        await (sdk(clock) if args.impl == "sdk" else rxhubs_trial(clock, publish=args.impl == "rxhubs"))
        result = clock.result()
        if args.impl == "rxhubs":
            result["send_paths"] = ["native-send" if getattr(clock, "native_send", False) else "send_batch"]
        return result

    print(json.dumps(asyncio.run(trial())), flush=True)


if __name__ == "__main__":
    main()
