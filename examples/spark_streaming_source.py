"""Spark drives: read Event Hubs with ``spark.readStream.format("eventhubs")`` into Parquet, then count.

No registration call: with ``rxhubs[spark]`` installed, Spark finds the ``eventhubs`` (and ``rxhubs``) format
by itself in a fresh session. Starts a local emulator (or uses $EVENTHUB_CONNECTION_STRING), notes each
partition's end, sends 1,000 events over 2 partitions, and runs a Structured Streaming query with
``trigger(availableNow=True)`` that starts at those ends (``startingPosition`` as a JSON map): it reads what
is in the hub now, in micro-batches of at most 600 events, writes them to Parquet with Spark's checkpoint
(exactly-once into the files), and stops. Run again with the same RXHUBS_EXAMPLE_OUT, the query resumes from
its checkpoint instead. Exit status 0 when every event sent is in the Parquet output exactly once.

    python examples/spark_streaming_source.py        (needs: pip install rxhubs[spark], Java 17)

From a clone, `make` sets up discovery in .venv; with a plain `pip install -e .`, see docs/spark.md.
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

PARTITIONS = 2
EVENTS = 1_000


async def ends(connection_string: str) -> str:
    """The next sequence number of each partition, as a ``startingPosition`` JSON map."""
    async with rxhubs.EventHub.from_connection_string(connection_string) as hub:
        ids = await hub.get_partition_ids()
        props = [await hub.get_partition_properties(p) for p in ids]
    return json.dumps({p.partition_id: p.last_enqueued_sequence_number + 1 for p in props})


async def send_events(connection_string: str, run_id: str) -> None:
    async with rxhubs.EventHub.from_connection_string(connection_string) as hub:
        for p in range(PARTITIONS):
            bodies = [json.dumps({"run": run_id, "device": f"sensor-{p}", "reading": i}) for i in range(EVENTS // 2)]
            await hub.send(bodies, partition_id=str(p), properties={"source": "example"})


def main(connection_string: str, workdir: Path) -> int:
    spark = rxhubs.spark.local_session(master="local[2]")
    spark.sparkContext.setLogLevel("ERROR")
    out, checkpoint = workdir / "events", workdir / "checkpoint"
    run_id = os.urandom(4).hex()
    starting_position = asyncio.run(ends(connection_string))  # read from here: what this run sends
    asyncio.run(send_events(connection_string, run_id))
    try:
        events = (
            spark.readStream.format("eventhubs")  # found by Spark itself: no register_source(spark) needed
            .option("connectionString", connection_string)  # never printed: rxhubs redacts it from errors
            .option("consumerGroup", "$Default")
            .option("startingPosition", starting_position)  # for a new checkpoint location; else it resumes
            .option("maxEventsPerTrigger", 600)
            .load()
        )
    except Exception as exc:
        if "DATA_SOURCE_NOT_FOUND" not in str(exc):
            raise
        print("Spark did not find the eventhubs format: install rxhubs[spark] (an editable install needs the")
        print("discovery folder on the path: see 'Spark finds the source by itself' in docs/spark.md)")
        spark.stop()
        return 2
    query = (
        events.writeStream.format("parquet")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start(str(out))
    )
    query.awaitTermination()
    batches = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    df = spark.read.parquet(str(out)).where(f"body LIKE '%{run_id}%'")
    rows = df.count()
    distinct = df.select("partition", "sequenceNumber").distinct().count()
    print(f"events sent: {EVENTS}; rows in Parquet: {rows} ({distinct} distinct); micro-batches: {batches}")
    df.groupBy("partition").count().orderBy("partition").show()
    spark.stop()
    return 0 if rows == distinct == EVENTS else 1


def run() -> int:
    conn = os.environ.get("EVENTHUB_CONNECTION_STRING")
    with contextlib.ExitStack() as stack:
        workdir = Path(os.environ.get("RXHUBS_EXAMPLE_OUT") or stack.enter_context(tempfile.TemporaryDirectory()))
        if not conn:
            emulator = stack.enter_context(BackgroundEmulator({"telemetry": PARTITIONS}))
            conn = emulator.connection_string("telemetry")
        return main(conn, workdir)


if __name__ == "__main__":
    raise SystemExit(run())
