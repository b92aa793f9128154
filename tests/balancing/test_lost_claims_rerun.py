"""A round whose claims went to another consumer runs again at once, and only once in a row.

Consumers that read the same records deal the claimable partitions out alike, so their claims do not collide. At a
stop of four of eight consumers of 1,024 partitions (``rxhubs bench scale --real``) the survivors listed seconds apart,
one while a leaver still held its records, and dealt differently: 17 or 76 of a survivor's claims went to others, and
the partitions it would have been dealt in their view stayed unclaimed until its next round, an interval later.

Here ``a``, ``b`` and ``c`` own four of twelve partitions each; ``c`` stops at 25 s. ``a``'s round at 30 s deals
itself two of ``c``'s four released partitions; its claim is answered two seconds later (a slow store), and
``b``'s round at 31.75 s, from the same records, claims partition 8, one of ``a``'s (``b``'s claim is rewritten as
a consumer that dealt from another listing would have sent it). ``a`` loses partition 8 and is one below its target,
and the partition ``b`` left, 10, is claimable: ``a``'s next round claims it right after the lost claim instead of
at 40 s.
(``b``, whose claim of 10 became one of 8, counts 10 as lost too, and reruns once: it finds nothing to claim.)
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import replace

import pytest

from rxhubs import Ownership
from rxhubs._rx import sleep
from tests.balancing.kit import GROUP, Group, ProxyStore

I = 10.0  # noqa: E741 - a balances at 0, 10, 20, 30 s; b, whose rounds settle at 1.75, 11.75, ...


class SlowGains(ProxyStore):
    """``a``'s view of the store: a claim that gains partitions is answered two seconds after it is sent."""

    async def claim_ownership(self, claims: Iterable[Ownership]) -> list[Ownership]:
        claims = list(claims)
        if self.scheduler.clock >= 25.0 and any(c.partition_id in ("8", "9", "10", "11") for c in claims):
            await sleep(2.0)
        return await super().claim_ownership(claims)


class OtherDeal(ProxyStore):
    """``b``'s view of the store: its first claim of ``c``'s partitions takes 8 instead of 10."""

    rewritten = False

    async def claim_ownership(self, claims: Iterable[Ownership]) -> list[Ownership]:
        claims = list(claims)
        if not self.rewritten and any(c.partition_id == "10" and c.consumer_group == GROUP for c in claims):
            self.rewritten = True
            records, _ = self.inner.peek(claims[0].fully_qualified_namespace, claims[0].eventhub_name, GROUP)
            eight = next(r for r in records if r.partition_id == "8")
            claims = [replace(eight, owner_id=c.owner_id) if c.partition_id == "10" else c for c in claims]
        return await super().claim_ownership(claims)


def test_a_round_that_lost_claims_runs_again_at_once(caplog: pytest.LogCaptureFixture) -> None:
    g = Group(12, interval=I, expiry=60.0)
    a, b, c = g.add("a", at=0.0), g.add("b", at=0.5), g.add("c", at=1.0)
    a.store, b.store = SlowGains(g.store, g.scheduler), OtherDeal(g.store, g.scheduler)
    g.traffic(1.0, 50.0, every=0.5)
    g.run(24.0)
    assert g.counts() == {"a": 4, "b": 4, "c": 4}, g.counts()
    g.at(25.0, c.leave)
    with caplog.at_level(logging.INFO, logger="rxhubs.balancing"):
        g.run(35.0)
    assert b.store.rewritten  # b's claim took partition 8: a's claim of it was lost
    assert [(t, o) for t, pid, o in a.store.claimed if pid == "8" and t >= 25.0] == [(32.0, "a")]
    assert g.store_owners()["8"] == "b"  # a's claim of 8 was lost
    assert any("claims went to other consumers" in r.getMessage() for r in caplog.records)
    owners = g.store_owners()
    assert len(a.owned) == len(b.owned) == 6 and "c" not in owners.values(), owners  # by 35 s, not 40 s
    assert owners["10"] == "a"
    rounds = [t for t, verb in a.store.calls if verb == "list_ownership" and 31.0 <= t < 40.0]
    assert rounds == [32.0, 32.0], rounds  # one round at once (its two listings), not a spin
    g.run(60.0)
    assert not g.duplicates() and not g.missing() and not g.overlaps()
