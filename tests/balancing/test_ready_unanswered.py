"""A partition that finishes draining while the claim renewing it goes unanswered is released, not given up.

The quiet 1,024 run of 2026-11-30 (``rxhubs bench scale --real``, main ``4242f7d``): the owner's round after the one
that began handing 896 partitions over renewed those still draining; 20 of them finished draining while that claim was
in flight, and their renewals were among the 161 records the claim left unanswered (not sent once it had taken the
store timeout). The loop took them for "taken over by another consumer" and forgot them; its next listing still
named it their owner, so it handed them on as surplus, without the position of their last checkpoint write, which was
still in flight: the recipient started from the checkpoint before and read 20 events a second time. A ready
partition whose renewal went unanswered now keeps its record as it was and is released between rounds, as any other.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import pytest

from rxhubs import Ownership
from rxhubs._rx import never
from tests.balancing.kit import Group, ProxyStore

I = 10.0  # noqa: E741 - a balances at 0, 10, 20 s; b joins at 5 s


class RenewalOf79Unanswered(ProxyStore):
    """``a``'s view of the store: its first call from 20 s on that renews partition 79 never answers.

    (Its other calls are answered: a claim of 80 records goes out in calls of 32, and only one is unanswered.)
    """

    held: float | None = None

    async def claim_ownership(self, claims: Iterable[Ownership]) -> list[Ownership]:
        claims = list(claims)
        renews = any(c.partition_id == "79" and c.owner_id == "a" for c in claims)
        if renews and self.held is None and self.scheduler.clock >= 20.0:
            self.held = self.scheduler.clock
            self.claimed += [(self.scheduler.clock, c.partition_id, c.owner_id) for c in claims]
            await never()  # the call times out: its records are unanswered
        return await super().claim_ownership(claims)


def test_a_partition_ready_while_its_renewal_is_unanswered_is_released_not_given_up(
    caplog: pytest.LogCaptureFixture,
) -> None:
    g = Group(80, interval=I, expiry=60.0, work=14.0)  # a batch in flight holds a drain past the next round
    a = g.add("a", at=0.0)
    a.store = RenewalOf79Unanswered(g.store, g.scheduler)
    b = g.add("b", at=5.0)
    g.traffic(1.0, 60.0, every=0.5)
    with caplog.at_level(logging.INFO, logger="rxhubs.balancing"):
        g.run(90.0)
    assert a.store.held is not None, "the round after the handover did not renew partition 79"
    given_up = [m for r in caplog.records if "partition 79 " in (m := r.getMessage()) and "taken" in m]
    assert given_up == []
    handed = [(t, owner) for t, pid, owner in a.store.claimed if pid == "79" and owner != "a"]
    assert handed and handed[0][1] == "b"  # handed to b, once its drain ended
    assert sorted(len(x.owned) for x in (a, b)) == [40, 40]
    assert not g.duplicates() and not g.missing() and not g.overlaps()
