"""Every core of one machine: rxhubs.run_workers runs two consumer processes that share a hub's partitions.

Starts a local emulator, sends 500 events to each of 4 partitions, then runs two worker processes of one
consumer group on a SQLite store for 15 seconds; each worker writes what it read to its own file. Prints
the summary (events per worker) and checks every event was read. In production, leave out ``duration``:
Ctrl-C stops all workers gracefully, and a worker that dies is restarted.
    python examples/workers.py
"""

from __future__ import annotations

import functools
import os
import tempfile
from pathlib import Path
from typing import Any

from reactivex import operators as ops

import rxhubs
from rxhubs import operators as hops
from rxhubs.emulator import BackgroundEmulator
from rxhubs.stores import SqliteCheckpointStore


def pipeline(connection_string: str, folder: str, context: rxhubs.WorkerContext) -> Any:
    """Runs in each worker process: consume -> write -> checkpoint (module level, so it can be sent there)."""
    hub = context.closing(rxhubs.EventHub.from_connection_string(connection_string))
    store = context.closing(SqliteCheckpointStore(Path(folder) / "checkpoints.sqlite"))
    out = Path(folder) / f"{context.owner_id}.txt"

    def write(batch: rxhubs.EventBatch) -> None:
        with out.open("a") as f:
            f.writelines(f"{e.body_as_str()}\n" for e in batch.events)

    return rxhubs.consume(hub, "$Default", store, owner_id=context.owner_id, load_balancing_interval=1.0).pipe(
        ops.do_action(write), hops.checkpoint(store, max_interval=0.5)
    )


def main() -> int:
    folder = Path(os.environ.get("RXHUBS_EXAMPLE_OUT") or tempfile.mkdtemp())
    with BackgroundEmulator({"telemetry": 4}) as emulator:
        connection_string = emulator.connection_string("telemetry")
        from azure.eventhub import EventData, EventHubProducerClient

        with EventHubProducerClient.from_connection_string(connection_string) as producer:
            for p in "0123":
                batch = producer.create_batch(partition_id=p)
                for i in range(500):
                    batch.add(EventData(f"{p}-{i}"))
                producer.send_batch(batch)
        summary = rxhubs.run_workers(
            functools.partial(pipeline, connection_string, str(folder)), workers=2, owner_prefix="example",
            duration=15.0,  # reading 2,000 events takes 2-4 s; a busy machine (CI) needs the rest for start-up
        )
    print(summary)
    read = {line for f in folder.glob("example-w*.txt") for line in f.read_text().splitlines()}
    missing = [f"{p}-{i}" for p in "0123" for i in range(500) if f"{p}-{i}" not in read]
    print(f"events read: {len(read)}, missing: {len(missing)}")
    return 0 if summary.ok and not missing else 1


if __name__ == "__main__":
    raise SystemExit(main())
