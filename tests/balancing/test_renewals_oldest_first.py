"""A claim cut short by a slow store drops renewals; the next round sends the oldest renewals first.

``a`` owns 64 partitions and renews all of them every round (10 s interval, 30 s expiration): each round's claim
goes out in calls of 32 (rxhubs/balancing/_store_calls.py). In the round of 10 s the store leaves the call
carrying partition 40 unanswered, so those renewals did not land. The next round must send them first: under
asyncio a claim that has taken its store timeout sends no more calls, so a round that sends renewals in partition
order drops the same partitions at the end of every slow round, and those expire while the first ones are renewed
every time. The renewals answered last round go after them.
"""

from __future__ import annotations

from collections.abc import Iterable

from rxhubs import Ownership
from rxhubs._rx import never
from tests.balancing.kit import GROUP, Group, ProxyStore


class CallsNoted(ProxyStore):
    """``a``'s view of the store: notes each claim call's partitions; leaves the one carrying 40 at 10 s unanswered."""

    def __init__(self, *args: object) -> None:
        super().__init__(*args)  # type: ignore[arg-type]
        self.calls_made: list[tuple[float, list[str]]] = []
        self.held: set[str] = set()

    async def claim_ownership(self, claims: Iterable[Ownership]) -> list[Ownership]:
        claims = list(claims)
        pids = [c.partition_id for c in claims if c.consumer_group == GROUP]
        self.calls_made.append((self.scheduler.clock, pids))
        if 9.0 < self.scheduler.clock < 11.0 and "40" in pids and not self.held:
            self.held = set(pids)
            await never()  # times out: the renewals it carries are unanswered
        return await super().claim_ownership(claims)


def test_the_renewals_a_slow_round_dropped_go_first_in_the_next_round() -> None:
    g = Group(64, interval=10.0, expiry=30.0)
    a = g.add("a", at=0.0)
    a.store = CallsNoted(g.store, g.scheduler)
    g.run(35.0)
    store = a.store
    assert isinstance(store, CallsNoted) and len(store.held) == 32, "the round of 10 s did not send a call with 40"
    sent_after = [pid for t, pids in store.calls_made if 11.0 < t < 25.0 for pid in pids]  # the next round's
    order = {pid: sent_after.index(pid) for pid in set(sent_after)}
    answered = [pid for pid in order if pid not in store.held and pid != "63"]  # renewed at 10 s (63: its last call)
    assert store.held <= set(order) and answered, sent_after
    assert max(order[pid] for pid in store.held) < min(order[pid] for pid in answered), sent_after
    assert len(a.owned) == 64 and not g.duplicates() and not g.missing()
