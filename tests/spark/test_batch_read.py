"""Batch reads (``spark.read.format("eventhubs")``): ends fixed at planning, the connector's positions, ranges.

Planning runs against the emulator without Spark jobs (the reader's own ``partitions()`` and ``read()``, as
Spark's planning worker and executors call them); one query runs through a real local SparkSession.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import pickle
from itertools import pairwise
from typing import Any

import pytest

import rxhubs
from rxhubs.emulator import BackgroundEmulator
from rxhubs.errors import ConfigurationError
from rxhubs.spark._batch import EventHubsBatchReader, parse_ending
from rxhubs.spark._datasource import EventHubsDataSource
from rxhubs.spark._ranges import SequenceRange

pytestmark = pytest.mark.spark

HUB = "hub"
SECRET = "c2VjcmV0LWtleS1mb3ItdGVzdHM="
FAKE = f"Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=root;SharedAccessKey={SECRET};EntityPath=h"


def position(offset: str | None = None, seq: int = -1, inclusive: bool = True, time: str | None = None) -> str:
    return json.dumps({"offset": offset, "seqNo": seq, "enqueuedTime": time, "isInclusive": inclusive})


@pytest.fixture
def emulator(emulator_factory: Any) -> BackgroundEmulator:
    started: BackgroundEmulator = emulator_factory(hubs={HUB: 2})
    return started


def send(conn_str: str, per_partition: int, tag: str) -> None:
    async def go() -> None:
        async with rxhubs.EventHub.from_connection_string(conn_str) as hub:
            for p in ("0", "1"):
                await hub.send([f"{tag}-{p}-{i}" for i in range(per_partition)], partition_id=p)

    asyncio.run(go())


def ranges(conn_str: str, **options: str) -> list[tuple[str, int, int]]:
    reader = EventHubsDataSource({"connectionString": conn_str, **options}).reader(None)
    return [(r.partition, r.start, r.end) for r in reader.partitions()]


def test_ending_positions_mean_the_first_event_not_read() -> None:
    assert parse_ending({}, "h") == ("latest", {})
    assert parse_ending({"endingposition": "earliest"}, "h") == ("earliest", {})
    assert parse_ending({"endingposition": '{"0": 7, "1": "latest"}'}, "h") == ("latest", {"0": 7, "1": "latest"})
    # the connector's: a seqNo is the range's exclusive end whatever isInclusive says (EventHubsClient.translate)
    assert parse_ending({"eventhubs.endingposition": position(seq=9)}, "h") == (9, {})
    assert parse_ending({"eventhubs.endingposition": position(seq=9, inclusive=False)}, "h") == (9, {})
    assert parse_ending({"eventhubs.endingposition": position(offset="@latest")}, "h") == ("latest", {})
    per = parse_ending({"eventhubs.endingpositions": json.dumps({json.dumps({"ehName": "h", "partitionId": 1}):
                                                                 json.loads(position(seq=4))})}, "h")
    assert per == ("latest", {"1": 4})
    timed = parse_ending({"eventhubs.endingposition": position(time="2026-03-01T12:00:00Z")}, "h")[0]
    # translated as a start would be: the first event at that time is the first one not read
    assert isinstance(timed, rxhubs.Position) and timed.inclusive is True


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        ({"startingPosition": '{"0": 9}', "endingPosition": '{"0": 4}'}, "before the starting position"),
        ({"endingPosition": "tomorrow"}, "endingPosition must be"),
        ({"endingPosition": "latest", "eventhubs.endingPosition": position(seq=3)}, "not both"),
        ({"eventhubs.endingPosition": position(seq=3, time="2026-01-01T00:00:00Z")}, "not seqNo and enqueuedTime"),
        ({"credential": "password"}, "connectionString or fullyQualifiedNamespace"),
    ],
)
def test_bad_batch_options_fail_at_planning_with_one_line(options: dict[str, str], fragment: str) -> None:
    with pytest.raises(ConfigurationError, match=fragment) as info:
        EventHubsDataSource({"connectionString": FAKE, **options}).reader(None)
    assert "\n" not in str(info.value) and SECRET not in str(info.value)


def test_the_end_is_fixed_when_planned_and_positions_translate(emulator: BackgroundEmulator) -> None:
    conn_str = emulator.connection_string(HUB)
    send(conn_str, 10, "a")
    assert ranges(conn_str) == [("0", 0, 10), ("1", 0, 10)]  # default: earliest to latest
    reader = EventHubsDataSource({"connectionString": conn_str}).reader(None)
    planned = reader.partitions()
    send(conn_str, 5, "b")  # after planning: not read
    shipped = pickle.loads(pickle.dumps(reader))  # what executors get
    rows = [r for part in planned for batch in shipped.read(part) for r in batch.to_pylist()]
    assert sorted((r["partition"], r["sequenceNumber"]) for r in rows) == [(p, i) for p in "01" for i in range(10)]
    assert ranges(conn_str, startingPosition='{"0": 3, "1": "latest"}', endingPosition='{"0": 8}') == [("0", 3, 8)]
    assert ranges(conn_str, endingPosition="earliest") == []
    assert ranges(conn_str, minPartitions="4") == [("0", 0, 7), ("0", 7, 15), ("1", 0, 7), ("1", 7, 15)]
    # the connector's names and JSON: sequence numbers, offsets and enqueued times
    assert ranges(conn_str, **{"eventhubs.startingPosition": position(seq=2),
                               "eventhubs.endingPosition": position(seq=4)}) == [("0", 2, 4), ("1", 2, 4)]
    offsets = {r["sequenceNumber"]: r["offset"] for r in rows if r["partition"] == "0"}
    at_6 = json.dumps({"0": json.loads(position(offset=offsets[6]))})  # a read starting there begins at 6
    assert ranges(conn_str, **{"eventhubs.endingPositions": at_6})[0] == ("0", 0, 6)
    after_6 = json.dumps({"0": json.loads(position(offset=offsets[6], inclusive=False))})  # ... at 7
    assert ranges(conn_str, **{"eventhubs.endingPositions": after_6})[0] == ("0", 0, 7)
    times = {r["sequenceNumber"]: r["enqueuedTime"] for r in rows if r["partition"] == "1"}
    after = (times[9] + dt.timedelta(milliseconds=1)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    assert ranges(conn_str, **{"eventhubs.startingPositions": json.dumps({"1": json.loads(position(time=after))}),
                               "eventhubs.startingPosition": position(offset="@latest")}) == [("1", 10, 15)]
    with pytest.raises(ConfigurationError, match=r"partition '0' of 'hub': the ending position \(sequence number 1\) "
                                                 r"is before the starting position \(5\)"):
        ranges(conn_str, startingPosition='{"0": 5}', **{"eventhubs.endingPosition": position(seq=1)})


def read_all(conn_str: str, **options: str) -> list[tuple[str, int]]:
    reader = EventHubsDataSource({"connectionString": conn_str, **options}).reader(None)
    planned = reader.partitions()
    return [(r["partition"], r["sequenceNumber"]) for part in planned for b in reader.read(part) for r in b.to_pylist()]


def test_consecutive_backfills_in_the_connectors_json_read_each_event_once(emulator: BackgroundEmulator) -> None:
    """A migration from the Scala connector: each backfill starts at the seqNo where the one before ended."""
    conn_str = emulator.connection_string(HUB)
    send(conn_str, 12, "a")
    bounds = [0, 4, 8, 12]
    read: list[tuple[str, int]] = []
    for start, end in pairwise(bounds):
        got = read_all(conn_str, **{"eventhubs.startingPosition": position(seq=start),
                                    "eventhubs.endingPosition": position(seq=end)})
        # [start, end), as the connector reads it: the event at the ending seqNo is the next backfill's first
        assert sorted(got) == [(p, i) for p in "01" for i in range(start, end)], (start, end, sorted(got))
        read += got
    assert sorted(read) == [(p, i) for p in "01" for i in range(12)]  # every event once, no boundary event twice


def test_an_empty_plan_reads_nothing() -> None:
    reader = EventHubsBatchReader({"connectionString": FAKE})
    from pyspark.sql.datasource import InputPartition

    assert list(reader.read(InputPartition(None))) == []  # Spark's placeholder when no range has events
    assert repr(SequenceRange("0", 1, 2)) == "SequenceRange(partition='0', start=1, end=2)"


def test_events_lost_to_retention_fail_the_task_unless_fail_on_data_loss_is_false(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The emulator keeps every event (it has no retention), so the check is driven with the first sequence
    # number a receiver returned, as read_range() calls it.
    from rxhubs.spark._read import DataLossError, check_loss
    from rxhubs.spark._source_options import _Options

    strict = _Options({"connectionString": FAKE})
    assert strict.fail_on_data_loss  # the default, as in Spark's Kafka source
    check_loss(strict, SequenceRange("0", 10, 20), 10)  # nothing lost: nothing said
    with pytest.raises(DataLossError, match=r"events 10\.\.14 of partition '0' of 'h' were removed by retention"):
        check_loss(strict, SequenceRange("0", 10, 20), 15)
    lenient = _Options({"connectionString": FAKE, "failOnDataLoss": "false"})
    with caplog.at_level("WARNING", logger="rxhubs.spark.source"):
        check_loss(lenient, SequenceRange("0", 10, 20), 25)  # the whole range is gone
    assert [r.getMessage() for r in caplog.records] == [
        "events 10..19 of partition '0' of 'h' were removed by retention before this query read them; "
        "skipped (failOnDataLoss=false)"
    ]
    with pytest.raises(ConfigurationError, match="failOnDataLoss must be true or false"):
        _Options({"connectionString": FAKE, "failOnDataLoss": "sometimes"})
