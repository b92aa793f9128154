"""A partition whose handover finished is released at once, while another partition's release is still in flight.

Consumer ``a`` holds four partitions; ``b`` joins and ``a`` hands it two. Their final checkpoints are written one
after the other (the store holds the second until the first partition's release has been sent), so the two
partitions are ready at different times. The store holds ``a``'s first release unanswered; the second must go
out meanwhile (rxhubs/balancing/_releases.py): a release that waited for the one before it held the later
partitions' newcomers up by that answer's time (30-120 ms at 32 partitions on a busy Azurite).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterable
from typing import Any

import rxhubs
from rxhubs import Checkpoint, EventBatch, Ownership
from rxhubs import operators as hops
from rxhubs.stores import CheckpointStore, InMemoryCheckpointStore
from rxhubs.testing import InMemoryEventHub

GROUP = "$Default"
FAST: dict[str, Any] = {
    "load_balancing_interval": 0.1, "ownership_expiration": 3.0, "max_wait": 0.05, "store_timeout": 60.0,
}


class HoldFirstRelease(CheckpointStore):
    """``a``'s view of the shared store: holds its first release to ``b`` until :attr:`let_go` is set."""

    def __init__(self, inner: InMemoryCheckpointStore) -> None:
        self.inner = inner
        self.writes = 0
        self.first_held = asyncio.Event()
        self.let_go = asyncio.Event()
        #: The partitions of each release to ``b``, as sent and as answered.
        self.sent: list[set[str]] = []
        self.answered: list[set[str]] = []

    async def list_ownership(self, *args: Any) -> list[Ownership]:
        return await self.inner.list_ownership(*args)

    async def claim_ownership(self, claims: Iterable[Ownership]) -> list[Ownership]:
        claims = list(claims)
        handed = {c.partition_id for c in claims if c.owner_id == "b"}
        if handed:
            self.sent.append(handed)
            if len(self.sent) == 1:
                self.first_held.set()
                await self.let_go.wait()
        won = await self.inner.claim_ownership(claims)
        if handed:
            self.answered.append(handed)
        return won

    async def list_checkpoints(self, *args: Any) -> list[Checkpoint]:
        return await self.inner.list_checkpoints(*args)

    async def update_checkpoint(self, checkpoint: Checkpoint) -> None:
        self.writes += 1
        if self.writes == 6:  # 1-4: each partition's first write; 5 and 6: the two handed partitions' last
            await self.first_held.wait()
        await self.inner.update_checkpoint(checkpoint)


async def until(condition: Any) -> None:
    for _ in itertools.count():
        if condition():
            return
        await asyncio.sleep(0.005)


def owners(hub: InMemoryEventHub, store: InMemoryCheckpointStore) -> dict[str, str]:
    records, _ = store.peek(hub.fully_qualified_namespace, hub.eventhub_name, GROUP)
    return {o.partition_id: o.owner_id for o in records}


def four_partitions() -> InMemoryEventHub:
    """A hub of four partitions holding two events each."""
    hub = InMemoryEventHub(partition_count=4)
    for pid in hub.partition_ids:
        hub.send([b"first", b"second"], partition_id=pid)
    return hub


def start(hub: InMemoryEventHub, owner: str, store: CheckpointStore, stop: rxhubs.Shutdown,
          **options: Any) -> asyncio.Task[int]:
    """Consumer ``owner`` under asyncio, checkpointing once an hour: after each partition's first write, only the
    handover's flushes write. ``options`` override :data:`FAST`."""

    async def work(batch: EventBatch) -> None:
        pass

    pipeline = rxhubs.consume(hub, GROUP, store, owner_id=owner, **{**FAST, **options}).pipe(
        hops.process(work), hops.checkpoint(store, max_interval=3600.0)
    )
    return asyncio.create_task(rxhubs.arun(pipeline, shutdown=stop, grace=10.0, signals=()))


async def test_a_release_does_not_wait_for_the_one_in_flight() -> None:
    hub = four_partitions()
    inner = InMemoryCheckpointStore()
    a_store = HoldFirstRelease(inner)
    stops = {"a": rxhubs.Shutdown(), "b": rxhubs.Shutdown()}

    def run(owner: str, store: CheckpointStore) -> asyncio.Task[int]:
        return start(hub, owner, store, stops[owner])

    a = run("a", a_store)
    await until(lambda: a_store.writes == 4)  # a reads all four partitions and wrote each one's first checkpoint
    for pid in hub.partition_ids:  # each partition has a position not yet written: its handover writes it
        hub.send([b"more"], partition_id=pid)
    await until(lambda: len(inner.peek(hub.fully_qualified_namespace, hub.eventhub_name, GROUP)[0]) == 4)
    b = run("b", inner)
    await a_store.first_held.wait()
    try:
        await asyncio.wait_for(until(lambda: len(a_store.sent) == 2), timeout=30.0)
    except TimeoutError:
        raise AssertionError(f"the second release waited for the first: sent {a_store.sent}") from None
    first, second = a_store.sent
    assert first not in a_store.answered  # the first release is still unanswered: the second did not wait for it
    assert len(first) == len(second) == 1 and first != second
    a_store.let_go.set()
    await until(lambda: sorted(owners(hub, inner).values()) == ["a", "a", "b", "b"])
    assert {p for p, o in owners(hub, inner).items() if o == "b"} == first | second
    for owner in ("a", "b"):
        stops[owner].request()
    await asyncio.gather(a, b)
    assert set(owners(hub, inner).values()) == {""}
