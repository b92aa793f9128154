"""Consumers that join together are dealt their shares together (rxhubs/balancing/_round_inputs._plan_settled).

Seven processes started at once write their presence records over about half a second; an owner whose round lists
in the middle of that deals its surplus to those it saw, and the others' shares come from the recipients' surplus at
*their* next rounds: one more handover and one more interval (``rxhubs bench scale --real``, 1,024 partitions, quiet:
the join took 3.08 intervals instead of 1.35). A round that deals to two or more consumers new since the last one
now lists the presence records again an eighth of an interval later and deals from them.
"""

from __future__ import annotations

from collections import Counter

from rxhubs.balancing._round_inputs import SETTLE_INTERVALS
from tests.balancing.kit import Group

I = 10.0  # noqa: E741 - a balances at 0, 10, 20 s


def test_consumers_joining_together_are_dealt_their_shares_by_the_owner_at_once() -> None:
    g = Group(64, interval=I, expiry=60.0)
    a = g.add("a", at=0.0)
    early = [g.add(name, at=5.0) for name in "bcde"]  # seen by a's round at 10 s
    late = [g.add(name, at=10.5) for name in "fgh"]  # their presence written half a second into it
    g.traffic(1.0, 50.0, every=0.5)
    g.run(60.0)
    assert sorted(len(x.owned) for x in g.consumers.values()) == [8] * 8
    hands = [(t, pid, owner) for t, pid, owner in a.store.claimed if owner not in ("a", "")]
    assert Counter(owner for _, _, owner in hands) == {x.name: 8 for x in (*early, *late)}  # all seven from a
    assert min(t for t, _, _ in hands) >= 10.0 + SETTLE_INTERVALS * I  # after listing the presence records again
    passed_on = [(t, pid, owner) for x in (*early, *late) for t, pid, owner in x.store.claimed
                 if owner != x.name and pid != x.name]  # a recipient releasing or handing a partition on
    assert passed_on == []  # dealt before the three were seen, b-e each passed 8 on
    assert not g.duplicates() and not g.missing() and not g.overlaps()


def test_a_single_newcomer_is_dealt_its_share_without_waiting() -> None:
    g = Group(16, interval=I, expiry=60.0)
    a = g.add("a", at=0.0)
    g.add("b", at=5.0)
    g.run(30.0)
    hands = [t for t, pid, owner in a.store.claimed if owner == "b"]
    assert len(hands) == 8 and min(hands) < 10.0 + SETTLE_INTERVALS * I  # one newcomer: no burst to wait for


def test_newcomers_that_join_together_look_when_the_owner_has_settled_not_while_it_settles() -> None:
    # each newcomer looked every 20 ms from the owner's expected round while the owner settled (an eighth of an
    # interval): 3,200 looks more among 199 newcomers of a 1,024-partition owner (virtual time: 40.5 store calls per
    # consumer per interval instead of 18.4); the window now opens an eighth of an interval after the owner's round
    g = Group(64, interval=I, expiry=60.0)
    a = g.add("a", at=0.0)
    new = [g.add(name, at=5.0) for name in "bcd"]
    g.traffic(1.0, 30.0, every=0.5)
    g.run(30.0)
    settled = 10.0 + SETTLE_INTERVALS * I
    hands = sorted(t for t, pid, owner in a.store.claimed if owner in "bcd" and pid not in "bcd")
    assert hands and hands[0] >= settled  # a dealt after its settle
    for x in new:
        looks = [t for t, verb in x.store.calls if verb == "list_ownership" and 10.0 < t < settled - 0.01]
        assert len(looks) <= 2, (x.name, looks)  # (an ordinary look or two; was a 20 ms window: 2 x 17 listings)
        seen = min(t for t, verb in x.store.calls if verb == "list_ownership" and t >= hands[0])
        assert seen - hands[0] <= 0.05, (x.name, hands[0], seen)  # and a 20 ms window when the release comes
    assert sorted(len(x.owned) for x in g.consumers.values()) == [16] * 4
