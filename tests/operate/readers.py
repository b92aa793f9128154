"""Three readers of a consumer group's positions, for the reset and KEDA tests: rxhubs, the official SDK, KEDA."""

from __future__ import annotations

import threading
from typing import Any

from azure.eventhub import EventData, EventHubConsumerClient, EventHubProducerClient
from azure.eventhub.extensions.checkpointstoreblob import BlobCheckpointStore as OfficialStore

import rxhubs
from rxhubs.stores import BlobCheckpointStore


def send(connection_string: str, per_partition: dict[str, int], tag: str = "e") -> None:
    """``n`` events to each partition named, with the official producer."""
    with EventHubProducerClient.from_connection_string(connection_string) as producer:
        for pid, n in per_partition.items():
            batch = producer.create_batch(partition_id=pid)
            for i in range(n):
                batch.add(EventData(f"{tag}-{pid}-{i}"))
            producer.send_batch(batch)


async def rxhubs_first_events(
    connection_string: str, storage: str, container: str, group: str, partitions: int
) -> dict[str, int]:
    """The first sequence number an rxhubs consumer reads from each partition, resuming from the blob store."""
    hub = rxhubs.EventHub.from_connection_string(connection_string)
    first: dict[str, int] = {}
    shutdown = rxhubs.Shutdown()

    def seen(batch: Any) -> None:
        if batch.events:
            first.setdefault(batch.context.partition_id, batch.events[0].sequence_number)
        if len(first) == partitions:
            shutdown.request()

    async with BlobCheckpointStore.from_connection_string(storage, container) as store:
        pipeline = rxhubs.consume(hub, group, store, load_balancing_interval=0.5, ownership_expiration=5.0)
        await rxhubs.arun(pipeline.pipe(_tap(seen)), shutdown=shutdown, signals=())
    await hub.close()
    return first


def _tap(fn: Any) -> Any:
    from reactivex import operators as ops

    return ops.do_action(fn)


def official_first_events(
    connection_string: str, storage: str, container: str, group: str, partitions: int
) -> dict[str, int]:
    """The first sequence number the official EventHubConsumerClient, with the official blob store, reads."""
    store = OfficialStore.from_connection_string(storage, container)
    client = EventHubConsumerClient.from_connection_string(
        connection_string, consumer_group=group, checkpoint_store=store, load_balancing_interval=0.5
    )
    first: dict[str, int] = {}
    done = threading.Event()

    def on_event(context: Any, event: Any) -> None:
        if event is not None:
            first.setdefault(context.partition_id, event.sequence_number)
        if len(first) == partitions:
            done.set()

    thread = threading.Thread(
        target=client.receive, kwargs={"on_event": on_event, "starting_position": "@latest", "max_wait_time": 0.5}
    )
    thread.start()
    try:
        assert done.wait(60), f"the official consumer read only {first}"
    finally:
        client.close()
        thread.join(30)
    return first
