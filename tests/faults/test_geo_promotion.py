"""A geo-replication promotion (the emulator's ``promote``) loses and repeats nothing, in rxhubs and for the official
processor reading rxhubs' blobs afterwards.

Real parts: the emulator (the unmodified azure-eventhub client), Azurite with rxhubs' fenced BlobCheckpointStore,
the official ``EventHubConsumerClient`` with the official blob store, and KEDA's scaler as an oracle. What the
promotion does is in docs/emulator.md: connections closed, offsets of a new segment (strings), offsets of before
refused with ``com.microsoft:georeplication:invalid-offset``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from typing import Any

import pytest
from azure.storage.blob import BlobServiceClient

import rxhubs
from rxhubs import operators as hops
from rxhubs.stores import BlobCheckpointStore
from tests.operate.readers import official_first_events, send
from tests.support.keda import keda_lag

pytestmark = [pytest.mark.slow, pytest.mark.azurite, pytest.mark.timeout(240)]

GROUP = "$Default"
logging.getLogger("azure").setLevel(logging.CRITICAL)


async def _consume(conn: str, storage: str, container: str, *, until: Any, owner: str) -> list[tuple[str, int]]:
    """rxhubs consume -> record -> checkpoint (every batch) until ``until(seen, store)`` holds; what it processed."""
    hub = rxhubs.EventHub.from_connection_string(conn)
    seen: list[tuple[str, int]] = []
    stop = rxhubs.Shutdown()
    async with BlobCheckpointStore.from_connection_string(storage, container) as store:
        pipeline = rxhubs.consume(hub, GROUP, store, owner_id=owner, load_balancing_interval=0.5,
                                  ownership_expiration=5.0, max_wait=0.2).pipe(
            hops.process(lambda b: seen.extend((b.partition_id, e.sequence_number) for e in b.events)),
            hops.checkpoint(store, max_interval=0.0),
        )
        running = asyncio.ensure_future(rxhubs.arun(pipeline, shutdown=stop, signals=()))
        deadline = time.monotonic() + 60
        while not await until(seen, store) and time.monotonic() < deadline:  # noqa: ASYNC110 - polls the store
            await asyncio.sleep(0.1)
        stop.request()
        await asyncio.wait_for(running, 30)
    await hub.close()
    return seen


async def _checkpoints(store: BlobCheckpointStore, conn: str) -> dict[str, tuple[str | None, int]]:
    hub = rxhubs.EventHub.from_connection_string(conn)
    try:
        listed = await store.list_checkpoints(hub.fully_qualified_namespace, hub.eventhub_name, GROUP)
    finally:
        await hub.close()
    return {c.partition_id: (c.offset, c.sequence_number) for c in listed}


def _stored(storage: str, container: str, conn: str) -> dict[str, tuple[str | None, int]]:
    async def read() -> dict[str, tuple[str | None, int]]:
        async with BlobCheckpointStore.from_connection_string(storage, container) as store:
            return await _checkpoints(store, conn)

    return asyncio.run(read())


def test_a_restart_after_a_promotion_resumes_where_it_stopped_in_rxhubs_and_in_the_official_processor(
    emulator_factory: Any, azurite: Any, blob_container: str
) -> None:
    emulator = emulator_factory(hubs={"geo": 2})
    conn, storage = emulator.connection_string("geo"), azurite.connection_string
    send(conn, {"0": 10, "1": 10}, tag="before")

    async def all_twenty(seen: list[tuple[str, int]], _: Any) -> bool:
        return len(seen) >= 20

    first = asyncio.run(_consume(conn, storage, blob_container, until=all_twenty, owner="a"))
    assert sorted(first) == [(p, s) for p in "01" for s in range(10)]
    before = _stored(storage, blob_container, conn)
    assert {p: n for p, (_, n) in before.items()} == {"0": 9, "1": 9}
    assert all(str(offset).isdigit() for offset, _ in before.values())  # written in the old segment

    assert emulator.faults.promote()["segment"] == 1
    send(conn, {"0": 5}, tag="after")  # partition 1 stays idle after the promotion

    async def resumed(seen: list[tuple[str, int]], store: BlobCheckpointStore) -> bool:
        marks = await _checkpoints(store, conn)
        return len(seen) >= 5 and str(marks.get("1", ("", 0))[0]).startswith("1:1:")

    second = asyncio.run(_consume(conn, storage, blob_container, until=resumed, owner="b"))
    assert sorted(second) == [("0", s) for s in range(10, 15)]  # where it stopped: nothing lost, nothing again
    after = _stored(storage, blob_container, conn)
    assert after["0"][1] == 14 and str(after["0"][0]).startswith("1:0:")  # written from an event of the new segment
    assert after["1"][1] == 9 and str(after["1"][0]).startswith("1:1:")  # idle: its offset rewritten, same number

    send(conn, {"0": 3, "1": 3}, tag="official")
    keda = keda_lag(conn, storage, blob_container, GROUP)
    assert keda.per_partition == {"0": 3, "1": 3}  # KEDA reads our blobs: the backlog, nothing more
    # the official processor starts from our blobs' offsets: each resumes right after the checkpoint
    assert official_first_events(conn, storage, blob_container, GROUP, 2) == {"0": 15, "1": 10}


def test_a_promotion_while_consuming_loses_nothing_and_repeats_nothing(
    emulator_factory: Any, azurite: Any, blob_container: str
) -> None:
    emulator = emulator_factory(hubs={"geo": 2})
    conn, storage = emulator.connection_string("geo"), azurite.connection_string
    send(conn, {"0": 20, "1": 20}, tag="early")
    promoted: list[float] = []

    async def through_a_promotion(seen: list[tuple[str, int]], _: Any) -> bool:
        if len(seen) >= 40 and not promoted:
            promoted.append(time.monotonic())
            await asyncio.to_thread(emulator.faults.promote)
            await asyncio.to_thread(send, conn, {"0": 20, "1": 20}, "late")
        return len(seen) >= 80

    seen = asyncio.run(_consume(conn, storage, blob_container, until=through_a_promotion, owner="a"))
    assert promoted, "the promotion happened"
    counts = Counter(seen)
    assert sorted(counts) == [(p, s) for p in "01" for s in range(40)]  # nothing lost
    assert max(counts.values()) == 1  # nothing processed twice
    forced = [r for r in emulator.link_log if r.event == "detach" and r.condition == "amqp:connection:forced"]
    assert forced, "the promotion closed the consumer's connection"
    marks = _stored(storage, blob_container, conn)
    assert {p: n for p, (_, n) in marks.items()} == {"0": 39, "1": 39}
    assert all(str(offset).startswith(f"1:{p}:") for p, (offset, _) in marks.items())


def test_the_stores_keep_a_geo_replicated_offset_as_written(azurite: Any, blob_container: str) -> None:
    """Before, a checkpoint whose offset was not a number read back as malformed (absent): after a promotion every
    checkpoint would have been ignored, and the partitions read again from ``default_start``."""

    async def round_trip() -> rxhubs.Checkpoint:
        async with BlobCheckpointStore.from_connection_string(azurite.connection_string, blob_container) as store:
            await store.update_checkpoint(rxhubs.Checkpoint("ns.servicebus.windows.net", "geo", GROUP, "0",
                                                            "1:0:4096", 7))
            [listed] = await store.list_checkpoints("ns.servicebus.windows.net", "geo", GROUP)
            return listed

    assert asyncio.run(round_trip()).offset == "1:0:4096"
    blobs = BlobServiceClient.from_connection_string(azurite.connection_string).get_container_client(blob_container)
    [blob] = list(blobs.list_blobs(include=["metadata"]))
    assert blob.metadata == {"offset": "1:0:4096", "sequencenumber": "7"}  # the official layout


def test_checkpoints_reset_after_a_promotion_writes_offsets_the_official_processor_resumes_from(
    emulator_factory: Any, azurite: Any, blob_container: str
) -> None:
    from rxhubs.operate import reset_positions

    emulator = emulator_factory(hubs={"geo": 1})
    conn, storage = emulator.connection_string("geo"), azurite.connection_string
    send(conn, {"0": 10}, tag="before")

    async def all_ten(seen: list[tuple[str, int]], _: Any) -> bool:
        return len(seen) >= 10

    asyncio.run(_consume(conn, storage, blob_container, until=all_ten, owner="a"))
    assert _stored(storage, blob_container, conn)["0"][1] == 9
    emulator.faults.promote()

    async def back_three() -> Any:
        hub = rxhubs.EventHub.from_connection_string(conn)
        try:
            async with BlobCheckpointStore.from_connection_string(storage, blob_container) as store:
                return await reset_positions(hub, store, GROUP, shift_by=-3, execute=True)
        finally:
            await hub.close()

    asyncio.run(back_three())
    offset, number = _stored(storage, blob_container, conn)["0"]
    assert number == 6 and str(offset).startswith("1:0:"), (offset, number)  # the event's offset in the new segment
    assert official_first_events(conn, storage, blob_container, GROUP, 1) == {"0": 7}
