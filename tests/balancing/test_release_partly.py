"""A release of many partitions that a slow store answers only in part counts for the part answered.

``a`` owns 80 partitions; ``b`` and ``c`` join together, and ``a`` hands them 53 in one release between rounds: two
``claim_ownership`` calls of 32 and 21 records (rxhubs/balancing/_store_calls.py). The store leaves the second call
unanswered (it times out). The 32 records of the first call are written: ``a`` must count them released at once and
never send them again; only the 21 go out again, with ``a``'s next round (rxhubs/balancing/_releases.py). When one
failed call failed the whole release, ``a`` kept all 53 ready and re-sent every one at its next round (on a slow
store, where a claim is cut at its deadline, the partitions at the tail of such a release were never sent and
expired: read again by their next owners from the checkpoint before; ``rxhubs bench scale --real`` at 1,024).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from rxhubs import Ownership
from rxhubs._rx import never
from tests.balancing.kit import Group, ProxyStore

I = 10.0  # noqa: E741 - a balances at 0, 10, 20 s; b and c join at 5 s


class SecondCallOfTheReleaseUnanswered(ProxyStore):
    """``a``'s view of the store: the first call that hands partitions and carries partition 79 never answers."""

    held = False

    async def claim_ownership(self, claims: Iterable[Ownership]) -> list[Ownership]:
        claims = list(claims)
        handing = claims and all(c.owner_id in ("b", "c") for c in claims)
        if handing and not self.held and any(c.partition_id == "79" for c in claims):
            self.held = True
            self.claimed += [(self.scheduler.clock, c.partition_id, c.owner_id) for c in claims]
            await never()  # the call times out (store_timeout: one interval): its records are unanswered
        return await super().claim_ownership(claims)


def test_a_release_answered_in_part_forgets_what_was_written_and_sends_only_the_rest_again() -> None:
    g = Group(80, interval=I, expiry=60.0)
    a = g.add("a", at=0.0)
    a.store = SecondCallOfTheReleaseUnanswered(g.store, g.scheduler)
    b = g.add("b", at=5.0)
    c = g.add("c", at=5.0)
    g.run(40.0)
    assert a.store.held, "the release was not split across two calls, or never sent"
    handed = Counter(pid for t, pid, owner in a.store.claimed if t >= 10.0 and owner in ("b", "c"))
    assert len(handed) == 53 and sorted(set(handed.values())) == [1, 2]
    sent_once = {pid for pid, n in handed.items() if n == 1}
    sent_twice = {pid for pid, n in handed.items() if n == 2}
    assert len(sent_twice) == 21, sent_twice  # only the unanswered call's records went out again
    assert {str(p) for p in range(59, 80)} == sent_twice and len(sent_once) == 32
    again = [t for t, pid, owner in a.store.claimed if pid in sent_twice and owner in ("b", "c")]
    assert max(again) < 30.0  # with a's next round, not at the records' expiry (60 s)
    assert sorted(len(x.owned) for x in (a, b, c)) == [26, 27, 27]
    assert Counter(g.store_owners().values()) == Counter(
        {x.name: len(x.owned) for x in (a, b, c)}
    )  # the store agrees with who reads
    assert not g.duplicates() and not g.missing() and not g.overlaps()
