"""One consumer process for the integration tests: ``python -m tests.balancing.consumer_proc NAME OUT``.

Reads the hub of ``RXHUBS_TEST_EVENTHUB`` with ``rxhubs.consume`` through the store of ``RXHUBS_TEST_STORE``
(with ``RXHUBS_TEST_ASYNC_WORK`` set, each batch goes through ``hops.process`` with 0-100 ms of async work,
four batches of a partition at once, and is recorded when its work completes)
(``sqlite:///path`` or ``blob://container`` with ``RXHUBS_TEST_STORAGE``), appends one line per processed
event to OUT (``partition sequence_number owner wall_time``, flushed per batch so that a SIGKILL loses none
of them), then checkpoints; each checkpoint written is noted as ``CP partition sequence_number``, each one a
fenced store refused as ``FENCED partition sequence_number``; ``OPEN partition`` and ``CLOSE partition reason``
mark each period of ownership, ``LOST partition operation`` each ``OwnershipLostError`` reported. SIGTERM
stops it gracefully. It prints ``ready`` once subscribed.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import sys
import time
from typing import Any, TextIO

from reactivex import operators as ops

import rxhubs
from rxhubs import Checkpoint, Ownership
from rxhubs import operators as hops
from rxhubs.errors import OwnershipLostError
from rxhubs.stores import FencedCheckpointStore

INTERVAL = 1.0
EXPIRY = 3.0
CHECKPOINT_INTERVAL = 0.5


def _store() -> Any:
    url = os.environ["RXHUBS_TEST_STORE"]
    if url.startswith("blob://"):
        from rxhubs.stores import BlobCheckpointStore

        return BlobCheckpointStore.from_connection_string(os.environ["RXHUBS_TEST_STORAGE"], url[len("blob://") :])
    return rxhubs.stores.from_url(url)


class LoggedStore(FencedCheckpointStore):
    """The real (fenced) store; each checkpoint written is also noted in the output (``CP partition sequence``)."""

    def __init__(self, inner: Any, sink: TextIO) -> None:
        self.inner = inner
        self.sink = sink

    async def list_ownership(self, *args: Any) -> Any:
        return await self.inner.list_ownership(*args)

    async def claim_ownership(self, ownerships: Any) -> Any:
        return await self.inner.claim_ownership(ownerships)

    async def list_checkpoints(self, *args: Any) -> Any:
        return await self.inner.list_checkpoints(*args)

    async def update_checkpoint(self, checkpoint: Checkpoint) -> None:
        written = time.time()
        await self.inner.update_checkpoint(checkpoint)
        self.sink.write(f"CP {checkpoint.partition_id} {checkpoint.sequence_number} {written:.3f}\n")
        self.sink.flush()

    async def fence(self, ownership: Ownership) -> Checkpoint | None:
        return await self.inner.fence(ownership)  # type: ignore[no-any-return]

    async def update_checkpoint_fenced(self, checkpoint: Checkpoint, ownership: Ownership) -> None:
        written = time.time()
        try:
            await self.inner.update_checkpoint_fenced(checkpoint, ownership)
        except OwnershipLostError:
            self.sink.write(f"FENCED {checkpoint.partition_id} {checkpoint.sequence_number}\n")
            self.sink.flush()
            raise
        self.sink.write(f"CP {checkpoint.partition_id} {checkpoint.sequence_number} {written:.3f}\n")
        self.sink.flush()

    async def close(self) -> None:
        await self.inner.close()


async def amain(name: str, sink: TextIO) -> None:
    hub = rxhubs.EventHub.from_connection_string(os.environ["RXHUBS_TEST_EVENTHUB"])
    store = LoggedStore(_store(), sink)

    def record(batch: rxhubs.EventBatch) -> None:
        now = time.time()
        sink.write("".join(f"{batch.partition_id} {e.sequence_number} {name} {now:.3f}\n" for e in batch))
        sink.flush()

    async def work(batch: rxhubs.EventBatch) -> None:  # async work in flight when SIGKILL comes
        await asyncio.sleep(random.random() * 0.1)
        record(batch)

    def note(line: str) -> None:
        sink.write(line + "\n")
        sink.flush()

    def on_error(context: rxhubs.ErrorContext, error: Exception) -> None:
        if isinstance(error, OwnershipLostError):
            note(f"LOST {context.partition_id} {context.operation}")

    source = rxhubs.consume(
        hub,
        "$Default",
        store,
        on_partition_initialize=lambda context: note(f"OPEN {context.partition_id}"),
        on_partition_close=lambda context, reason: note(f"CLOSE {context.partition_id} {reason.value}"),
        on_partition_error=on_error,
        owner_id=name,
        load_balancing_interval=INTERVAL,
        ownership_expiration=EXPIRY,
        max_wait=0.2,
        max_batch_size=5,
        max_inflight=8,
    )
    step = hops.process(work, concurrency=4) if os.environ.get("RXHUBS_TEST_ASYNC_WORK") else ops.do_action(record)
    pipeline = source.pipe(step, hops.checkpoint(store, max_interval=CHECKPOINT_INTERVAL))
    print("ready", flush=True)
    try:
        await rxhubs.arun(pipeline, grace=10.0)
    finally:
        await hub.close()
        await store.close()


def main() -> None:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    name, out = sys.argv[1], sys.argv[2]
    with open(out, "a", buffering=1) as sink:
        asyncio.run(amain(name, sink))


if __name__ == "__main__":
    main()
