"""One hub-to-hub consumer process for the kill test: ``python -m tests.operators.publish_proc OUT``.

Reads the hub of ``RXHUBS_TEST_SOURCE`` with ``rxhubs.consume`` (SQLite store ``RXHUBS_TEST_STORE``), publishes
every event upper-cased to the hub of ``RXHUBS_TEST_TARGET`` (keys kept, the source position in the properties
``src``), then checkpoints. Appends to OUT, flushed per line so that a SIGKILL loses none: ``ACK partition
sequence_numbers time`` once the target acknowledged a send (the source sequence numbers, comma-separated), and
``CP partition sequence_number time`` when a checkpoint write starts. Prints ``ready`` once subscribed.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import time
from collections.abc import Sequence
from typing import Any, TextIO

from reactivex import operators as ops

import rxhubs
from rxhubs import Checkpoint
from rxhubs import operators as hops
from rxhubs.stores import CheckpointStore


class Noted(CheckpointStore):
    """The real store; each checkpoint write is noted first (``CP partition sequence time``)."""

    def __init__(self, inner: Any, sink: TextIO) -> None:
        self.inner, self.sink = inner, sink

    async def list_ownership(self, *args: Any) -> Any:
        return await self.inner.list_ownership(*args)

    async def claim_ownership(self, ownerships: Any) -> Any:
        return await self.inner.claim_ownership(ownerships)

    async def list_checkpoints(self, *args: Any) -> Any:
        return await self.inner.list_checkpoints(*args)

    async def update_checkpoint(self, checkpoint: Checkpoint) -> None:
        self.sink.write(f"CP {checkpoint.partition_id} {checkpoint.sequence_number} {time.time():.6f}\n")
        await self.inner.update_checkpoint(checkpoint)

    async def close(self) -> None:
        await self.inner.close()


class AckedTarget:
    """The real target hub; what it acknowledged is noted (``ACK partition sequence time``)."""

    def __init__(self, hub: rxhubs.EventHub, sink: TextIO) -> None:
        self.hub, self.sink, self.eventhub_name = hub, sink, hub.eventhub_name

    async def publish(
        self, events: Sequence[hops.OutgoingEvent], *, partition_id: str | None = None, partition_key: str | None = None
    ) -> None:
        await self.hub.publish(events, partition_id=partition_id, partition_key=partition_key)
        pid = events[0].properties["src"].split(":")[0]
        seqs = ",".join(e.properties["src"].split(":")[1] for e in events)
        self.sink.write(f"ACK {pid} {seqs} {time.time():.6f}\n")


async def amain(sink: TextIO) -> None:
    source = rxhubs.EventHub.from_connection_string(os.environ["RXHUBS_TEST_SOURCE"])
    target = rxhubs.EventHub.from_connection_string(os.environ["RXHUBS_TEST_TARGET"])
    store = Noted(rxhubs.stores.from_url(os.environ["RXHUBS_TEST_STORE"]), sink)
    partition_of: dict[int, str] = {}

    def remember(batch: rxhubs.EventBatch) -> rxhubs.EventBatch:
        for event in batch:
            partition_of[id(event)] = batch.partition_id
        return batch

    def position(event: rxhubs.Event) -> dict[str, Any]:
        return {"src": f"{partition_of.pop(id(event))}:{event.sequence_number}"}

    pipeline = rxhubs.consume(
        source, "$Default", store, load_balancing_interval=1.0, ownership_expiration=3.0, max_wait=0.2,
        max_batch_size=20, max_inflight=4,
    ).pipe(
        ops.map(remember),
        hops.publish(AckedTarget(target, sink), body=lambda e: e.body.upper(), properties=position),
        hops.checkpoint(store, max_interval=0.3),
    )
    print("ready", flush=True)
    try:
        await rxhubs.arun(pipeline, grace=10.0)
    finally:
        await source.close()
        await target.close()
        await store.close()


def main() -> None:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    with open(sys.argv[1], "a", buffering=1) as sink:
        asyncio.run(amain(sink))


if __name__ == "__main__":
    main()
