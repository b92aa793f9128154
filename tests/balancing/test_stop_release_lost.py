"""A release on stop that loses its compare-and-swap to this consumer's own late renewal is made again.

Consumer ``a`` owns four partitions. Just before its final release reaches the store, two of its records are
rewritten in its name (a renewal of ``a``'s that landed but whose answer never came: a store time-out), so their
etags moved on and those two releases lose. ``a`` lists the records once, finds them still naming it, and releases
them from there: when its stop returns nothing names it, and a warning says so. Before, they kept ``a``'s name until
they expired (an expiration of waiting for whoever takes them over).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import replace

import pytest

import rxhubs
from rxhubs import Ownership
from rxhubs.stores import InMemoryCheckpointStore
from rxhubs.testing import InMemoryEventHub
from tests.balancing.test_presence_watch import Noted
from tests.balancing.test_release_in_flight import owners, until
from tests.balancing.test_renewals_cut import GROUP, run


class LateRenewal(Noted):
    """Rewrites partitions 0 and 1 in their owner's name just before the first call that releases them."""

    def __init__(self, inner: InMemoryCheckpointStore) -> None:
        super().__init__(inner)
        self.bumped = 0

    async def claim_ownership(self, claims: Iterable[Ownership]) -> list[Ownership]:
        claims = list(claims)
        if not self.bumped and any(not o.owner_id and o.consumer_group == GROUP for o in claims):
            first = claims[0]
            records, _ = self.inner.peek(first.fully_qualified_namespace, first.eventhub_name, GROUP)
            late = [o for o in records if o.partition_id in ("0", "1")]
            self.bumped = len(await self.inner.claim_ownership([replace(o) for o in late]))
        return await self.inner.claim_ownership(claims)


async def test_releases_lost_to_a_late_renewal_are_made_again(caplog: pytest.LogCaptureFixture) -> None:
    hub = InMemoryEventHub(partition_count=4)
    inner = InMemoryCheckpointStore()
    store = LateRenewal(inner)
    stop = rxhubs.Shutdown()
    a = run(hub, "a", store, stop, [])
    await until(lambda: sorted(owners(hub, inner).values()) == ["a"] * 4)
    with caplog.at_level(logging.WARNING, logger="rxhubs.balancing"):
        stop.request()
        assert await a == 0
    assert store.bumped == 2  # the late renewal was felt: two releases lost their compare-and-swap
    assert owners(hub, inner) == {str(p): "" for p in range(4)}, owners(hub, inner)
    assert any("releasing them again" in r.getMessage() for r in caplog.records)
