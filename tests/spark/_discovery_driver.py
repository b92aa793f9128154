"""A fresh Spark driver that reads the emulator with ``format("eventhubs")`` and ``format("rxhubs")``, streaming
and batch, and writes to it, never registering anything: Spark must discover both names from the installed
``pyspark_*`` modules.

Usage: ``python _discovery_driver.py OUT_DIR`` with ``RXHUBS_TEST_CONNECTION_STRING`` set (never on a command
line). Prints one JSON object: where the modules came from, the rows each query read, and the source's
columns after a late ``register_source`` call.
"""

from __future__ import annotations

import json
import os
import sys

import pyspark_rxhubs
import pyspark_rxhubs_eventhubs

import rxhubs.spark


def main(out: str) -> None:
    conn = os.environ["RXHUBS_TEST_CONNECTION_STRING"]
    spark = rxhubs.spark.local_session(master="local[2]", app_name="rxhubs-discovery")
    spark.sparkContext.setLogLevel("ERROR")
    counts = {}
    readers = {
        # this source's own option names
        "eventhubs": {"connectionString": conn, "startingPosition": "earliest"},
        # the Scala connector's, as its PySpark guide writes them
        "rxhubs": {
            "eventhubs.connectionString": conn,
            "eventhubs.consumerGroup": "$Default",
            "eventhubs.startingPosition": json.dumps(
                {"offset": "-1", "seqNo": -1, "enqueuedTime": None, "isInclusive": True}
            ),
            "maxEventsPerTrigger": "15",
        },
    }
    for name, options in readers.items():
        query = (
            spark.readStream.format(name).options(**options).load()
            .writeStream.format("parquet")
            .option("checkpointLocation", f"{out}/{name}-chk")
            .trigger(availableNow=True)
            .start(f"{out}/{name}")
        )
        query.awaitTermination()
        df = spark.read.parquet(f"{out}/{name}")
        counts[name] = {
            "rows": df.count(),
            "distinct": df.select("partition", "sequenceNumber").distinct().count(),
            "batches": len([p for p in query.recentProgress if p["numInputRows"]]),
        }
    # the batch sides, found by the same names: a write, then a batch read of everything
    spark.createDataFrame([(f"w-{i}", str(i % 2)) for i in range(10)], "body string, partitionId string").write.format(
        "eventhubs").option("connectionString", conn).mode("append").save()
    batch = spark.read.format("rxhubs").option("connectionString", conn).option("minPartitions", "4").load()
    counts["batch"] = {"rows": batch.count(), "written": batch.where("body LIKE 'w-%'").count(),
                       "tasks": batch.rdd.getNumPartitions()}
    rxhubs.spark.register_source(spark)  # only now, and still harmless next to the discovered sources
    after = spark.readStream.format("eventhubs").option("connectionString", conn).load().columns
    spark.stop()
    print(json.dumps({
        "modules": [pyspark_rxhubs.__file__, pyspark_rxhubs_eventhubs.__file__, rxhubs.__file__],
        "counts": counts,
        "columns_after_register": after,
    }))


if __name__ == "__main__":
    main(sys.argv[1])
