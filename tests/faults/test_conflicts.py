"""Bursts of 412s: for a while every claim and every fence loses its compare-and-swap, for real, in a real SQLite store.

During a burst the wrapper rewrites each record a consumer is about to claim or fence (same owner, new etag) just
before the call goes through, as a concurrent writer would: the claim carries a stale etag and the real store
rejects it, and the fence finds the record moved on (it refuses, and the partition is not read). Renewals fail, a
second consumer joins and cannot claim anything, ownership expires. Afterwards the consumers must converge (two
partitions each), without a crash, and every event sent must have arrived.

The wrapper keeps the store's fencing and state verbs, so rxhubs runs the fenced path users get with
``SqliteCheckpointStore``: a fence before each partition is read, every checkpoint written through
``update_checkpoint_fenced`` (or ``commit_state``), never the plain ``update_checkpoint``; the test checks so.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from rxhubs import Checkpoint, Ownership
from rxhubs.errors import OwnershipLostError
from rxhubs.stores import SqliteCheckpointStore, StatefulCheckpointStore, is_stateful
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

T = TypeVar("T")


class ConflictBurst:
    """Switch on and off; counts the claims and fences it made lose, and the checkpoint writes by kind."""

    def __init__(self) -> None:
        self.on = threading.Event()
        self.lost = 0
        self.fences_lost = 0
        self.fences = 0
        self.fenced_writes = 0
        self.plain_writes = 0


class ConflictingStore(StatefulCheckpointStore):
    """A real store whose claims and fences lose their compare-and-swap while ``burst.on`` is set.

    It keeps every verb of the store (fenced and stateful, as ``SqliteCheckpointStore``), so rxhubs fences with it.
    """

    def __init__(self, inner: SqliteCheckpointStore, burst: ConflictBurst) -> None:
        self.inner = inner
        self.burst = burst

    async def _rewrite(self, records: list[Ownership]) -> None:
        """A concurrent writer: the current version of each record written again, same content, new etag."""
        first = records[0]
        current = {
            o.partition_id: o
            for o in await self.inner.list_ownership(
                first.fully_qualified_namespace, first.eventhub_name, first.consumer_group
            )
        }
        # (records that do not exist yet are left alone)
        await self.inner.claim_ownership([current[r.partition_id] for r in records if r.partition_id in current])

    async def list_ownership(self, *args: Any) -> list[Ownership]:
        return await self.inner.list_ownership(*args)

    async def claim_ownership(self, ownerships: Any) -> list[Ownership]:
        claims = list(ownerships)
        if self.burst.on.is_set() and claims:
            await self._rewrite(claims)
            won = await self.inner.claim_ownership(claims)
            self.burst.lost += len(claims) - len(won)
            return won
        return await self.inner.claim_ownership(claims)

    async def _fence(self, ownership: Ownership, fence: Callable[[Ownership], Awaitable[T]]) -> T:
        self.burst.fences += 1
        if self.burst.on.is_set():
            await self._rewrite([ownership])
        try:
            return await fence(ownership)
        except OwnershipLostError:
            self.burst.fences_lost += 1
            raise

    async def fence(self, ownership: Ownership) -> Checkpoint | None:
        return await self._fence(ownership, self.inner.fence)

    async def fence_with_state(self, ownership: Ownership) -> tuple[Checkpoint | None, bytes | None]:
        return await self._fence(ownership, self.inner.fence_with_state)

    async def update_checkpoint_fenced(self, checkpoint: Checkpoint, ownership: Ownership) -> None:
        self.burst.fenced_writes += 1
        await self.inner.update_checkpoint_fenced(checkpoint, ownership)

    async def commit_state(self, checkpoint: Checkpoint, ownership: Ownership, state: bytes) -> None:
        self.burst.fenced_writes += 1
        await self.inner.commit_state(checkpoint, ownership, state)

    async def list_checkpoints(self, *args: Any) -> Any:
        return await self.inner.list_checkpoints(*args)

    async def update_checkpoint(self, checkpoint: Checkpoint) -> None:
        self.burst.plain_writes += 1
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
        assert burst.lost > 0  # the bursts did bite the claims
        assert burst.fences_lost > 0  # and the fences: partitions whose record moved on were not read
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
    # the fenced path users get: every partition read was fenced first, every checkpoint written fenced
    assert is_stateful(ConflictingStore) and burst.fences > 0 and burst.fenced_writes > 0 and burst.plain_writes == 0
    duplicates = account(expected, [a, b])
    # redone work is bounded: at most what was read after the last checkpoint when a partition moved
    assert sum(duplicates.values()) < len(expected) / 4, (sum(duplicates.values()), len(expected))
