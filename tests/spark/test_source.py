"""The ``eventhubs`` Structured Streaming source against the emulator and a real local SparkSession.

Reads everything into Parquet with availableNow (same rows as the sink's schema), resumes after a restart
without loss or duplicates, bounds micro-batches by ``maxEventsPerTrigger``, starts after and writes back
rxhubs checkpoints, and survives kill -9 of the driver between the offsets log and the commits log (Spark
replays the logged ranges; the Parquet sink holds every event once). Planning helpers are tested without
Spark jobs.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import pickle
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows

import rxhubs
import rxhubs.spark
from rxhubs import Checkpoint
from rxhubs.emulator import BackgroundEmulator
from rxhubs.errors import ConfigurationError, RxHubsError
from rxhubs.spark._datasource import EventHubsDataSource
from rxhubs.spark._source import EventHubsStreamReader, SequenceRange, split, spread
from rxhubs.stores import SqliteCheckpointStore

pytestmark = pytest.mark.spark

HUB = "hub"
SECRET = "c2VjcmV0LWtleS1mb3ItdGVzdHM="
FAKE = f"Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=root;SharedAccessKey={SECRET};EntityPath=h"


# -- helpers ---------------------------------------------------------------------------------------------------


@pytest.fixture
def emulator(emulator_factory: Any) -> BackgroundEmulator:
    started: BackgroundEmulator = emulator_factory(hubs={HUB: 2})
    return started


@pytest.fixture
def source_spark(spark: Any) -> Iterator[Any]:
    rxhubs.spark.register_source(spark)
    yield spark
    for query in spark.streams.active:
        query.stop()


def send(conn_str: str, per_partition: int, tag: str) -> None:
    async def go() -> None:
        async with rxhubs.EventHub.from_connection_string(conn_str) as hub:
            for p in ("0", "1"):
                bodies = [f"{tag}-{p}-{i}" for i in range(per_partition)]
                await hub.send(bodies, partition_id=p, properties={"tag": tag, "n": 7})

    asyncio.run(go())


def run_query(spark: Any, conn_str: str, tmp: Path, **options: str) -> Any:
    """One availableNow query into ``tmp/out`` with its checkpoint in ``tmp/chk``; returns it, finished."""
    reader = spark.readStream.format("eventhubs").option("connectionString", conn_str)
    reader = reader.option("startingPosition", "earliest")
    for key, value in options.items():
        reader = reader.option(key, value)
    query = (
        reader.load()
        .writeStream.format("parquet")
        .option("checkpointLocation", str(tmp / "chk"))
        .trigger(availableNow=True)
        .start(str(tmp / "out"))
    )
    query.awaitTermination(100)
    assert not query.isActive, "the availableNow query did not finish"
    assert query.exception() is None
    return query


def written(spark: Any, tmp: Path) -> list[tuple[str, int, bytes]]:
    rows = spark.read.parquet(str(tmp / "out")).select("partition", "sequenceNumber", "body").collect()
    return sorted((r.partition, r.sequenceNumber, bytes(r.body)) for r in rows)


def expected(*sends: tuple[str, int]) -> list[tuple[str, int, bytes]]:
    """The rows of ``send(tag, n)`` calls in order: sequence numbers run on across sends in each partition."""
    out = []
    for p in ("0", "1"):
        seq = 0
        for tag, per_partition in sends:
            for i in range(per_partition):
                out.append((p, seq, f"{tag}-{p}-{i}".encode()))
                seq += 1
    return sorted(out)


def batch_sizes(query: Any) -> list[int]:
    return [int(p["numInputRows"]) for p in query.recentProgress if int(p["numInputRows"]) > 0]


# -- planning, without Spark jobs ------------------------------------------------------------------------------


def test_spread_shares_the_limit_fairly_and_never_exceeds_it() -> None:
    assert spread({"0": 0, "1": 0}, {"0": 100, "1": 3}, 10) == {"0": 7, "1": 3}
    assert spread({"0": 5, "1": 5}, {"0": 105, "1": 105}, 50) == {"0": 30, "1": 30}
    assert spread({"0": 0, "1": 0, "2": 0}, {"0": 10, "1": 10, "2": 10}, 2) == {"0": 1, "1": 1, "2": 0}
    assert spread({"0": 0}, {"0": 4}, 100) == {"0": 4}
    for limit in range(1, 40):
        end = spread({"0": 3, "1": 0, "2": 9}, {"0": 20, "1": 2, "2": 30}, limit)
        assert sum(end.values()) - 12 == min(limit, 17 + 2 + 21)
        assert end["0"] <= 20 and end["1"] <= 2 and end["2"] <= 30


def test_partitions_are_one_range_per_partition_with_data() -> None:
    reader = EventHubsDataSource({"connectionString": FAKE}).streamReader(None)
    ranges = reader.partitions({"0": 5, "1": 7, "10": 0}, {"0": 9, "1": 7, "10": 3, "2": 4})
    assert [(r.partition, r.start, r.end) for r in ranges] == [("0", 5, 9), ("10", 0, 3)]


def test_min_partitions_cuts_ranges_into_contiguous_pieces_that_cover_them_once() -> None:
    ranges = [SequenceRange("0", 5, 105), SequenceRange("1", 0, 3), SequenceRange("2", 7, 8)]
    assert split(ranges, None) == ranges and split(ranges, 3) == ranges
    for wanted, count in ((4, 6), (8, 6), (50, 6), (500, 8)):  # in proportion; at most 4 per partition
        pieces = split(ranges, wanted)
        assert len(pieces) == count
        for r in ranges:
            mine = [(p.start, p.end) for p in pieces if p.partition == r.partition]
            assert mine[0][0] == r.start and mine[-1][1] == r.end
            assert all(a < b for a, b in mine) and all(x[1] == y[0] for x, y in itertools.pairwise(mine))
    reader = EventHubsDataSource({"connectionString": FAKE, "minPartitions": "4"}).streamReader(None)
    assert [(r.partition, r.start, r.end) for r in reader.partitions({"0": 0, "1": 0}, {"0": 30, "1": 10})] == [
        ("0", 0, 10),
        ("0", 10, 20),
        ("0", 20, 30),
        ("1", 0, 10),
    ]


def test_options_are_checked_and_the_key_never_shows() -> None:
    source = EventHubsDataSource({"connectionString": FAKE, "maxEventsPerTrigger": "500"})
    reader = source.streamReader(None)
    assert reader.getDefaultReadLimit() == ReadMaxRows(500)
    assert EventHubsDataSource({"connectionString": FAKE}).streamReader(None).getDefaultReadLimit() == (
        ReadAllAvailable()
    )
    shipped = pickle.loads(pickle.dumps(reader))  # what executors get: options only, no loop or connection
    assert isinstance(shipped, EventHubsStreamReader)
    for text in (repr(reader), repr(shipped), repr(source), repr(shipped._options)):
        assert SECRET not in text
    with pytest.raises(RxHubsError) as leaked:  # a third-party error quoting the string is replaced
        reader._options.check_secret(ValueError(f"cannot use {FAKE}"))
    assert SECRET not in str(leaked.value) and "ValueError" in str(leaked.value)
    reader._options.check_secret(ValueError("nothing secret"))  # others pass through
    bad: list[dict[str, str]] = [
        {},
        {"connectionString": FAKE, "maxEventsPerTrigger": "0"},
        {"connectionString": FAKE, "startingPosition": "sometime"},
        {"connectionString": FAKE, "startingPosition": '{"0": -5}'},
        {"connectionString": FAKE, "receiveTimeout": "soon"},
        {"connectionString": FAKE, "startingOffsets": "earliest"},
        {"connectionString": FAKE.replace("SharedAccessKey=", "SharedAcessKey=")},
    ]
    for options in bad:
        with pytest.raises(ConfigurationError) as info:
            EventHubsDataSource(options).streamReader(None)
        assert SECRET not in str(info.value)


def test_offsets_follow_the_options_against_the_emulator(emulator: BackgroundEmulator, tmp_path: Path) -> None:
    conn_str = emulator.connection_string(HUB)
    send(conn_str, 10, "a")

    def reader(**options: str) -> EventHubsStreamReader:
        return EventHubsDataSource({"connectionString": conn_str, **options}).streamReader(None)

    latest = reader()
    assert latest.initialOffset() == {"0": 10, "1": 10}  # default: latest, like the connector
    assert reader(startingPosition="earliest").initialOffset() == {"0": 0, "1": 0}
    assert reader(startingPosition='{"0": 4, "1": "latest"}').initialOffset() == {"0": 4, "1": 10}
    assert reader(startingPosition='{"1": 99}').initialOffset() == {"0": 0, "1": 10}  # clamped; "0" earliest
    assert latest.latestOffset({"0": 2, "1": 9}, ReadMaxRows(4)) == {"0": 5, "1": 10}
    assert latest.latestOffset({"0": 2, "1": 9}, ReadMinRows(100)) == {"0": 2, "1": 9}
    assert latest.latestOffset({"0": 2}, ReadAllAvailable()) == {"0": 10, "1": 0}  # "1" enters at its start
    latest.prepareForTriggerAvailableNow()
    send(conn_str, 5, "b")
    assert latest.latestOffset({"0": 0, "1": 0}, ReadAllAvailable()) == {"0": 10, "1": 10}  # the fixed target
    latest.stop()
    rows = [r for batch in latest.read(SequenceRange("1", 8, 12)) for r in batch.to_pylist()]
    assert [(r["partition"], r["sequenceNumber"], r["body"]) for r in rows] == [
        ("1", 8, b"a-1-8"),
        ("1", 9, b"a-1-9"),
        ("1", 10, b"b-1-0"),
        ("1", 11, b"b-1-1"),
    ]
    assert rows[0]["properties"] == [("tag", "a"), ("n", "7")]
    assert rows[0]["eventHubName"] == HUB and rows[0]["consumerGroup"] == "$Default"

    store_url = f"sqlite:///{tmp_path / 'cp.sqlite'}"
    store = SqliteCheckpointStore(str(tmp_path / "cp.sqlite"))

    async def seed() -> None:
        await store.update_checkpoint(Checkpoint(emulator_ns(conn_str), HUB, "$Default", "0", None, 6))
        await store.close()

    asyncio.run(seed())
    resumed = reader(checkpointStore=store_url, startingPosition="earliest")
    assert resumed.initialOffset() == {"0": 7, "1": 0}  # after the checkpoint; "1" has none: earliest
    resumed.commit({"0": 12, "1": 3})
    resumed.stop()

    async def stored() -> dict[str, int]:
        async with SqliteCheckpointStore(str(tmp_path / "cp.sqlite")) as again:
            cps = await again.list_checkpoints(emulator_ns(conn_str), HUB, "$Default")
        return {cp.partition_id: cp.sequence_number for cp in cps}

    assert asyncio.run(stored()) == {"0": 11, "1": 2}


def test_a_range_the_hub_cannot_fill_fails_after_receive_timeout(emulator: BackgroundEmulator) -> None:
    conn_str = emulator.connection_string(HUB)
    send(conn_str, 3, "t")
    source = EventHubsDataSource({"connectionString": conn_str, "receiveTimeout": "0.5"})
    reader = pickle.loads(pickle.dumps(source.streamReader(None)))
    batches = reader.read(SequenceRange("0", 1, 5))  # events 1 and 2 exist; 3 and 4 never come
    with pytest.raises(RxHubsError, match=r"partition '0' of 'hub': no event for 0.5 s at sequence number 3"):
        list(batches)


def emulator_ns(conn_str: str) -> str:
    return rxhubs.EventHub.from_connection_string(conn_str).fully_qualified_namespace


# -- queries ---------------------------------------------------------------------------------------------------


@pytest.mark.timeout(300)  # a hang bound; it counts the session start when first of the lane (71 s at load 13)
def test_reads_everything_sent_then_resumes_without_loss_or_duplicates(
    source_spark: Any, emulator: BackgroundEmulator, tmp_path: Path
) -> None:
    conn_str = emulator.connection_string(HUB)
    send(conn_str, 150, "first")
    run_query(source_spark, conn_str, tmp_path, minPartitions="5")  # 2 ranges cut into 4 or more tasks
    assert written(source_spark, tmp_path) == expected(("first", 150))
    df = source_spark.read.parquet(str(tmp_path / "out"))
    assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields] == [
        (name, type_.replace("long", "bigint")) for name, type_ in rxhubs.spark.COLUMNS
    ]

    send(conn_str, 40, "second")
    query = run_query(source_spark, conn_str, tmp_path)
    assert sum(batch_sizes(query)) == 80  # only the new events were read
    assert written(source_spark, tmp_path) == expected(("first", 150), ("second", 40))  # 380, each once


@pytest.mark.timeout(300)  # a hang bound; it counts the session start when first of the lane (71 s at load 13)
def test_max_events_per_trigger_bounds_the_micro_batches_and_the_store_lags_one_batch(
    source_spark: Any, emulator: BackgroundEmulator, tmp_path: Path
) -> None:
    conn_str = emulator.connection_string(HUB)
    send(conn_str, 60, "m")
    store = tmp_path / "cp.sqlite"
    query = run_query(source_spark, conn_str, tmp_path, maxEventsPerTrigger="50", checkpointStore=f"sqlite:///{store}")
    assert batch_sizes(query) == [50, 50, 20]  # ends {25, 25}, {50, 50}, {60, 60}: shared fairly
    rows = written(source_spark, tmp_path)
    assert len(rows) == len(set(rows)) == 120

    async def stored() -> dict[str, int]:
        async with SqliteCheckpointStore(str(store)) as again:
            cps = await again.list_checkpoints(emulator_ns(conn_str), HUB, "$Default")
        return {cp.partition_id: cp.sequence_number for cp in cps}

    # Spark commits a batch's end when it plans the next one: the store lags one batch (49, not 59).
    assert asyncio.run(stored()) == {"0": 49, "1": 49}


@pytest.mark.timeout(300)  # a hang bound; it counts the session start when first of the lane (71 s at load 13)
def test_kill_9_between_offsets_and_commit_replays_the_same_ranges(
    source_spark: Any, emulator: BackgroundEmulator, tmp_path: Path
) -> None:
    conn_str = emulator.connection_string(HUB)
    send(conn_str, 300, "k")
    offsets, commits = tmp_path / "chk" / "offsets", tmp_path / "chk" / "commits"
    driver = Path(__file__).with_name("_source_driver.py")
    env = {**os.environ, "RXHUBS_TEST_CONNECTION_STRING": conn_str}
    proc = subprocess.Popen(
        [sys.executable, str(driver), str(tmp_path / "chk"), str(tmp_path / "out"), "200"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its own process group: the driver JVM dies with it
    )
    killed: str | None = None
    try:
        while proc.poll() is None:
            logged = {f.name for f in offsets.glob("[0-9]*")} if offsets.exists() else set()
            done = {f.name for f in commits.glob("[0-9]*")} if commits.exists() else set()
            pending = sorted(logged - done, key=int)
            if pending and (offsets / pending[0]).stat().st_size > 0:
                killed = pending[0]
                os.killpg(proc.pid, signal.SIGKILL)
                break
            time.sleep(0.02)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
    assert killed is not None, "the driver finished before it could be killed between offsets and commit"
    logged_range = (offsets / killed).read_text()
    assert not (commits / killed).exists()

    run_query(source_spark, conn_str, tmp_path, maxEventsPerTrigger="200")
    assert (offsets / killed).read_text() == logged_range  # the same range, replayed
    assert (commits / killed).exists()
    rows = written(source_spark, tmp_path)
    assert rows == expected(("k", 300))
    ranges = json.loads(logged_range.splitlines()[-1])
    assert sum(ranges.values()) > 0
