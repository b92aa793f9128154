"""What the suite's Spark JVMs do, in small: run once with ``-XX:ArchiveClassesAtExit`` (tests/support/spark_cds.py).

A local session as the suite starts it, a shuffle, Arrow both ways, Parquet, and a Python data source read as a
batch and as a stream (the path ``format("eventhubs")`` takes). The JVM archives the classes it loaded when it
exits; the last line printed is its class path (the archive is only valid for that class path).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition

import rxhubs.spark


class _Tiny(DataSource):
    @classmethod
    def name(cls) -> str:
        return "rxhubs_cds_tiny"

    def schema(self) -> str:
        return "id long, body binary"

    def reader(self, schema: Any) -> DataSourceReader:
        return _Rows()

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return _Stream()


class _Rows(DataSourceReader):
    def read(self, partition: Any) -> Iterator[tuple[int, bytes]]:
        yield from ((i, b"event") for i in range(10))


class _Stream(DataSourceStreamReader):
    def initialOffset(self) -> dict[str, int]:
        return {"offset": 0}

    def latestOffset(self) -> dict[str, int]:
        return {"offset": 2}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
        return [InputPartition(0)]

    def read(self, partition: Any) -> Iterator[tuple[int, bytes]]:
        yield from ((i, b"event") for i in range(3))

    def commit(self, end: dict[str, int]) -> None:
        pass


def main() -> None:
    spark = rxhubs.spark.local_session(master="local[2]", app_name="rxhubs-cds")
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(_Tiny)
    frame = spark.range(1000).selectExpr("id", "id % 7 as k", "cast(id as string) as s")
    frame.groupBy("k").count().collect()
    frame.toPandas()
    spark.createDataFrame(pd.DataFrame({"a": [1, 2], "b": ["x", "y"]})).collect()
    with tempfile.TemporaryDirectory() as folder:
        frame.write.parquet(f"{folder}/p")
        spark.read.parquet(f"{folder}/p").count()
        spark.read.format("rxhubs_cds_tiny").load().collect()
        query = (spark.readStream.format("rxhubs_cds_tiny").load().writeStream.format("memory").queryName("t")
                 .option("checkpointLocation", f"{folder}/c").trigger(availableNow=True).start())
        query.awaitTermination()
        spark.sql("select count(*) from t").collect()
    jvm = spark.sparkContext._gateway.proc  # spark-submit, which execs the JVM: the same process
    args = Path(f"/proc/{jvm.pid}/cmdline").read_bytes().split(b"\0")
    spark.stop()
    jvm.stdin.close()  # the JVM exits on end of input and writes the archive as it exits
    jvm.wait(timeout=600)
    print(args[args.index(b"-cp") + 1].decode())


if __name__ == "__main__":
    main()
