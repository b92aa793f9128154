"""A newcomer awaiting a handover, in virtual time: how soon it sees the release, what the claim costs, and that a
group where nothing moves makes no more store calls for it (``rxhubs/balancing/_looks.py``)."""

from __future__ import annotations

import itertools

import pytest

from rxhubs.balancing._looks import LINGER, Looks, imminent_gap, imminent_window, look_gap
from rxhubs.balancing._planner import Plan
from rxhubs.balancing._timing import BalancingSettings
from tests.balancing.kit import Group

I = 10.0  # noqa: E741 - the load-balancing interval of these tests


def _looks(calls: list[tuple[float, str]]) -> list[float]:
    """The listings that were looks: not followed by a presence listing and a claim at the same instant."""
    rounds = {t for t, verb in calls if verb == "claim_ownership"}
    return [t for t, verb in calls if verb == "list_ownership" and t not in rounds]


def test_a_release_is_seen_within_an_imminent_gap_of_the_owners_round_not_a_look_gap() -> None:
    """b joins at 5 s; a balances at 10 s and releases half once it lingered (the partitions are idle). From a's
    expected round on, b lists every imminent gap (20 ms), not every look gap (1.25 s): it holds its half 20 ms
    after the release."""
    g = Group(8, interval=I)
    g.add("a", at=0.0)
    b = g.add("b", at=5.0)
    g.run(10.0 + LINGER - 0.001)
    assert g.counts() == {"a": 8, "b": 0}  # a reads on while it lingers
    g.run(10.0 + LINGER + imminent_gap(I) + 0.001)
    assert g.counts() == {"a": 4, "b": 4}
    assert imminent_gap(I) < look_gap(I) / 20
    assert min(_looks(b.store.calls)) >= 10.0  # none before a could have seen b
    assert all(len(r) == 1 for r in g.readers_per_partition().values())


def test_the_round_a_look_triggers_claims_from_the_looks_listing_at_once() -> None:
    """The look that saw the release (the group's records and the presence records) is the round's listing: the claim
    follows at once (a round of its own would list both again, and read the partition ids first). With a fenced store
    the fences of the partitions handed over go out with it (first, in virtual time)."""
    g = Group(8, interval=I, latency=0.01)
    g.add("a", at=0.0)
    b = g.add("b", at=5.0)
    g.run(12.0)
    assert b.owned == {"4", "5", "6", "7"}
    calls = [(round(t, 6), verb) for t, verb in b.store.calls if 9.9 <= t < 12.0]
    claim = next(i for i, (_, verb) in enumerate(calls) if verb in ("claim_ownership", "fence"))
    at = calls[claim][0]
    listings = [(round(at - d, 6), "list_ownership") for d in (0.02, 0.01)]
    assert calls[claim - 2 : claim] == listings, calls  # the look: the group's records and the presence records
    assert (round(at - 0.03, 6), "list_ownership") not in calls, calls  # no third listing before the look's


def test_an_unfenced_store_reads_the_checkpoints_with_the_claim_and_nothing_is_processed_twice() -> None:
    """With a store that has no fence (one written for the SDK), the checkpoints of released partitions are read
    alongside the claim (the owner wrote them before releasing), and the newcomer starts right after them."""
    g = Group(8, interval=I, fenced=False, work=0.3, checkpoint_interval=1.0)
    g.traffic(0.5, 30.0, every=0.25)
    g.add("a", at=0.0)
    b = g.add("b", at=5.0)
    g.run(32.0)
    assert g.counts() == {"a": 4, "b": 4}
    calls = b.store.calls
    claim = next(i for i, (t, verb) in enumerate(calls) if verb == "claim_ownership" and t >= 10.0)
    assert calls[claim - 1][1] == "list_checkpoints", calls[claim - 3 : claim + 3]  # read with the claim
    assert "list_checkpoints" not in [verb for _, verb in calls[claim + 1 : claim + 3]]  # and not again after it
    assert not g.duplicates() and not g.overlaps() and not g.missing()
    assert {p.partition_id for p in g.ledger if p.owner == "b"} == {"4", "5", "6", "7"}


def test_a_store_with_coarse_timestamps_gets_a_window_as_wide_as_their_resolution() -> None:
    """A blob's renewal times are whole seconds, so the owner's round is known to a second: the window of imminent
    looks is that much wider. a's release comes 0.8 s after its round (a batch in flight): b sees it within an
    imminent gap with a store of 1 s resolution (and one look gap late without the wider window)."""
    g = Group(8, interval=I, work=0.8, resolution=1.0)
    g.add("a", at=0.0)
    b = g.add("b", at=5.0)
    g.at(9.99, lambda: [g.hub.send([b"x"], partition_id=str(p)) for p in range(4, 8)])  # done at 10.79 s
    g.run(10.7)
    assert g.counts() == {"a": 8, "b": 0}
    g.run(10.79 + imminent_gap(I) + 0.001)
    assert b.owned == {"4", "5", "6", "7"}
    looks = _looks(b.store.calls)
    assert len({t for t in looks if 10.0 <= t <= 10.9}) >= 10  # every 20 ms through the window
    assert imminent_window(1.0) - imminent_window(0.0) == 1.0


def test_looks_per_handover_are_bounded_and_a_steady_group_makes_none() -> None:
    """A handover costs the newcomer a window of imminent looks at most (plus one per look gap after it); once
    the group is balanced, each consumer makes one round per interval and nothing else, as before."""
    g = Group(8, interval=I)
    g.add("a", at=0.0)
    b = g.add("b", at=5.0)
    g.run(40.0)
    assert g.counts() == {"a": 4, "b": 4}
    looks = _looks(b.store.calls)  # each look lists the group and the presence records
    assert 0 < len(looks) <= 2 * (imminent_window(0.0) / imminent_gap(I) + 1)
    g.run(40.0 + 10 * I)
    for consumer in (g.consumers["a"], b):
        steady = [verb for t, verb in consumer.store.calls if 40.0 <= t < 40.0 + 10 * I]
        assert steady.count("list_ownership") == 2 * 10 and steady.count("claim_ownership") == 10
        assert len(steady) == 30, steady


def test_a_look_that_sees_the_owner_renewed_opens_a_window_at_once() -> None:
    """The owner balanced later than its renewal time said (a slow round, coarse timestamps): once a look sees the
    newer renewal, the next looks come every imminent gap, not one look gap later."""
    settings = BalancingSettings(load_balancing_interval=I, ownership_expiration=3 * I)
    looks = Looks(settings)
    looks.after_round(Plan(owner_id="b", awaiting=4, release_expected=10.0), 5.0)
    assert looks.due(5.0) == 10.0  # the first look when the owner is due to balance
    t = 10.0
    while (due := looks.due(t)) is not None and due < 10.0 + imminent_window(0.0):
        assert due == pytest.approx(t)  # every imminent gap through the window
        looks.taken(t)
        t += imminent_gap(I)
    assert looks.due(t) == 5.0 + 5 * look_gap(I)  # after the window (0.35 s): one look gap (11.25)
    looks.taken(11.25)
    looks.looked(Plan(owner_id="b", awaiting=4, release_expected=10.0), 11.25)  # no newer renewal: no change
    assert looks.due(11.25) == 5.0 + 6 * look_gap(I)
    looks.looked(Plan(owner_id="b", awaiting=4, release_expected=21.2), 11.25)  # it renewed at 11.2 s
    assert 11.25 < looks.due(11.25) <= 11.25 + imminent_gap(I)  # the next point of its grid


def test_a_round_a_look_triggers_writes_only_what_it_gains_and_the_next_round_renews_the_rest() -> None:
    """a hands over in two waves: 4 and 5 are idle (released once a lingered), 6 and 7 finish a batch first (0.8 s
    of work). b's round for the first wave writes its presence record (written at 5 s: not fresh); the round for the
    second writes nothing at all (4, 5 and the presence record were written 0.7 s before: each write would hold up
    the next look), so it makes no claim. b's next regular round renews all four and its presence record, and
    nothing expires or is read twice."""
    g = Group(8, interval=I, work=0.8)  # expiry 30 s: fresh means written within the last 5 s
    g.add("a", at=0.0)
    b = g.add("b", at=5.0)
    g.at(9.99, lambda: [g.hub.send([b"x"], partition_id=str(p)) for p in (6, 7)])  # done at 10.79 s
    g.run(10.5)
    assert b.owned == {"4", "5"}
    first = [(pid, owner) for t, pid, owner in b.store.claimed if 10.0 <= t < 10.5]
    assert first == [("b", "b")]  # the presence record only: 4 and 5 were handed (no claim of their own)
    g.run(11.5)
    assert b.owned == {"4", "5", "6", "7"}
    assert [c for c in b.store.claimed if 10.5 <= c[0] < 11.5] == []  # the second wave's round wrote nothing
    assert "claim_ownership" not in [verb for t, verb in b.store.calls if 10.5 <= t < 11.5]
    g.traffic(12.0, 55.0, every=0.5)
    g.run(60.0)
    renewed = sorted(pid for t, pid, owner in b.store.claimed if 20.0 <= t < 22.0 and owner == "b")
    assert renewed == ["4", "5", "6", "7", "b"]  # the next regular round (one interval after the look's) renews all
    assert g.counts() == {"a": 4, "b": 4}
    assert not g.duplicates() and not g.overlaps() and not g.missing()


def test_looks_at_a_slow_store_take_half_of_its_time_at_most() -> None:
    """Listing 1,024 ownership blobs takes Azurite 0.3-1 s: every consumer awaiting a handover looking back to back
    would keep it busy with listings. Each look's two listings take 0.4 s here (0.2 s a call); the next look comes
    no sooner than that after its answer, so b looks at most half of the time, and still gets its share."""
    g = Group(8, interval=I, latency=0.2)
    g.add("a", at=0.0)
    b = g.add("b", at=5.0)
    g.run(40.0)
    assert g.counts() == {"a": 4, "b": 4}
    starts: list[float] = []
    for t in _looks(b.store.calls):
        if not starts or t - starts[-1] > 0.3:  # a look lists the group, then the presence records 0.2 s later
            starts.append(t)
    assert len(starts) >= 2, starts  # the slow store was looked at while awaiting
    gaps = [b2 - b1 for b1, b2 in itertools.pairwise(starts)]
    assert min(gaps) >= 0.8 - 1e-6, gaps  # 0.4 s a look, then 0.4 s without




def test_seven_newcomers_look_in_turn_on_a_slow_store_and_take_half_of_its_time_at_most(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Seven consumers join an owner of 64 partitions at 5 s on a store that takes 0.3 s per call (a look: the group
    and the presence records, 0.6 s). Each look then waits 2 * 7 - 1 times as long as it took before the next, so the
    seven together keep the store busy half of the time at most (``Looks.answered``). Looking again as soon as
    answered, seven newcomers kept a single-threaded Azurite busy, and the owner's round at 1,024 partitions took
    16 s instead of 1 (quiet ``bench scale --real``, 2026-11-30)."""
    taken: dict[int, list[float]] = {}  # each consumer's Looks -> when its looks began
    original = Looks.taken

    def noted(looks: Looks, now: float) -> None:
        taken.setdefault(id(looks), []).append(now)
        original(looks, now)

    monkeypatch.setattr(Looks, "taken", noted)
    latency = 0.3
    g = Group(64, interval=I, expiry=60.0, latency=latency)
    g.add("a", at=0.0)
    for name in "bcdefgh":
        g.add(name, at=5.0)
    g.run(60.0)
    assert sorted(len(x.owned) for x in g.consumers.values()) == [8] * 8
    assert len(taken) == 7  # the seven newcomers looked; the owner never awaits
    for looks in taken.values():
        gaps = [round(b - a, 6) for a, b in itertools.pairwise(looks)]
        # the first look may follow a round that saw only some of the seven (they joined together): from the
        # second on, each look has seen them all (one look and 13 looks' time). The old rule: 1.2 s, again and again
        assert len(gaps) >= 1 and all(gap >= 2 * 7 * 2 * latency for gap in gaps[1:]), gaps
    assert not g.duplicates() and not g.missing() and not g.overlaps()


def test_under_asyncio_a_newcomer_looks_once_a_watching_owner_has_seen_it_not_only_at_the_owners_next_round() -> None:
    settings = BalancingSettings(load_balancing_interval=8.0, ownership_expiration=48.0)
    newcomer = Plan(owner_id="b", owners=("a", "b"), awaiting=2, release_expected=20.0)
    unwatched, watched = Looks(settings), Looks(settings)
    unwatched.after_round(newcomer, 5.0)
    watched.after_round(newcomer, 5.0, watched=2.0)  # owners watch the presence records every 2 s
    assert unwatched.due(5.0) == 20.0  # the owner's round expected from its records
    assert watched.due(5.0) == 7.0  # the owner's watch has seen b's presence by then: its round may come now
    watched.taken(7.0)
    watched.answered(7.01)
    later = watched.due(7.01)
    assert later is not None and 7.0 < later <= 7.0 + look_gap(8.0)  # and the looks go on until the release shows
    late = Looks(settings)
    late.after_round(Plan(owner_id="b", owners=("a", "b"), awaiting=2, release_expected=6.0), 5.0, watched=2.0)
    assert late.due(5.0) == 6.0  # the expected round comes first: nothing added
