"""An owner begins a handover as soon as it has planned, not once its round's claim is answered.

``a`` owns 8 partitions (10 s interval, 60 s expiration: each record renewed every other round). ``b`` joins at
15 s. ``a``'s round at 20 s plans to hand 4-7 to ``b``; its claim of renewals takes 3 s to be answered (a loaded
Azurite: at 1,024 partitions an owner's claim of hundreds of renewals took 2-8 s, ``rxhubs bench scale --real``).
The streams of 4-7 must stop (linger, finish, checkpoint) from 20 s on, while the claim is out, and the claim must
not carry their renewals (they are fresh and about to be released). Nothing is read twice or lost.
"""

from __future__ import annotations

from collections.abc import Iterable

from rxhubs import Ownership
from rxhubs._rx import sleep
from tests.balancing.kit import GROUP, Group, ProxyStore

HANDED = {"4", "5", "6", "7"}


class SlowClaimAt20(ProxyStore):
    """``a``'s store: the claims of its round at 20 s take 3 s to be answered (what they carried: ``slow``)."""

    def __init__(self, *args: object) -> None:
        super().__init__(*args)  # type: ignore[arg-type]
        self.slow: list[str] = []

    async def claim_ownership(self, claims: Iterable[Ownership]) -> list[Ownership]:
        claims = list(claims)
        if 19.9 < self.scheduler.clock < 20.5 and any(c.owner_id == "a" for c in claims):
            self.slow += [c.partition_id for c in claims if c.owner_id == "a"]
            await sleep(3.0)
        return await super().claim_ownership(claims)


def test_the_owner_stops_reading_what_it_hands_over_while_its_claim_is_out() -> None:
    g = Group(8, interval=10.0, expiry=60.0)
    g.traffic(0.5, 45.0, every=0.5)
    a = g.add("a", at=0.0)
    a.store = SlowClaimAt20(g.store, g.scheduler)
    b = g.add("b", at=15.0)
    g.run(21.0)
    assert isinstance(a.store, SlowClaimAt20)
    renewed_at_20 = set(a.store.slow)
    assert renewed_at_20 - HANDED, renewed_at_20  # the fault was felt: a's round at 20 s made a (slow) claim
    assert not renewed_at_20 & HANDED, renewed_at_20  # fresh records about to be handed over are not renewed
    closed = {pid: t for t, pid, _ in a.closed if pid in HANDED}
    assert set(closed) == HANDED and max(closed.values()) < 21.0, closed  # drained while the claim was out (to 23 s)
    g.run(60.0)
    assert b.owned == HANDED and a.owned == {"0", "1", "2", "3"}
    assert {r.partition_id: r.owner_id for r in g.store.observe_list_ownership(
        g.hub.fully_qualified_namespace, g.hub.eventhub_name, GROUP).run()} == {str(p): "a" if p < 4 else "b"
                                                                                for p in range(8)}
    assert not g.duplicates() and not g.overlaps() and not g.missing()
