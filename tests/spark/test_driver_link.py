"""The source's driver makes a query's management calls over one kept link (``rxhubs/transport/_management_link.py``).

Through the SDK each call opens a connection of its own and waits for it in 50 ms polls (about 0.4 s); the driver's
hub keeps one management link for the query instead. What the link cannot answer goes to the SDK's call: with the
emulator refusing management requests (server busy), the driver's call fails as it did without the link.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable

import rxhubs
from rxhubs.emulator import BackgroundEmulator
from rxhubs.errors import RxHubsError
from rxhubs.spark._datasource import EventHubsDataSource

pytestmark = pytest.mark.spark

HUB = "hub"


def test_a_query_s_management_calls_share_one_link_and_what_it_cannot_answer_fails_as_before(
    emulator_factory: Any,
) -> None:
    emulator: BackgroundEmulator = emulator_factory(hubs={HUB: 2})
    conn_str = emulator.connection_string(HUB)

    async def send() -> None:
        async with rxhubs.EventHub.from_connection_string(conn_str) as hub:
            await hub.send([b"a", b"b", b"c"], partition_id="1")

    asyncio.run(send())
    reader = EventHubsDataSource({"connectionString": conn_str, "startingPosition": "earliest"}).streamReader(None)
    try:
        start = reader.initialOffset()  # the partition ids, then both partitions' properties
        assert reader.latestOffset(start, ReadAllAvailable()) == {"0": 0, "1": 3}  # (not availableNow: asks again)
        link = reader._hub._management_link if reader._hub is not None else None
        assert link is not None and (link.opened, link.requests) == (1, 5)  # five calls, one link

        emulator.faults.server_busy(600.0, on="management", hub=HUB)
        try:
            with pytest.raises(RxHubsError):
                reader.latestOffset(start, ReadAllAvailable())  # the link hands the refusal to the SDK's call
            loop = reader._loop
            assert loop is not None  # every partition's call has ended with the one that failed: none left behind
            assert [t for t in asyncio.all_tasks(loop) if not t.done()] == []
        finally:
            emulator.faults.clear()
        assert link.requests == 5
        assert reader.latestOffset(start, ReadAllAvailable()) == {"0": 0, "1": 3}  # and the next call is answered
    finally:
        reader.stop()
