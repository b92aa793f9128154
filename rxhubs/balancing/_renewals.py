"""Which renewals a round sends: spread over the rounds, each record renewed well before a third of its expiry.

The official processors renew every owned partition every load-balancing interval: one conditional write per
partition per interval. On a large hub that is most of what a consumer costs the storage account and itself (a
consumer owning 1,024 partitions with a 10 s interval: 100 requests a second, each about 1.5 ms of the consumer's
CPU in the storage client). A record only has to be renewed before others may take it: a round leaves a renewal
out while the record, one interval later (when the next round renews it at the latest), is still at most a third of
the ownership expiration old, so it never looks older than that to anyone (two thirds of the expiration to spare for
failed renewals, late rounds and clock skew). And it renews a share of the oldest records early, so that the
renewals spread evenly over the rounds instead of coming all at once (a consumer that claimed 1,024 partitions at
once would otherwise renew them all in the same round, every few rounds).

With the default settings (10 s interval, 30 s expiration) a third of the expiration is one interval: every record
is renewed every round, as before. With ``ownership_expiration=60`` and a 10 s interval, every second round.

A round that begins **handing partitions over** leaves their renewals out while their records stay live with a third
of the expiration to spare at the next round (:func:`handing_over`): they are released within moments, as their
streams drain, and the next round renews those still draining as it renews any other. An owner of 1,024 partitions
that hands 896 of them to seven newcomers otherwise renewed hundreds of records it was about to give away, in the
very claim whose answer the drain waits for (11.5 s, 833 records unanswered, on a quiet machine).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping

from rxhubs._models import Ownership
from rxhubs.balancing._session import PartitionSession

__all__ = ["handing_over", "rounds_per_renewal", "spread", "spread_renewals"]

_SAME = 1e-6  # seconds within which two times are the same instant (virtual clocks count microseconds)


def rounds_per_renewal(interval: float, expiry: float) -> int:
    """Rounds between two renewals of one record: how many intervals fit in a third of the expiration (1 at least).

    Example:
        >>> rounds_per_renewal(10.0, 30.0), rounds_per_renewal(2.0, 12.0), rounds_per_renewal(10.0, 60.0)
        (1, 2, 2)
    """
    return max(1, math.floor(expiry / (3 * interval) + 1e-9))


def spread(renewed: Mapping[str, float], now: float, interval: float, expiry: float) -> set[str]:
    """The records a round at ``now`` may leave out, of those last renewed at ``renewed`` (partition -> time).

    A record is left out only if one ``interval`` from now it will still be at most ``rounds_per_renewal`` intervals
    old (a third of ``expiry`` at most); and the round renews at least ``ceil(n / rounds_per_renewal)`` of the ``n``
    records, the oldest first (ties by partition id), so that the renewals spread evenly over the rounds.

    Example:
        >>> sorted(spread({"0": 100.0, "1": 100.0, "2": 100.0, "3": 100.0}, 102.0, 2.0, 12.0))
        ['2', '3']
        >>> sorted(spread({"0": 100.0, "1": 102.0}, 104.0, 2.0, 12.0))  # "0" would be 3 intervals old next round
        ['1']
        >>> spread({"0": 100.0}, 110.0, 10.0, 30.0)  # the defaults: every round
        set()
    """
    if not renewed:
        return set()
    rounds = rounds_per_renewal(interval, expiry)
    share = math.ceil(len(renewed) / rounds)
    oldest_first = sorted(renewed, key=lambda pid: (renewed[pid], pid))
    return {
        pid
        for i, pid in enumerate(oldest_first)
        if i >= share and now - renewed[pid] + interval <= rounds * interval + _SAME
    }


def spread_renewals(
    claims: Iterable[Ownership], sessions: dict[str, PartitionSession], now: float, interval: float, expiry: float
) -> dict[str, Ownership]:
    """The renewals among ``claims`` a round leaves out (see :func:`spread`), by partition id, with their records."""
    renewed = {o.partition_id: s.renewed_at for o in claims if (s := sessions.get(o.partition_id)) is not None}
    return {pid: sessions[pid].record for pid in spread(renewed, now, interval, expiry)}


def handing_over(
    release: Collection[str], sessions: Mapping[str, PartitionSession], now: float, interval: float, expiry: float
) -> dict[str, Ownership]:
    """The renewals a round leaves out of the partitions it begins handing over (``release``), with their records.

    A record is left out while one ``interval`` from now (the next round, which renews it if its drain has not
    finished) it is still at most two thirds of ``expiry`` old: a third of the expiration to spare, as
    :func:`spread`'s records have two.

    Example:
        >>> from types import SimpleNamespace as Session
        >>> young = Session(record=Ownership("ns", "h", "g", "0", "a"), renewed_at=75.0)  # 35 s old at the next round
        >>> old = Session(record=Ownership("ns", "h", "g", "1", "a"), renewed_at=65.0)  # 45 s: more than 2/3 of 60
        >>> sorted(handing_over(["0", "1", "2"], {"0": young, "1": old}, 100.0, 10.0, 60.0))  # type: ignore[dict-item]
        ['0']
    """
    return {pid: session.record for pid in release
            if (session := sessions.get(pid)) is not None
            and now - session.renewed_at + interval <= 2 * expiry / 3 + _SAME}
