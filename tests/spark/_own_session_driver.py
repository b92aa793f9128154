"""A Spark driver whose user builds the SparkSession themselves, as docs/spark.md ("Your own SparkSession") says.

Usage: ``python _own_session_driver.py MODE CHECKPOINT_DIR OUT_DIR`` with the connection string in
``RXHUBS_TEST_CONNECTION_STRING``. MODE ``wrapper``: ``PYSPARK_PYTHON`` is ``rxhubs.spark.worker_python()``;
``plain``: this interpreter (what a user's session has without the fix). Prints the rows the streaming query
wrote, or the error that stopped it, and exits 0 either way.
"""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession

import rxhubs.spark


def main(mode: str, checkpoint: str, out: str) -> None:
    os.environ["PYSPARK_PYTHON"] = rxhubs.spark.worker_python() if mode == "wrapper" else sys.executable
    spark = (
        SparkSession.builder.master("local[2]").appName("rxhubs-own-session")
        .config("spark.pyspark.python", os.environ["PYSPARK_PYTHON"])
        .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    rxhubs.spark.register_source(spark)
    try:
        query = (
            spark.readStream.format("eventhubs")
            .option("connectionString", os.environ["RXHUBS_TEST_CONNECTION_STRING"])
            .option("startingPosition", "earliest")
            .load()
            .writeStream.format("parquet")
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start(out)
        )
        query.awaitTermination()
        print(f"rows {spark.read.parquet(out).count()}", flush=True)
    except Exception as exc:
        print(f"failed {str(exc).splitlines()[0][:300]}", flush=True)
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:4])
