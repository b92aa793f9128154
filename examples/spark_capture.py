"""Spark reads past the retention: ``spark.read.format("eventhubs").option("capturePath", ...)``.

Starts a local emulator that keeps the newest 300 events of each partition and writes Event Hubs Capture files
(Avro) to a folder, sends 1,000 events to each of 2 partitions, then reads the hub twice with one batch query
each: without ``capturePath`` (300 per partition: what the hub retains) and with it (1,000 per partition: the
range before the retention from the Capture files, the rest from the hub, the same columns). Exit status 0 when
the second read holds every event once.

    python examples/spark_capture.py        (needs: pip install 'rxhubs[spark,capture]', Java 17)
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from pathlib import Path

import rxhubs
import rxhubs.spark
from rxhubs.emulator import BackgroundEmulator
from rxhubs.sources import Capture

PARTITIONS, EVENTS, RETAINED = 2, 1000, 300


async def send(conn: str) -> None:
    async with rxhubs.EventHub.from_connection_string(conn) as hub:
        for pid in map(str, range(PARTITIONS)):
            await hub.send([f"{pid}-{i}".encode() for i in range(EVENTS)], partition_id=pid)


async def captured(folder: Path) -> int:
    capture = Capture(folder)
    return min([sum([len(e) async for e in capture.read("telemetry", pid)]) for pid in map(str, range(PARTITIONS))])


def main() -> int:
    folder = Path(os.environ.get("RXHUBS_EXAMPLE_OUT") or tempfile.mkdtemp()) / "capture"
    with BackgroundEmulator({"telemetry": PARTITIONS}, retain_events=RETAINED, capture=folder,
                            capture_window=1.0) as emulator:
        conn = emulator.connection_string("telemetry")
        asyncio.run(send(conn))
        deadline = time.monotonic() + 60
        while asyncio.run(captured(folder)) < EVENTS and time.monotonic() < deadline:  # a file per second
            time.sleep(0.5)
        spark = rxhubs.spark.local_session(master="local[2]", app_name="rxhubs-capture-example")
        try:
            spark.sparkContext.setLogLevel("ERROR")
            retained = spark.read.format("eventhubs").option("connectionString", conn).load().count()
            frame = (spark.read.format("eventhubs").option("connectionString", conn)
                     .option("capturePath", str(folder)).load())
            rows = frame.select("partition", "sequenceNumber").collect()
        finally:
            spark.stop()
    distinct = {(r.partition, r.sequenceNumber) for r in rows}
    print(f"without capturePath: {retained} rows (the hub retains {RETAINED} per partition); with it: {len(rows)} "
          f"rows, {len(distinct)} distinct (partition, sequence number)")
    ok = retained == PARTITIONS * RETAINED and len(rows) == len(distinct) == PARTITIONS * EVENTS
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
