"""Malformed ownership and checkpoint records in the store (SQLite rows, blobs): consumers keep working.

A first consumer reads everything, checkpoints and stops. Then its records are damaged the way a buggy tool
or a hand edit would: an ownership record without a usable owner or time (must count as unowned and be
claimable at once, not block the partition until some expiry), a stray record for no partition, checkpoints
with a non-numeric sequence number or offset (skipped: the partition starts at ``default_start``). A second
consumer then reads on: every event sent arrives; the only events read twice are those of the partitions
whose checkpoint was unreadable (read again from the start, as ``default_start=earliest`` says).
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rxhubs.stores import BlobCheckpointStore, SqliteCheckpointStore
from tests.faults.kit import PARTITIONS, Consumer, Producer, account, live_owners, seen, wait_until

BAD_CHECKPOINTS = {"2", "3"}


def corrupt_sqlite(path: Path) -> None:
    with sqlite3.connect(path) as db:
        now = time.time()
        db.execute("UPDATE rxhubs_ownership SET owner_id = X'00FF', last_modified_time = ? WHERE partition_id = '0'",
                   (now,))
        db.execute("UPDATE rxhubs_ownership SET owner_id = 'ghost', last_modified_time = 'garbage' "
                   "WHERE partition_id = '1'")
        key = db.execute("SELECT fully_qualified_namespace, eventhub_name, consumer_group FROM rxhubs_ownership "
                         "WHERE partition_id = '0'").fetchone()
        db.execute("INSERT INTO rxhubs_ownership VALUES (?, ?, ?, '', 'ghost', ?, 'x', NULL)", (*key, now))
        db.execute("UPDATE rxhubs_checkpoint SET sequence_number = 'abc' WHERE partition_id = '2'")
        db.execute("UPDATE rxhubs_checkpoint SET \"offset\" = X'01', sequence_number = NULL WHERE partition_id = '3'")
        assert db.total_changes >= 5


def corrupt_blobs(connection_string: str, container: str) -> None:
    from azure.storage.blob import ContainerClient

    with ContainerClient.from_connection_string(connection_string, container) as client:
        names = [b.name for b in client.list_blobs()]
        ownership = {n.rsplit("/", 1)[1]: n for n in names if "/ownership/" in n}
        checkpoint = {n.rsplit("/", 1)[1]: n for n in names if "/checkpoint/" in n}
        client.get_blob_client(ownership["0"]).set_blob_metadata({"owner": "not-the-right-key"})
        client.get_blob_client(ownership["1"]).set_blob_metadata({})
        prefix = ownership["0"].rsplit("/", 1)[0]
        client.upload_blob(f"{prefix}/not-a-partition", b"junk", metadata={"ownerid": "ghost"})
        client.get_blob_client(checkpoint["2"]).set_blob_metadata({"offset": "12", "sequencenumber": "abc"})
        client.get_blob_client(checkpoint["3"]).set_blob_metadata({"offset": "x-y", "sequencenumber": ""})


def _scenario(conn: str, store: Callable[[], Any], corrupt: Callable[[], None]) -> None:
    first, second = Producer(conn), Producer(conn)
    a = Consumer("a", conn, store)
    b = Consumer("b", conn, store)
    try:
        a.start_and_wait()
        first.start()
        time.sleep(2.0)
        first.stop.set()
        first.join(timeout=30)
        assert first.error is None, first.error
        before = {(pid, seq) for pid, n in first.sent.items() for seq in range(n)}
        assert wait_until(lambda: before <= seen([a]), 20)
        a.stop()  # checkpoints flushed, ownership released
        corrupt()
        b.start_and_wait()
        second.start()
        # the damaged records count as unowned: b holds every partition
        assert wait_until(lambda: sorted(live_owners(conn, store).values()) == ["b"] * PARTITIONS, 15), (
            live_owners(conn, store), b.errors, b.outcome
        )
        time.sleep(2.0)
        second.stop.set()
        second.join(timeout=30)
        assert second.error is None, second.error
        total = {pid: first.sent[pid] + second.sent[pid] for pid in map(str, range(PARTITIONS))}
        expected = {(pid, seq) for pid, n in total.items() for seq in range(n)}
        assert wait_until(lambda: expected <= seen([a, b]), 30), len(expected - seen([a, b]))
        b.stop()
    finally:
        first.stop.set()
        second.stop.set()
        for consumer in (a, b):
            if consumer.is_alive():
                consumer.stop()
    for consumer in (a, b):
        assert consumer.outcome is None, consumer.outcome
    assert b.errors == []
    duplicates = account(expected, [a, b])
    # read twice: only events a had read on the partitions whose checkpoint was unreadable
    assert {pid for pid, _ in duplicates} == BAD_CHECKPOINTS, sorted(duplicates)[:10]
    assert set(duplicates) <= before
    assert set(duplicates.values()) <= {1}


@pytest.mark.slow
def test_corrupt_sqlite_rows_are_unowned_or_skipped_nothing_lost(tmp_path: Path, emulator_factory: Any) -> None:
    emulator = emulator_factory(hubs={"corrupt": PARTITIONS})
    path = tmp_path / "cp.sqlite"
    _scenario(emulator.connection_string("corrupt"), lambda: SqliteCheckpointStore(path), lambda: corrupt_sqlite(path))


@pytest.mark.slow
@pytest.mark.azurite
def test_corrupt_ownership_and_checkpoint_blobs_are_unowned_or_skipped_nothing_lost(
    emulator_factory: Any, azurite: Any, blob_container: str
) -> None:
    emulator = emulator_factory(hubs={"corrupt": PARTITIONS})

    def store() -> BlobCheckpointStore:
        return BlobCheckpointStore.from_connection_string(azurite.connection_string, blob_container)

    _scenario(
        emulator.connection_string("corrupt"), store, lambda: corrupt_blobs(azurite.connection_string, blob_container)
    )


def test_stores_report_damaged_records_as_released_and_skip_bad_checkpoints(tmp_path: Path) -> None:
    """The store level of the same damage, without a hub: what the balancing loop is given."""
    from rxhubs import Checkpoint, Ownership

    path = tmp_path / "cp.sqlite"

    async def fill() -> None:
        store = SqliteCheckpointStore(path)
        await store.claim_ownership([Ownership("ns", "hub", "$default", p, "a") for p in map(str, range(4))])
        for p in map(str, range(4)):
            await store.update_checkpoint(Checkpoint("ns", "hub", "$default", p, "10", 10))
        await store.close()

    async def read() -> tuple[list[Ownership], list[Checkpoint]]:
        store = SqliteCheckpointStore(path)
        try:
            return (await store.list_ownership("ns", "hub", "$default"),
                    await store.list_checkpoints("ns", "hub", "$default"))
        finally:
            await store.close()

    asyncio.run(fill())
    corrupt_sqlite(path)
    ownership, checkpoints = asyncio.run(read())
    by_partition = {o.partition_id: o for o in ownership}
    assert set(by_partition) == {"0", "1", "2", "3"}  # the row without a partition id is left out
    assert by_partition["0"].is_released and by_partition["1"].is_released
    assert by_partition["2"].owner_id == "a"
    assert {c.partition_id for c in checkpoints} == {"0", "1"}
