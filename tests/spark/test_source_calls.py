"""The source asks the hub only what it must: no management call per task, one at the start of a query.

A management call (partition ids, partition properties) costs about 0.4 s of waiting with the SDK. An executor's
task reads a range the driver planned from the hub's own partitions, so its receiver opens without asking for
them; an availableNow query's target and its initial offset come from one read of the partitions' properties,
the initial offset is worked out once, and the planning after the target needs no call while the hub's
partition ids are unchanged. Shown with the emulator refusing every management call (server busy): what must
not ask still works, and a call that does ask is refused (the fault is felt).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable

import rxhubs
from rxhubs.emulator import BackgroundEmulator
from rxhubs.spark._datasource import EventHubsDataSource
from rxhubs.spark._source import SequenceRange

pytestmark = pytest.mark.spark

HUB = "hub"
BUSY = 600.0  # longer than any test: cleared at the end


@pytest.fixture
def emulator(emulator_factory: Any) -> BackgroundEmulator:
    started: BackgroundEmulator = emulator_factory(hubs={HUB: 2})
    return started


def send(conn_str: str, per_partition: int) -> None:
    async def go() -> None:
        async with rxhubs.EventHub.from_connection_string(conn_str) as hub:
            for p in ("0", "1"):
                await hub.send([f"{p}-{i}" for i in range(per_partition)], partition_id=p)

    asyncio.run(go())


def management_refused(conn_str: str) -> bool:
    """Whether a partition-properties read fails or hangs now (the busy window is on)."""

    async def ask() -> bool:
        hub = rxhubs.EventHub.from_connection_string(conn_str)
        try:
            await asyncio.wait_for(hub.get_partition_properties("0"), 3.0)
        except Exception:
            return True
        finally:
            await hub.close()
        return False

    return asyncio.run(ask())


def test_a_task_reads_its_range_without_asking_for_the_partitions(emulator: BackgroundEmulator) -> None:
    conn_str = emulator.connection_string(HUB)
    send(conn_str, 6)
    reader = EventHubsDataSource({"connectionString": conn_str, "receiveTimeout": "20"}).streamReader(None)
    emulator.faults.server_busy(BUSY, on="management", hub=HUB)
    try:
        rows = [r for batch in reader.read(SequenceRange("1", 2, 5)) for r in batch.to_pylist()]
        refused = management_refused(conn_str)
    finally:
        emulator.faults.clear()
    assert [(r["partition"], r["sequenceNumber"], r["body"]) for r in rows] == [
        ("1", 2, b"1-2"), ("1", 3, b"1-3"), ("1", 4, b"1-4"),
    ]
    assert refused  # the window was on: a call that asks the hub failed


def test_availablenow_plans_up_to_its_target_without_asking_again(emulator: BackgroundEmulator) -> None:
    conn_str = emulator.connection_string(HUB)
    send(conn_str, 4)
    reader = EventHubsDataSource({"connectionString": conn_str, "startingPosition": "earliest"}).streamReader(None)
    try:
        reader.prepareForTriggerAvailableNow()  # Spark's order: the target, then the initial offset
        emulator.faults.server_busy(BUSY, on="management", hub=HUB)
        try:
            start = reader.initialOffset()  # from the properties the target was just fixed with
            end = reader.latestOffset(start, ReadAllAvailable())
            assert reader.initialOffset() == start  # asked again when the first batch is planned
            assert reader.latestOffset(end, ReadAllAvailable()) == end  # done: nothing more to plan
            refused = management_refused(conn_str)
        finally:
            emulator.faults.clear()
        assert start == {"0": 0, "1": 0} and end == {"0": 4, "1": 4}
        assert refused
        send(conn_str, 3)  # after the target was fixed: left for a later query
        assert reader.latestOffset(end, ReadAllAvailable()) == end
    finally:
        reader.stop()
    # without a target (another trigger), every plan asks the hub: the events sent since are seen
    other = EventHubsDataSource({"connectionString": conn_str}).streamReader(None)
    try:
        assert other.latestOffset({"0": 0, "1": 0}, ReadAllAvailable()) == {"0": 7, "1": 7}
    finally:
        other.stop()


def test_the_initial_offset_does_not_move_once_given(emulator: BackgroundEmulator) -> None:
    conn_str = emulator.connection_string(HUB)
    send(conn_str, 2)
    reader = EventHubsDataSource({"connectionString": conn_str}).streamReader(None)  # starts at latest
    try:
        first = reader.initialOffset()
        send(conn_str, 3)  # between Spark's two questions: read by the query, not skipped by a moved start
        assert reader.initialOffset() == first == {"0": 2, "1": 2}
        assert reader.latestOffset(first, ReadAllAvailable()) == {"0": 5, "1": 5}
    finally:
        reader.stop()
