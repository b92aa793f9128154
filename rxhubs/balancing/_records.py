"""Small pure helpers of the balancing loop: the records it sends, and when its next round is due."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import replace

from rxhubs._models import Ownership
from rxhubs.balancing._session import PartitionSession

__all__ = ["next_round", "presence_etag", "releases_of", "split_won"]


def presence_etag(presence: Iterable[Ownership], owner_id: str) -> str | None:
    """The etag of ``owner_id``'s presence record among ``presence`` (None if it has none yet)."""
    etag = None
    for record in presence:
        if record.partition_id.lower() == owner_id.lower():
            etag = record.etag
    return etag


def releases_of(
    sessions: Iterable[PartitionSession], store: object = None, skip: Collection[str] = ()
) -> list[Ownership]:
    """The records to release: those of the sessions ready for it, with no owner or their recipient's.

    A record handed to a recipient is noted with a ``store`` that takes note of handovers (the blob store's
    ``note_handover``: the recipient's fence then needs no write), once its period is known. Partitions in
    ``skip`` (a release of theirs is in flight) are left out.
    """
    note = getattr(store, "note_handover", None)
    releases = []
    for session in sessions:
        if not session.ready or session.partition_id in skip:
            continue
        record = replace(session.record, owner_id=session.release_to)
        if callable(note) and session.release_to and session.period is not None:
            note(session.period, record)
        releases.append(record)
    return releases


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
