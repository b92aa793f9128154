"""A Spark driver for the kill -9 test: read the eventhubs source into Parquet with availableNow, then exit.

Usage: ``python _source_driver.py CHECKPOINT_DIR OUT_DIR MAX_EVENTS_PER_TRIGGER`` with the connection string
in the ``RXHUBS_TEST_CONNECTION_STRING`` environment variable (never on a command line).
"""

from __future__ import annotations

import os
import sys

import rxhubs.spark


def main(checkpoint: str, out: str, max_events: str) -> None:
    spark = rxhubs.spark.local_session(master="local[2]", app_name="rxhubs-source-driver")
    spark.sparkContext.setLogLevel("ERROR")
    rxhubs.spark.register_source(spark)
    query = (
        spark.readStream.format("eventhubs")
        .option("connectionString", os.environ["RXHUBS_TEST_CONNECTION_STRING"])
        .option("startingPosition", "earliest")
        .option("maxEventsPerTrigger", max_events)
        .load()
        .writeStream.format("parquet")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start(out)
    )
    query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:4])
