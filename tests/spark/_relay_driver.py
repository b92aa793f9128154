"""A Spark driver for the relay kill -9 test: hub A -> transform -> hub B (``writeStream.format("eventhubs")``).

Usage: ``python _relay_driver.py CHECKPOINT_DIR`` with the two connection strings in ``RXHUBS_TEST_SOURCE`` and
``RXHUBS_TEST_TARGET`` (never on a command line). Each event's body (an integer) is multiplied by ten;
micro-batches of at most 50 events, availableNow.
"""

from __future__ import annotations

import os
import sys

import rxhubs.spark


def relay(spark: object, source: str, target: str, checkpoint: str) -> object:
    """The query, started (also used by the test for the restart)."""
    from pyspark.sql import functions as sf

    return (
        spark.readStream.format("eventhubs").option("connectionString", source)  # type: ignore[attr-defined]
        .option("startingPosition", "earliest").option("maxEventsPerTrigger", "50").load()
        .select((sf.col("body").cast("string").cast("int") * 10).cast("string").alias("body"),
                sf.col("partition").alias("partitionId"))
        .writeStream.format("eventhubs").option("connectionString", target)
        .option("checkpointLocation", checkpoint).trigger(availableNow=True).start()
    )


def main(checkpoint: str) -> None:
    spark = rxhubs.spark.local_session(master="local[2]", app_name="rxhubs-relay-driver")
    spark.sparkContext.setLogLevel("ERROR")
    query = relay(spark, os.environ["RXHUBS_TEST_SOURCE"], os.environ["RXHUBS_TEST_TARGET"], checkpoint)
    query.awaitTermination()  # type: ignore[attr-defined]
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1])
