"""Consume a real Azure event hub: balanced, checkpointed in Azure Blob Storage (or SQLite), Ctrl-C to stop.

Set EVENTHUB_CONNECTION_STRING (with EntityPath=<hub>) and, for blob checkpoints, AZURE_STORAGE_CONNECTION_STRING
and CHECKPOINT_CONTAINER. Without EVENTHUB_CONNECTION_STRING it runs against a local emulator instead (this is
how CI runs it), sends a few events and stops once it has read them.
    python examples/consume_real_hub.py
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import tempfile

from reactivex import operators as ops

import rxhubs
from rxhubs import operators as hops
from rxhubs.emulator import Emulator


def checkpoint_store() -> object:
    storage = os.environ.get("AZURE_STORAGE_CONNECTION_STRING")
    if storage:
        container = os.environ.get("CHECKPOINT_CONTAINER", "rxhubs-checkpoints")
        return rxhubs.stores.BlobCheckpointStore.from_connection_string(storage, container)
    folder = os.environ.get("RXHUBS_EXAMPLE_OUT") or tempfile.mkdtemp()
    return rxhubs.stores.SqliteCheckpointStore(os.path.join(folder, "checkpoints.sqlite"))


async def main() -> int:
    conn = os.environ.get("EVENTHUB_CONNECTION_STRING")
    async with contextlib.AsyncExitStack() as stack:
        demo = conn is None
        if demo:
            emulator = await stack.enter_async_context(Emulator(hubs={"telemetry": 2}))
            conn = emulator.connection_string("telemetry")
        hub = rxhubs.EventHub.from_connection_string(conn)
        store = checkpoint_store()
        stop = rxhubs.Shutdown()
        read = 0
        if demo:
            await hub.send([json.dumps({"n": i}).encode() for i in range(20)])

        def show(batch: rxhubs.EventBatch) -> None:
            nonlocal read
            for event in batch:
                print(f"partition {batch.partition_id} #{event.sequence_number}: {event.body_as_str()[:80]}")
            read += len(batch)
            if demo and read >= 20:
                stop.request()

        pipeline = rxhubs.consume(hub, "$Default", store).pipe(
            ops.do_action(show),
            hops.checkpoint(store, max_interval=5.0),
        )
        await rxhubs.arun(pipeline, shutdown=stop)  # Ctrl-C: checkpoints flush, partitions are released
        await hub.close()
        close = getattr(store, "close", None)
        if close is not None:
            await close()
        print(f"read {read} events")
        return 0 if read >= 20 or not demo else 1


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
