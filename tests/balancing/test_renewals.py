"""Renewals spread over the rounds (rxhubs/balancing/_renewals.py) and large claims sent in parts (_store_calls.py).

A consumer owning many partitions renews each record before it is a third of the expiration old, a share of them
per round, instead of every record every round; a claim of many records goes out in calls of 32, and a call that
fails leaves its records as they were (renewals kept, retried next round) instead of failing the whole round.
"""

from __future__ import annotations

import asyncio
import math
import random
from collections import defaultdict
from collections.abc import Iterable

from hypothesis import given, settings
from hypothesis import strategies as st

from rxhubs import Ownership
from rxhubs.balancing import BalancingSettings
from rxhubs.balancing._renewals import rounds_per_renewal, spread
from rxhubs.balancing._store_calls import CLAIM_CHUNK, StoreCalls
from rxhubs.errors import StoreError
from rxhubs.stores import InMemoryCheckpointStore
from tests.balancing.kit import Group, ProxyStore


@st.composite
def holdings(draw: st.DrawFn) -> tuple[dict[str, float], float, float, float]:
    """Records last renewed at various times before ``now``, an interval and an expiration."""
    interval = draw(st.sampled_from([0.5, 2.0, 10.0]))
    expiry = interval * draw(st.sampled_from([3.0, 4.0, 6.0, 7.0, 9.0, 12.5]))
    now = 1000.0
    count = draw(st.integers(0, 80))
    renewed = {str(p): now - draw(st.floats(0, expiry / 3)) for p in range(count)}
    return renewed, now, interval, expiry


@given(holdings())
def test_a_round_never_leaves_out_a_record_that_would_be_too_old_and_renews_its_share(
    case: tuple[dict[str, float], float, float, float],
) -> None:
    renewed, now, interval, expiry = case
    rounds = rounds_per_renewal(interval, expiry)
    assert rounds >= 1 and rounds * interval <= max(interval, expiry / 3) + 1e-9
    skipped = spread(renewed, now, interval, expiry)
    assert skipped <= set(renewed)
    for pid in skipped:  # still at most a third of the expiration old at the next round
        assert now - renewed[pid] + interval <= expiry / 3 + 1e-6 or rounds == 1
        assert now - renewed[pid] + interval <= rounds * interval + 1e-6
    assert len(renewed) - len(skipped) >= math.ceil(len(renewed) / rounds)
    sent = set(renewed) - skipped  # the oldest are renewed first
    if sent and skipped:
        assert max(renewed[p] for p in sent) <= min(renewed[p] for p in skipped)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 300), st.sampled_from([(2.0, 12.0), (10.0, 60.0), (10.0, 30.0), (1.0, 10.0)]),
       st.integers(0, 2**32))
def test_rounds_renew_an_even_share_once_spread_and_no_record_ages_past_its_rounds(
    count: int, times: tuple[float, float], seed: int
) -> None:
    """A consumer that gained ``count`` partitions at various moments of one interval, renewing for 30 rounds."""
    interval, expiry = times
    rounds = rounds_per_renewal(interval, expiry)
    share = math.ceil(count / rounds)
    rng = random.Random(seed)
    renewed = {str(p): -rng.random() * interval for p in range(count)}
    sent_per_round = []
    for r in range(1, 31):
        now = r * interval
        if r > 1:  # (gained up to an interval before the first round)
            assert max(now - at for at in renewed.values()) <= rounds * interval + 1e-6  # before this round renews
        skipped = spread(renewed, now, interval, expiry)
        sent = [p for p in renewed if p not in skipped]
        sent_per_round.append(len(sent))
        for pid in sent:
            renewed[pid] = now
    assert all(n >= share for n in sent_per_round)
    assert all(n == share for n in sent_per_round[rounds:]), sent_per_round  # spread evenly from then on
    assert sum(sent_per_round) <= count + 29 * share  # (the first round may renew everything gained before it)


def renewals_by_round(store: ProxyStore, ids: set[str], owner: str) -> dict[float, list[str]]:
    rounds: dict[float, list[str]] = defaultdict(list)
    for at, pid, who in store.claimed:
        if who == owner and pid in ids:
            rounds[at].append(pid)
    return rounds


def test_a_consumer_owning_many_partitions_renews_half_of_them_per_round_and_loses_none() -> None:
    group = Group(60, interval=2.0, expiry=12.0, checkpoint_interval=5.0)
    a = group.add("a")
    group.traffic(1.0, 60.0, every=1.0)
    group.run(61.0)
    ids = set(group.hub.partition_ids)
    assert a.owned == ids and not a.closed and not a.errors
    rounds = renewals_by_round(a.store, ids, "a")
    settled = [sorted(pids) for at, pids in sorted(rounds.items()) if at > 10.0]
    assert len(settled) >= 20
    assert all(len(pids) == 30 for pids in settled), [len(p) for p in settled]  # 60 / (12 / 3 / 2) per round
    last: dict[str, float] = {}
    for at, pids in sorted(rounds.items()):
        for pid in pids:
            assert at - last.get(pid, at) <= 4.0 + 1e-6  # never older than a third of the expiration
            last[pid] = at
    assert not group.missing() and not group.duplicates()


class FailOneCall(ProxyStore):
    """The first claim call from ``FROM`` on that carries partition ``5`` fails (a timed-out part of a claim)."""

    FROM = 20.0
    failed: list[float]

    async def claim_ownership(self, claims: Iterable[Ownership]) -> list[Ownership]:
        claims = list(claims)
        if not self.failed and self.scheduler.clock >= self.FROM and any(c.partition_id == "5" for c in claims):
            self.failed.append(self.scheduler.clock)
            raise StoreError("claim_ownership did not answer within 2.0 s")
        return await super().claim_ownership(claims)


def test_a_failed_part_of_a_large_claim_keeps_its_partitions_and_the_round_goes_on() -> None:
    group = Group(96, interval=2.0, expiry=12.0, checkpoint_interval=5.0)
    a = group.add("a")
    a.store = FailOneCall(group.store, group.scheduler)
    a.store.failed = []
    group.traffic(1.0, 40.0, every=1.0)
    group.run(41.0)
    ids = set(group.hub.partition_ids)
    assert a.store.failed, "the fault was never felt"
    (failed_at,) = a.store.failed
    # 96 partitions renewed 48 a round: two calls; one failed, the other went through, and the round was not
    # retried (a failed round lists again half a second later): every listing on the rounds' 2 s grid
    renewed = renewals_by_round(a.store, ids, "a")
    assert renewed.get(failed_at), "the other part of the round was not sent"
    listings = [at for at, verb in a.store.calls if verb == "list_ownership"]
    assert all(abs(at / 2.0 - round(at / 2.0)) < 1e-6 for at in listings), [at for at in listings if at % 2]
    # the partitions of the failed call were kept and renewed at the next round
    assert a.owned == ids and not a.closed, a.closed
    assert any(failed_at < at <= failed_at + 2.0 for at, pid, who in a.store.claimed if pid == "5" and who == "a")
    assert any(isinstance(e, StoreError) for _, e in a.errors)  # reported to on_partition_error
    assert not group.missing() and not group.duplicates()


class SlowClaims(InMemoryCheckpointStore):
    """Each ``claim_ownership`` call takes ``seconds`` (a store slow to answer: Azurite on a starved machine)."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds
        self.claim_calls = 0

    async def claim_ownership(self, ownerships: Iterable[Ownership]) -> list[Ownership]:
        self.claim_calls += 1
        await asyncio.sleep(self.seconds)
        return await super().claim_ownership(ownerships)


async def test_a_claim_of_many_records_on_a_slow_store_takes_two_timeouts_at_most() -> None:
    """320 records: ten calls of 32, three at a time, each 0.3 s. The calls whose turn comes after the store timeout
    (0.5 s) are not sent: their records are unanswered (renewals kept, retried next round) and the claim ends
    after 0.6 s instead of 1.2 s (at 1,024 partitions, 32 calls: 11 timeouts, past the ownership expiration)."""
    store = SlowClaims(0.3)
    calls = StoreCalls(store, ("ns", "hub", "$Default"), "$Default$presence",
                       BalancingSettings(load_balancing_interval=0.25, ownership_expiration=3.0, store_timeout=0.5))
    records = [Ownership("ns", "hub", "$Default", str(p), "a") for p in range(10 * CLAIM_CHUNK)]
    won, unanswered = await calls.claim_partly(records)
    assert store.claim_calls == 6 and len(won) == 6 * CLAIM_CHUNK and len(unanswered) == 4 * CLAIM_CHUNK
    assert {o.partition_id for o in unanswered} == {str(p) for p in range(6 * CLAIM_CHUNK, 10 * CLAIM_CHUNK)}
