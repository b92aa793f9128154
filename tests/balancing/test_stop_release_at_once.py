"""A stopping consumer sends every call of its final release at once, and its presence record after them.

Consumer ``a`` owns 100 partitions; its stop releases them: four ``claim_ownership`` calls of 32 at most. The store
holds the calls that release (a busy storage account): all four are in flight together before any is answered, and
the presence record goes out only once they are. Three at a time, the fourth waited for a turn of a busy store's
queue (6.6 s on Azurite when four of eight consumers of 1,024 partitions stopped) while the presence record, alone
in a fifth call, could be answered first: the others saw the leaver gone while its records still named it
(rxhubs/balancing/_wind_down.py). Nor do they wait for the stop's listing of the records (for those held without a
session), which the store holds too: it is answered beside them (a second per leaver on that busy Azurite).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

import rxhubs
from rxhubs import Ownership
from rxhubs.stores import InMemoryCheckpointStore
from rxhubs.testing import InMemoryEventHub
from tests.balancing.test_presence_watch import Noted
from tests.balancing.test_release_in_flight import owners, until
from tests.balancing.test_renewals_cut import GROUP, run

PARTITIONS = 100


class HeldReleases(Noted):
    """Holds every claim call that releases partitions until :attr:`answer` is set; notes when the presence record
    is released, and how many partitions were released by then."""

    def __init__(self, inner: InMemoryCheckpointStore) -> None:
        super().__init__(inner)
        self.answer = asyncio.Event()
        self.in_flight = 0
        self.most = 0
        self.released = 0
        self.presence_after: int | None = None
        self.hold_listings = False  # from the stop on: hold the listings of the records until answer is set
        self.listings_held = 0

    async def list_ownership(self, ns: str, hub: str, group: str) -> list[Ownership]:
        if self.hold_listings and not group.endswith("$presence"):
            self.listings_held += 1
            await self.answer.wait()
        return await super().list_ownership(ns, hub, group)

    async def claim_ownership(self, claims: Iterable[Ownership]) -> list[Ownership]:
        claims = list(claims)
        if any(not o.owner_id and not o.consumer_group.endswith("$presence") for o in claims):
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)
            await self.answer.wait()
            self.in_flight -= 1
            self.released += len(claims)
        if any(not o.owner_id and o.consumer_group.endswith("$presence") for o in claims):
            self.presence_after = self.released
        return await self.inner.claim_ownership(claims)


async def test_the_final_release_sends_all_its_calls_at_once_and_the_presence_record_last() -> None:
    hub = InMemoryEventHub(partition_count=PARTITIONS)
    inner = InMemoryCheckpointStore()
    held = HeldReleases(inner)
    stop = rxhubs.Shutdown()
    a = run(hub, "a", held, stop, [])
    await until(lambda: sorted(owners(hub, inner).values()) == ["a"] * PARTITIONS)
    held.hold_listings = True
    stop.request()
    await until(lambda: held.in_flight > 0)
    await asyncio.sleep(0.2)  # the calls that would wait for their turn stay unsent meanwhile
    assert held.most == 4, held.most  # every call in flight, none waiting for an answer
    assert held.listings_held == 1  # the stop's listing, unanswered: the releases did not wait for it
    assert held.presence_after is None  # not before the partitions' releases are answered
    held.answer.set()
    assert await a == 0
    assert held.presence_after == PARTITIONS
    assert set(owners(hub, inner).values()) == {""}  # everything released, and the presence record too
    presence, _ = inner.peek(hub.fully_qualified_namespace, hub.eventhub_name, GROUP + "$presence")
    assert sorted((o.partition_id, o.owner_id) for o in presence) == [("a", ""), ("a$leaving", "")], presence
