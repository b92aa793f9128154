"""Bursts of 412s: for a while every claim loses its compare-and-swap, for real, in a real SQLite store.

During a burst the wrapper rewrites each record a consumer is about to claim (same owner, new etag) just
before the claim goes through, as a concurrent writer would: the claim carries a stale etag and the real store
rejects it. Renewals fail, a second consumer joins and cannot claim anything, ownership expires. Afterwards
the consumers must converge (two partitions each), without a crash, and every event sent must have arrived.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from rxhubs import Checkpoint, Ownership
from rxhubs.stores import CheckpointStore, SqliteCheckpointStore
from tests.faults.kit import (
    EXPIRY,
    INTERVAL,
    PARTITIONS,
    Consumer,
    Producer,
    account,
    expected_from,
    live_owners,
    seen,
    wait_until,
)


class ConflictBurst:
    """Switch on and off; counts the claims it made lose."""

    def __init__(self) -> None:
        self.on = threading.Event()
        self.lost = 0


class ConflictingStore(CheckpointStore):
    """A real store whose claims lose their compare-and-swap while ``burst.on`` is set."""

    def __init__(self, inner: SqliteCheckpointStore, burst: ConflictBurst) -> None:
        self.inner = inner
        self.burst = burst

    async def list_ownership(self, *args: Any) -> list[Ownership]:
        return await self.inner.list_ownership(*args)

    async def claim_ownership(self, ownerships: Any) -> list[Ownership]:
        claims = list(ownerships)
        if self.burst.on.is_set() and claims:
            first = claims[0]
            current = {
                o.partition_id: o
                for o in await self.inner.list_ownership(
                    first.fully_qualified_namespace, first.eventhub_name, first.consumer_group
                )
            }
            touched = [current[c.partition_id] for c in claims if c.partition_id in current]
            # a concurrent writer: same content, new etag (records that do not exist yet are left alone)
            await self.inner.claim_ownership(touched)
            won = await self.inner.claim_ownership(claims)
            self.burst.lost += len(claims) - len(won)
            return won
        return await self.inner.claim_ownership(claims)

    async def list_checkpoints(self, *args: Any) -> Any:
        return await self.inner.list_checkpoints(*args)

    async def update_checkpoint(self, checkpoint: Checkpoint) -> None:
        await self.inner.update_checkpoint(checkpoint)

    async def close(self) -> None:
        await self.inner.close()


def _owners(path: Path, connection_string: str) -> dict[str, str]:
    return live_owners(connection_string, lambda: SqliteCheckpointStore(path))


@pytest.mark.slow
def test_bursts_of_412_conflicts_no_crash_ownership_converges_nothing_lost(
    tmp_path: Path, emulator_factory: Any
) -> None:
    emulator = emulator_factory(hubs={"conflicts": PARTITIONS})
    conn = emulator.connection_string("conflicts")
    path = tmp_path / "cp.sqlite"
    burst = ConflictBurst()

    def store() -> ConflictingStore:
        return ConflictingStore(SqliteCheckpointStore(path), burst)

    producer = Producer(conn)
    a = Consumer("a", conn, store)
    b = Consumer("b", conn, store)
    try:
        a.start_and_wait()
        producer.start()
        assert wait_until(lambda: len(_owners(path, conn)) == PARTITIONS, 15), (_owners(path, conn), a.outcome)
        for _ in range(2):  # two bursts, each longer than the expiry, with a quiet spell between them
            burst.on.set()
            if not b.is_alive() and not b.finished.is_set():
                b.start_and_wait()  # joins in the middle of the first burst: cannot claim anything yet
            time.sleep(EXPIRY + 2 * INTERVAL)
            burst.on.clear()
            time.sleep(2 * INTERVAL)
        assert burst.lost > 0  # the bursts did bite
        # afterwards: converged, 2 partitions each, and stable
        assert wait_until(
            lambda: sorted(_owners(path, conn).values()) == ["a", "a", "b", "b"], 6 * INTERVAL + EXPIRY
        ), _owners(path, conn)
        producer.stop.set()
        producer.join(timeout=30)
        assert producer.error is None, producer.error
        expected = expected_from(dict(producer.sent))
        assert wait_until(lambda: expected <= seen([a, b]), 30)
        for consumer in (a, b):
            consumer.stop()
    finally:
        producer.stop.set()
        for consumer in (a, b):
            if consumer.is_alive():
                consumer.stop()
    for consumer in (a, b):
        assert consumer.outcome is None, consumer.outcome
    duplicates = account(expected, [a, b])
    # redone work is bounded: at most what was read after the last checkpoint when a partition moved
    assert sum(duplicates.values()) < len(expected) / 4, (sum(duplicates.values()), len(expected))
