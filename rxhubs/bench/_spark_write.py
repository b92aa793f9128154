"""Scenario ``spark-write``: events/s written to Event Hubs by ``df.write.format("eventhubs")`` vs the raw SDK producer.

One emulator in its own process serves a hub of 4 partitions. Both sides send the same rows: JSON bodies of
about 100 bytes with one property, each row addressed to a partition (``partitionId``), so both pack each
partition's events into as few service batches as fit.

* rxhubs: a DataFrame of those rows (cached, so its build is not timed) written with
  ``df.write.format("eventhubs").mode("append").save()`` on ``local[2]`` (2 tasks, grouped per partition,
  through ``EventHub.publish``).
* baseline: one azure-eventhub ``EventHubProducerClient`` (sync, one process) sending the same bodies and
  properties, partition by partition, ``create_batch`` / ``add`` / ``send_batch``.

After each run the hub's partition properties must show every event arrived. A warm-up of each goes first
(JVM, Python workers), then the two alternate and medians are reported, in total and per core (the Spark write
uses two cores, the SDK producer one). Target: >= 3x the SDK producer per core. The Spark tasks send through
``EventHub.publish``, the native send path (compiled encoder) where it is built.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from typing import Any

from rxhubs.bench._procs import emulator_process
from rxhubs.bench._report import figure, sized

SCENARIO = "spark-write"
PARTITIONS = 4
HUB = "bench"


def _rows(events: int) -> list[tuple[str, str, dict[str, str]]]:
    return [
        (json.dumps({"device": f"sensor-{i % 50}", "t": 21.5 + i % 7, "seq": i}), str(i % PARTITIONS),
         {"type": "reading"})
        for i in range(events)
    ]


def _total(connection_string: str) -> int:
    from azure.eventhub import EventHubConsumerClient

    with EventHubConsumerClient.from_connection_string(connection_string, "$Default") as client:
        props = [client.get_partition_properties(str(p)) for p in range(PARTITIONS)]
    return sum(0 if p["is_empty"] else p["last_enqueued_sequence_number"] + 1 for p in props)


def _spark(df: Any, connection_string: str, before: int, events: int) -> float:
    start = time.perf_counter()
    df.write.format("eventhubs").option("connectionString", connection_string).mode("append").save()
    elapsed = time.perf_counter() - start
    if _total(connection_string) != before + events:
        raise RuntimeError("spark-write bench: the hub did not get every event of the Spark write")
    return events / elapsed


def _sdk(rows: list[tuple[str, str, dict[str, str]]], connection_string: str, before: int) -> float:
    from azure.eventhub import EventData, EventHubProducerClient

    by_partition: dict[str, list[tuple[str, dict[str, str]]]] = {}
    for body, pid, props in rows:
        by_partition.setdefault(pid, []).append((body, props))
    start = time.perf_counter()
    with EventHubProducerClient.from_connection_string(connection_string) as producer:
        for pid, items in by_partition.items():
            i = 0
            while i < len(items):
                batch = producer.create_batch(partition_id=pid)
                while i < len(items):
                    data = EventData(items[i][0])
                    data.properties = items[i][1]  # type: ignore[assignment]
                    try:
                        batch.add(data)
                    except ValueError:
                        break
                    i += 1
                producer.send_batch(batch)
    elapsed = time.perf_counter() - start
    if _total(connection_string) != before + len(rows):
        raise RuntimeError("spark-write bench: the hub did not get every event of the SDK producer")
    return len(rows) / elapsed


def run(args: Any = None) -> list[dict[str, Any]]:
    """The Spark write and the raw SDK producer over the same rows and hub; medians of alternating runs."""
    from rxhubs.spark import local_session

    events = sized(args, 200_000, 40_000, 2_000)
    repeat = sized(args, 3, 1, 1)
    spark = local_session(master="local[2]", app_name="rxhubs-bench-spark-write")
    spark.sparkContext.setLogLevel("ERROR")
    rows = _rows(events)
    df = spark.createDataFrame(rows, "body string, partitionId string, properties map<string,string>")
    df = df.repartition(2).persist()
    df.count()
    rates: dict[str, list[float]] = {"spark": [], "sdk": []}
    try:
        with emulator_process({HUB: PARTITIONS}) as conns:
            conn = conns[HUB]
            sent = 0
            if sized(args, True, True, False):  # warm-ups steady the figures; a smoke run needs no figures
                _spark(df, conn, sent, events)
                sent += events
                _sdk(rows, conn, sent)
                sent += events
            for _ in range(repeat):  # alternate, so drift on a noisy machine hits both alike
                rates["spark"].append(_spark(df, conn, sent, events))
                sent += events
                rates["sdk"].append(_sdk(rows, conn, sent))
                sent += events
    finally:
        df.unpersist()
    spark_rate, sdk_rate = statistics.median(rates["spark"]), statistics.median(rates["sdk"])
    extra: dict[str, Any] = {"partitions": PARTITIONS, "events": events, "spark_master": "local[2]", "spark_cores": 2,
                             "baseline_cores": 1, "load_average": [round(x, 2) for x in os.getloadavg()]}
    baseline = "azure-eventhub EventHubProducerClient, one process, batches per partition, same rows and hub"
    return [
        figure(SCENARIO, "events_per_s_written", "events/s", round(spark_rate), round(sdk_rate), baseline, None,
               **extra),
        # the target: per core (the Spark write uses two, the SDK producer one)
        figure(SCENARIO, "events_per_s_written_per_core", "events/s per core", round(spark_rate / 2),
               round(sdk_rate), baseline, ">= 3.0x", **extra),
    ]
