"""Backfill: read everything an event hub retains with one batch query, ``spark.read.format("eventhubs")``, to Parquet.

Starts a local emulator (or uses $EVENTHUB_CONNECTION_STRING), sends 3,000 events over 3 partitions, then reads
the hub from ``earliest`` (the batch default) to its end *as planned when the query starts* (``latest``, the
default ``endingPosition``): events sent later are left for the next backfill or a stream. ``minPartitions``
cuts each partition's range into pieces, so a cluster reads one partition with several cores. Exit status 0
when the Parquet output holds every event of this run exactly once.

    python examples/spark_backfill.py        (needs: pip install rxhubs[spark], Java 17)
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import tempfile
from pathlib import Path

import rxhubs
import rxhubs.spark
from rxhubs.emulator import BackgroundEmulator

PARTITIONS = 3
EVENTS = 3_000


async def send_events(connection_string: str, run_id: str) -> None:
    async with rxhubs.EventHub.from_connection_string(connection_string) as hub:
        for p in range(PARTITIONS):
            bodies = [json.dumps({"run": run_id, "meter": f"m-{p}", "kwh": i}) for i in range(EVENTS // PARTITIONS)]
            await hub.send(bodies, partition_id=str(p), properties={"source": "backfill-example"})


def main(connection_string: str, workdir: Path) -> int:
    spark = rxhubs.spark.local_session(master="local[2]")
    spark.sparkContext.setLogLevel("ERROR")
    run_id = os.urandom(4).hex()
    asyncio.run(send_events(connection_string, run_id))
    events = (
        spark.read.format("eventhubs")  # a batch read: found by Spark itself, like the streaming source
        .option("connectionString", connection_string)
        .option("startingPosition", "earliest")  # the default for spark.read; shown for clarity
        .option("endingPosition", "latest")  # fixed when the query is planned
        .option("minPartitions", 6)  # 3 partitions -> 6 Spark tasks
        .load()
    )
    out = workdir / "backfill"
    events.write.mode("overwrite").partitionBy("partition").parquet(str(out))
    df = spark.read.parquet(str(out)).where(f"body LIKE '%{run_id}%'")
    rows, distinct = df.count(), df.select("partition", "sequenceNumber").distinct().count()
    print(f"events sent: {EVENTS}; rows backfilled: {rows} ({distinct} distinct)")
    df.groupBy("partition").count().orderBy("partition").show()
    spark.stop()
    return 0 if rows == distinct == EVENTS else 1


def run() -> int:
    conn = os.environ.get("EVENTHUB_CONNECTION_STRING")
    with contextlib.ExitStack() as stack:
        workdir = Path(os.environ.get("RXHUBS_EXAMPLE_OUT") or stack.enter_context(tempfile.TemporaryDirectory()))
        if not conn:
            emulator = stack.enter_context(BackgroundEmulator({"meters": PARTITIONS}))
            conn = emulator.connection_string("meters")
        return main(conn, workdir)


if __name__ == "__main__":
    raise SystemExit(run())
