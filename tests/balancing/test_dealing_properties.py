"""Property tests of the stop's dealing (rxhubs/balancing/_dealing.py): who gets a stopping consumer's partitions."""

from __future__ import annotations

from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from rxhubs import Ownership
from rxhubs.balancing._dealing import LEAVING_SUFFIX, stop_recipients
from tests.balancing.sim import GROUP, HUB, NS, PRESENCE

EXPIRY = 30.0
NOW = 1000.0
OWNERS = ["a", "b", "c", "d", "e", "f"]


@st.composite
def groups(draw: st.DrawFn) -> tuple[int, list[Ownership], list[Ownership], list[str]]:
    """Partitions, records (live or expired), presence and leaving records (live or expired), the leavers."""
    count = draw(st.integers(1, 64))
    records = []
    for pid in range(count):
        owner = draw(st.sampled_from(OWNERS))
        age = draw(st.sampled_from([0.0, 5.0, EXPIRY + 1.0]))
        records.append(Ownership(NS, HUB, GROUP, str(pid), owner, NOW - age, f"e{pid}"))
    presence = []
    for owner in draw(st.lists(st.sampled_from(OWNERS), unique=True)):
        presence.append(Ownership(NS, HUB, PRESENCE, owner, owner, NOW - draw(st.sampled_from([0.0, EXPIRY + 1.0]))))
    leaving = draw(st.lists(st.sampled_from(OWNERS), unique=True))
    for owner in leaving:
        presence.append(Ownership(NS, HUB, PRESENCE, owner + LEAVING_SUFFIX, owner,
                                  NOW - draw(st.sampled_from([0.0, EXPIRY + 1.0]))))
    return count, records, presence, leaving


def live(o: Ownership) -> bool:
    return bool(o.owner_id) and o.last_modified_time is not None and o.last_modified_time + EXPIRY >= NOW


@given(groups(), st.sampled_from(OWNERS))
def test_a_stop_deals_only_to_live_consumers_that_stay_and_never_beyond_their_targets(
    group: tuple[int, list[Ownership], list[Ownership], list[str]], me: str
) -> None:
    count, records, presence, _ = group
    mine = [o.partition_id for o in records if o.owner_id == me and live(o)]
    dealt = stop_recipients(mine, me, records, presence, count, NOW, EXPIRY)
    assert set(dealt) <= set(mine)
    leaving = {o.owner_id for o in presence if o.partition_id.endswith(LEAVING_SUFFIX) and live(o)}
    staying = {o.owner_id for o in presence if o.partition_id == o.owner_id and live(o)} - leaving - {me}
    assert set(dealt.values()) <= staying  # never itself, a leaver, an expired or absent consumer
    held = Counter(o.owner_id for o in records if live(o))
    ceiling = -(-count // len(staying)) if staying else 0
    for owner, n in Counter(dealt.values()).items():
        assert held[owner] + n <= ceiling, (owner, held[owner], n, ceiling)  # up to its target, no further
    lacking = sum(max(0, ceiling - held[o]) for o in staying)
    assert len(dealt) >= min(len(mine), lacking - len(staying))  # all it can place (targets are floor or ceiling)


@given(st.integers(1, 6), st.integers(1, 6), st.integers(1, 40))
def test_leavers_dealing_from_the_same_listing_leave_every_stayer_at_its_target(
    stayers: int, leavers: int, each: int
) -> None:
    # equal holdings, as after a balanced state: each stayer ends with exactly its share, whatever the numbers
    names = [f"s{i}" for i in range(stayers)] + [f"l{i}" for i in range(leavers)]
    records = [Ownership(NS, HUB, GROUP, f"{o}-{k}", o, NOW) for o in names for k in range(each)]
    presence = [Ownership(NS, HUB, PRESENCE, o, o, NOW) for o in names]
    presence += [Ownership(NS, HUB, PRESENCE, o + LEAVING_SUFFIX, o, NOW) for o in names if o.startswith("l")]
    got: Counter[str] = Counter()
    for leaver in names[stayers:]:
        mine = [o.partition_id for o in records if o.owner_id == leaver]
        got.update(stop_recipients(mine, leaver, records, presence, len(records), NOW, EXPIRY).values())
    total = len(records)
    for owner in names[:stayers]:  # the targets the planner gives: the floor or the ceiling, none beyond
        assert total // stayers <= each + got[owner] <= -(-total // stayers), (owner, got)
    assert sum(got.values()) == leavers * each  # all handed: nothing left to claim
