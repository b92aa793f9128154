"""The virtual-time world both sides of the ``rebalance`` benchmark run in: one hub, one store, a group."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from reactivex.testing import TestScheduler

from rxhubs._models import Checkpoint, Ownership
from rxhubs._rx import never
from rxhubs.stores import CheckpointStore, InMemoryCheckpointStore
from rxhubs.testing import InMemoryEventHub

GROUP = "$Default"
INTERVAL = 10.0
EXPIRY = 30.0
SAMPLE = 0.5


class _Store(CheckpointStore):
    """One consumer's view of the shared store: counts its calls, and goes silent when the consumer crashes."""

    def __init__(self, inner: InMemoryCheckpointStore) -> None:
        self.inner = inner
        self.silent = False
        self.calls = 0

    async def _count(self) -> None:
        if self.silent:
            await never()
        self.calls += 1

    async def list_ownership(self, namespace: str, eventhub_name: str, consumer_group: str) -> list[Ownership]:
        await self._count()
        return await self.inner.list_ownership(namespace, eventhub_name, consumer_group)

    async def claim_ownership(self, ownerships: Iterable[Ownership]) -> list[Ownership]:
        await self._count()
        return await self.inner.claim_ownership(ownerships)

    async def list_checkpoints(self, namespace: str, eventhub_name: str, consumer_group: str) -> list[Checkpoint]:
        await self._count()
        return await self.inner.list_checkpoints(namespace, eventhub_name, consumer_group)

    async def update_checkpoint(self, checkpoint: Checkpoint) -> None:
        await self._count()
        await self.inner.update_checkpoint(checkpoint)


class _World:
    """A hub, a store and a virtual clock shared by the consumers of one run."""

    def __init__(self, partition_count: int) -> None:
        self.scheduler = TestScheduler()
        self.hub = InMemoryEventHub(partition_count, clock=lambda: self.scheduler.now)
        self.store = InMemoryCheckpointStore()
        self.ids = self.hub.partition_ids

    def records(self) -> list[Ownership]:
        hub = self.hub
        out: list[Ownership] = []
        self.store.observe_list_ownership(hub.fully_qualified_namespace, hub.eventhub_name, GROUP).subscribe(
            out.extend, scheduler=self.scheduler
        )
        return out

    def live_owners(self) -> dict[str, str]:
        now = self.scheduler.clock
        return {
            r.partition_id: r.owner_id
            for r in self.records()
            if r.owner_id and r.last_modified_time is not None and r.last_modified_time + EXPIRY >= now
        }


class _Group:
    """The consumers of one side (rxhubs or the official rules) and the convergence test."""

    def __init__(self, world: _World) -> None:
        self.world = world
        self.alive: set[str] = set()
        self.moved = 0

    def reading(self, name: str) -> set[str]:
        raise NotImplementedError

    def calls(self) -> int:
        raise NotImplementedError

    def converged(self) -> bool:
        if not self.alive:
            return False
        owners = self.world.live_owners()
        if len(owners) != len(self.world.ids) or any(o not in self.alive for o in owners.values()):
            return False
        counts = Counter(owners.values())
        shares = [counts.get(name, 0) for name in self.alive]
        if max(shares) - min(shares) > 1:
            return False
        return all(self.reading(name) == {p for p, o in owners.items() if o == name} for name in self.alive)

    def settle(self, since: float, limit_intervals: float) -> float | None:
        """Intervals from ``since`` until converged (sampled every 0.5 s), None if not within the limit."""
        scheduler = self.world.scheduler
        steps = int(limit_intervals * INTERVAL / SAMPLE)
        for k in range(steps + 1):
            scheduler.advance_to(since + k * SAMPLE)
            if self.converged():
                return k * SAMPLE / INTERVAL
        return None


