"""A Spark driver on a standalone cluster (run by test_cluster.py): executors in another JVM write and read.

Usage: ``python _cluster_driver.py MASTER_URL`` with the emulator's connection string in
``RXHUBS_TEST_CONNECTION_STRING``. Writes 60 rows with ``df.write.format("eventhubs")``, reads the hub back with
``spark.read.format("eventhubs")`` in 4 tasks, and prints one JSON line: what was read, and the executors seen.
"""

from __future__ import annotations

import json
import os
import sys

import rxhubs.spark


def main(master: str) -> None:
    conn = os.environ["RXHUBS_TEST_CONNECTION_STRING"]
    spark = rxhubs.spark.local_session(master=master, app_name="rxhubs-cluster", conf={
        "spark.executor.memory": "512m", "spark.cores.max": "1", "spark.ui.enabled": "false",
    })
    spark.sparkContext.setLogLevel("ERROR")
    try:
        rows = [(f"cluster-{i}", f"key-{i % 3}") for i in range(60)]
        spark.createDataFrame(rows, "body string, partitionKey string").repartition(2).write.format(
            "eventhubs").option("connectionString", conn).mode("append").save()
        back = spark.read.format("eventhubs").option("connectionString", conn).option("minPartitions", "4").load()
        read = sorted((r.body.decode(), r.partitionKey) for r in back.select("body", "partitionKey").collect())
        executors = spark.sparkContext._jsc.sc().getExecutorIds().size()  # executor JVMs, the driver not counted
        print(json.dumps({"master": spark.sparkContext.master, "read": read, "executors": executors,
                          "tasks": back.rdd.getNumPartitions()}), flush=True)
    finally:
        spark.stop()


if __name__ == "__main__":
    main(sys.argv[1])
