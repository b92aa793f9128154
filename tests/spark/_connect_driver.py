"""A Spark Connect server and a remote session in one process (run by test_connect.py as a subprocess).

The server is a local Spark session with Spark's Connect plugin on a free loopback port; the client is a
``pyspark.sql.connect`` session reaching it over gRPC. Through the client: a batch write, a batch read and a
streaming read (availableNow into Parquet) of the emulator hub given in
RXHUBS_TEST_CONNECTION_STRING, and ``to_dataframe(local=False)`` (a keyword Spark Connect ignores).
Prints one JSON line of what it saw.
"""

from __future__ import annotations

import json
import os
import socket
import sys

import rxhubs.spark
from rxhubs import EventBatch, PartitionContext
from rxhubs.testing import InMemoryEventHub


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> None:
    conn, workdir = os.environ["RXHUBS_TEST_CONNECTION_STRING"], sys.argv[1]
    port = free_port()
    server = rxhubs.spark.local_session(master="local[2]", app_name="rxhubs-connect-server", conf={
        "spark.plugins": "org.apache.spark.sql.connect.SparkConnectPlugin",
        "spark.connect.grpc.binding.address": "127.0.0.1",
        "spark.connect.grpc.binding.port": str(port),
    })
    server.sparkContext.setLogLevel("ERROR")
    from pyspark.sql.connect.session import SparkSession as RemoteSession

    remote = RemoteSession.builder.remote(f"sc://127.0.0.1:{port}").getOrCreate()
    try:
        rows = [(f"connect-{i}", str(i % 2)) for i in range(40)]
        df = remote.createDataFrame(rows, "body string, partitionId string")
        df.write.format("eventhubs").option("connectionString", conn).mode("append").save()
        batch = remote.read.format("eventhubs").option("connectionString", conn).load()
        read = sorted(r.body.decode() for r in batch.select("body").collect())
        query = (
            remote.readStream.format("eventhubs").option("connectionString", conn)
            .option("startingPosition", "earliest").load()
            .writeStream.format("parquet").option("checkpointLocation", f"{workdir}/chk")
            .trigger(availableNow=True).start(f"{workdir}/out")
        )
        query.awaitTermination()
        streamed = remote.read.parquet(f"{workdir}/out").count()
        mem = InMemoryEventHub(partition_count=1)
        mem.send([b"a", b"b", b"c"], partition_id="0", properties={"k": 1})
        batch_of_three = EventBatch(PartitionContext("ns", "connect", "$Default", "0"), mem.events("0"))
        converted = rxhubs.spark.to_dataframe(remote, batch_of_three, local=False)
        seen = {
            "remote": type(remote).__module__, "read": read, "streamed": streamed,
            "converted": [(bytes(r.body).decode(), r.properties) for r in converted.collect()],
        }
        print(json.dumps(seen), flush=True)
    finally:
        remote.stop()
        server.stop()


if __name__ == "__main__":
    main()
