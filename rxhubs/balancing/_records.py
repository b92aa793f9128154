"""Small pure helpers of the balancing loop: the records it sends, and when its next round is due."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import replace

from rxhubs._models import Ownership
from rxhubs.balancing._planner import Plan
from rxhubs.balancing._session import PartitionSession
from rxhubs.stores import CheckpointStore
from rxhubs.stores._contract import takes_hands

__all__ = ["fresh", "fresh_renewals", "lost_claims", "next_round", "presence_etag", "releases_of", "split_won"]


def presence_etag(presence: Iterable[Ownership], owner_id: str) -> str | None:
    """The etag of ``owner_id``'s presence record among ``presence`` (None if it has none yet)."""
    etag = None
    for record in presence:
        if record.partition_id.lower() == owner_id.lower():
            etag = record.etag
    return etag


def releases_of(
    sessions: Iterable[PartitionSession], store: CheckpointStore | None = None, skip: Collection[str] = ()
) -> list[Ownership]:
    """The records to release: those of the sessions ready for it, with no owner or their recipient's.

    A record handed to a recipient, or released to whoever claims it next, is noted with a ``store`` that takes note
    of handovers (the blob store's ``note_handover``: the next owner's fence then needs no write), once its period is
    known, with the position of its last checkpoint write if that was still in flight (``session.final``: the hand
    carries it). Partitions in ``skip`` (a release of theirs is in flight) are left out.
    """
    note = store.note_handover if store is not None and takes_hands(store) else None
    releases = []
    for session in sessions:
        if not session.ready or session.partition_id in skip:
            continue
        record = replace(session.record, owner_id=session.release_to)
        if note is not None and session.period is not None:
            note(session.period, record, session.final)
        releases.append(record)
    return releases


def fresh(written_at: float | None, now: float, interval: float, expiry: float) -> bool:
    """Whether a record written at ``written_at`` stays live until well past the next round without a write now.

    Live with half the expiry to spare one interval from now (the next round, at the latest, renews it then).
    Only the rounds that a look triggers skip such writes: they exist to start released partitions at once, and
    each write they make holds up the next look (on Azurite, 20-40 ms under a handover's writes).

    Example:
        >>> fresh(100.0, 100.05, 2.0, 6.0), fresh(100.0, 101.5, 2.0, 6.0), fresh(None, 100.0, 2.0, 6.0)
        (True, False, False)
    """
    return written_at is not None and now - written_at + interval <= expiry / 2


def fresh_renewals(
    claims: Iterable[Ownership], sessions: dict[str, PartitionSession], now: float, interval: float, expiry: float
) -> dict[str, Ownership]:
    """The renewals among ``claims`` of sessions renewed so recently that they are :func:`fresh`, by partition id."""
    return {
        o.partition_id: session.record
        for o in claims
        if (session := sessions.get(o.partition_id)) is not None and fresh(session.renewed_at, now, interval, expiry)
    }


def lost_claims(decision: Plan, sessions: Collection[str]) -> int:
    """How many of ``decision``'s claims and steals went to another consumer (no session for them after the claim).

    Consumers that read the same records deal the claimable partitions out alike and their claims do not collide;
    a collision means another consumer dealt from a listing taken at another moment (at a stop, one that still saw a
    leaver, or not yet its releases). The loser keeps room below its target that only its next round fills.

    Example:
        >>> lost_claims(Plan("me", claim=(Ownership("ns", "h", "g", "0", "me"), Ownership("ns", "h", "g", "1", "me"))),
        ...             {"0"})
        1
    """
    return sum(1 for pid in decision.acquiring if pid not in sessions)


def split_won(
    won: Iterable[Ownership], presence_group: str, owner_id: str
) -> tuple[dict[str, Ownership], Ownership | None]:
    """A claim's outcome split into partition records (by id) and this consumer's presence record.

    Example:
        >>> won = [Ownership("ns", "h", "g", "0", "me"), Ownership("ns", "h", "g$presence", "me", "me")]
        >>> records, presence = split_won(won, "g$presence", "me")
        >>> list(records), presence.partition_id
        (['0'], 'me')
    """
    presence: Ownership | None = None
    records: dict[str, Ownership] = {}
    for record in won:
        if record.consumer_group.lower() == presence_group.lower():
            if record.partition_id.lower() == owner_id.lower():
                presence = record
        else:
            records[record.partition_id] = record
    return records, presence


def next_round(
    started: float, interval: float, earliest_expiry: float | None, last_early: float, now: float
) -> tuple[float, bool]:
    """When the next round is due after one that began at ``started``, and whether it is an early one.

    Normally one interval later. If another owner's record expires before that, right after it expires, so a
    crashed consumer's partitions are taken over within about half an interval of its expiry; but at most one
    early round per half interval (a mass crash must not turn into a storm of rounds).

    Example:
        >>> next_round(100.0, 10.0, None, float("-inf"), 100.0)
        (110.0, False)
        >>> next_round(100.0, 10.0, 103.0, float("-inf"), 100.0)
        (103.1, True)
    """
    due = started + interval
    if earliest_expiry is None or earliest_expiry >= due:
        return due, False
    early = max(earliest_expiry + interval / 100, last_early + interval / 2, now)
    return (early, True) if early < due else (due, False)
