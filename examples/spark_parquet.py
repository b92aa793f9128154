"""Event Hubs -> two balanced consumers -> Spark (Parquet) -> checkpoints, then read back and count.

Starts a local emulator (or uses $EVENTHUB_CONNECTION_STRING), sends 2,000 events over 4 partitions, and
runs two consumers of one consumer group side by side, as two processes would: they divide the partitions
through a SQLite checkpoint store. Each writes micro-batches to Parquet with ``rxhubs.spark.write`` and
checkpoints only what Spark committed. Finally Spark reads the Parquet back: every event must be there.
Exit status 0 when the count is right, 1 otherwise.

    python examples/spark_parquet.py        (needs: pip install rxhubs[spark], Java 17)
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from reactivex import operators as ops

import rxhubs
import rxhubs.spark
from rxhubs import Shutdown
from rxhubs import operators as hops
from rxhubs.emulator import Emulator

PARTITIONS = 4
EVENTS = 2_000


async def send_events(hub: rxhubs.EventHub) -> None:
    for p in range(PARTITIONS):
        bodies = [json.dumps({"device": f"sensor-{p}", "reading": i}) for i in range(EVENTS // PARTITIONS)]
        await hub.send(bodies, partition_id=str(p), properties={"source": "example"})


async def consumer(
    name: str, hub: rxhubs.EventHub, store: Any, spark: Any, out: Path, counted: dict[str, int], stop: Shutdown
) -> None:
    """One consumer: its share of the partitions -> Parquet (out/consumer=NAME) -> checkpoint."""

    def count(batch: rxhubs.EventBatch) -> None:  # after the checkpoint operator: written and recorded
        counted[name] += len(batch)
        if sum(counted.values()) >= EVENTS:
            stop.request()  # a graceful stop: flush the last micro-batch and checkpoints, release partitions

    pipeline = rxhubs.consume(
        hub, "$Default", store, owner_id=name, strategy="balanced", load_balancing_interval=1.0
    ).pipe(
        rxhubs.spark.write(
            lambda df: df.write.mode("append").parquet(str(out / f"consumer={name}")),
            spark=spark,
            max_events=500,
            max_interval=0.5,
        ),
        hops.checkpoint(store, max_interval=1.0),
        ops.do_action(count),
    )
    await rxhubs.arun(pipeline, shutdown=stop, signals=())


async def main(connection_string: str, workdir: Path) -> int:
    spark_starting = asyncio.create_task(asyncio.to_thread(rxhubs.spark.local_session, master="local[2]"))
    hub = rxhubs.EventHub.from_connection_string(connection_string)
    store = rxhubs.stores.SqliteCheckpointStore(str(workdir / "checkpoints.sqlite"))
    out = workdir / "events"
    try:
        await send_events(hub)
        spark = await spark_starting
        spark.sparkContext.setLogLevel("ERROR")
        counted = {"a": 0, "b": 0}
        stop = Shutdown()
        first = asyncio.create_task(consumer("a", hub, store, spark, out, counted, stop))
        await asyncio.sleep(1.0)  # "b" joins a running consumer and takes its share
        second = asyncio.create_task(consumer("b", hub, store, spark, out, counted, stop))
        await asyncio.wait_for(asyncio.gather(first, second), timeout=120)
    finally:
        await hub.close()

    df = spark.read.parquet(str(out))
    rows = df.count()
    distinct = df.select("partition", "sequenceNumber").distinct().count()
    print(f"events sent: {EVENTS}; rows in Parquet: {rows} ({distinct} distinct); per consumer: {counted}")
    df.groupBy("consumer", "partition").count().orderBy("partition", "consumer").show()
    checkpoints = await store.list_checkpoints(hub.fully_qualified_namespace, hub.eventhub_name, "$Default")
    print("checkpoints:", {c.partition_id: c.sequence_number for c in checkpoints})
    spark.stop()
    return 0 if distinct == EVENTS and rows >= EVENTS else 1


async def run() -> int:
    conn = os.environ.get("EVENTHUB_CONNECTION_STRING")
    with contextlib.ExitStack() as files:
        workdir = Path(os.environ.get("RXHUBS_EXAMPLE_OUT") or files.enter_context(tempfile.TemporaryDirectory()))
        async with contextlib.AsyncExitStack() as stack:
            if not conn:
                emulator = await stack.enter_async_context(Emulator(hubs={"telemetry": PARTITIONS}))
                conn = emulator.connection_string("telemetry")
            return await main(conn, workdir)


if __name__ == "__main__":
    raise SystemExit(asyncio.run(run()))
