"""Publish a DataFrame to an event hub with ``df.write.format("eventhubs")``, then read it back with ``spark.read``.

Starts a local emulator (or uses $EVENTHUB_CONNECTION_STRING) and builds 2,000 readings of 20 devices. Each row
becomes an event: ``body`` (JSON text), ``partitionKey`` (the device: all of a device's readings land on one
partition, in order) and ``properties`` (a map). The write needs ``mode("append")``: an event hub cannot be
overwritten. Delivery is at least once: a retried Spark task sends its rows again. Exit status 0 when every
row came back once and each device sits on a single partition.

    python examples/spark_write.py        (needs: pip install rxhubs[spark], Java 17)
"""

from __future__ import annotations

import contextlib
import os

import rxhubs.spark
from rxhubs.emulator import BackgroundEmulator

ROWS = 2_000
DEVICES = 20


def main(connection_string: str) -> int:
    from pyspark.sql import functions as sf

    spark = rxhubs.spark.local_session(master="local[2]")
    spark.sparkContext.setLogLevel("ERROR")
    run_id = os.urandom(4).hex()
    readings = spark.range(ROWS).select(
        sf.to_json(sf.struct(sf.lit(run_id).alias("run"), sf.col("id").alias("n"),
                             (sf.col("id") % 7 + 20.5).alias("celsius"))).alias("body"),
        sf.concat(sf.lit("device-"), (sf.col("id") % DEVICES).cast("string")).alias("partitionKey"),
        sf.create_map(sf.lit("unit"), sf.lit("C"), sf.lit("run"), sf.lit(run_id)).alias("properties"),
    )
    readings.write.format("eventhubs").option("connectionString", connection_string).mode("append").save()

    back = (spark.read.format("eventhubs").option("connectionString", connection_string).load()
            .where(sf.col("properties")["run"] == run_id))
    rows = back.count()
    spread = back.groupBy("partitionKey").agg(sf.countDistinct("partition").alias("partitions"))
    one_partition_each = spread.where("partitions > 1").count() == 0 and spread.count() == DEVICES
    print(f"rows written: {ROWS}; events read back: {rows}; each device on one partition: {one_partition_each}")
    back.groupBy("partition").count().orderBy("partition").show()
    spark.stop()
    return 0 if rows == ROWS and one_partition_each else 1


def run() -> int:
    conn = os.environ.get("EVENTHUB_CONNECTION_STRING")
    with contextlib.ExitStack() as stack:
        if not conn:
            emulator = stack.enter_context(BackgroundEmulator({"readings": 4}))
            conn = emulator.connection_string("readings")
        return main(conn)


if __name__ == "__main__":
    raise SystemExit(run())
