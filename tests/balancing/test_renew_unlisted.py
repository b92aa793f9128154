"""A consumer whose listings go unanswered renews what it reads anyway: renewals need no listing.

``a`` owns 8 partitions (10 s interval, 30 s expiration). From 5 s to 60 s the store answers every call but the
ownership listings (a listing of 512 blobs on a loaded Azurite took past the 10 s timeout: ``rxhubs bench scale
--real``, where the owner then renewed nothing for 60-81 s and gave every partition up by expiry). Each round
fails at its listing; ``a`` must still renew its records (compare-and-swap on its own records, with the etags of
its last renewals), keep reading all 8 partitions throughout, and process nothing twice.
"""

from __future__ import annotations

from typing import Any

from rxhubs import CloseReason, Ownership
from rxhubs._rx import never
from tests.balancing.kit import Group, ProxyStore


class ListingsUnanswered(ProxyStore):
    """The shared store, but the ownership listings between 5 s and 60 s never answer."""

    async def list_ownership(self, *args: Any) -> list[Ownership]:
        if 5.0 < self.scheduler.clock < 60.0:
            self.calls.append((self.scheduler.clock, "list_ownership"))
            await never()
        return await super().list_ownership(*args)


def test_an_owner_whose_listings_fail_keeps_its_partitions_by_renewing_without_them() -> None:
    g = Group(8, interval=10.0, expiry=30.0)
    g.traffic(0.5, 70.0, every=1.0)
    a = g.add("a", at=0.0)
    a.store = ListingsUnanswered(g.store, g.scheduler)
    g.run(80.0)
    failed_listings = [t for t, verb in a.store.calls if verb == "list_ownership" and 5.0 < t < 60.0]
    assert len(failed_listings) >= 4  # the fault was felt: every round in the window failed at its listing
    renewals = [t for t, pid, owner in a.store.claimed if 5.0 < t < 60.0 and owner == "a" and pid.isdigit()]
    assert renewals and max(renewals) > 40.0  # renewed through the window
    assert not [c for c in a.closed if c[2] is CloseReason.OWNERSHIP_LOST]  # nothing given up by expiry
    assert len(a.owned) == 8
    assert not g.duplicates() and not g.missing()
