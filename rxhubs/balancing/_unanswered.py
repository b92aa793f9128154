"""A round's claim partly unanswered: what the round keeps as it was (private).

Split from :mod:`rxhubs.balancing._loop` (one concern: the records a claim cut short did not carry).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from rxhubs._models import Ownership
from rxhubs.balancing._session import PartitionSession

__all__ = ["unanswered"]

log = logging.getLogger("rxhubs.balancing")


def unanswered(
    missed_records: list[Ownership], group: str, presence_group: str, owner_id: str,
    sessions: Mapping[str, PartitionSession], releases: list[Ownership], presence_sent: bool,
    kept: dict[str, Ownership], cut: int = 0,
) -> tuple[list[Ownership], bool, dict[str, Ownership]]:
    """A round's claim partly failed: its releases, presence and kept renewals as if those records were not sent.

    A renewal unanswered keeps its session and its last renewal time (the next round renews it; the watchdog gives
    it up at the expiration as for any failed renewal), and so does one whose partition finished draining while the
    claim was in flight: it is released between rounds with the record it had, its last checkpoint write noted with
    the hand (given up as "taken over", it was handed on later as surplus without that note, and its next owner read
    from the checkpoint before); a release unanswered stays ready (released again between rounds); a claim
    unanswered gains nothing; the presence record keeps what was known of it. ``cut`` of them were not sent because
    the group changed (:class:`~rxhubs.balancing._store_calls.Cut`): not a failure, logged at debug level.

    Example:
        >>> release = Ownership("ns", "hub", "g", "1", "")
        >>> unanswered([release], "g", "g$presence", "me", {}, [release], True, {})
        ([], True, {})
    """
    missed = {(o.consumer_group, o.partition_id) for o in missed_records}
    if len(missed) > cut:
        log.warning("balancing: %d of the round's records were not answered; retrying them", len(missed) - cut)
    if cut:
        log.debug("balancing: %d renewals cut short (the group changed, or a stop): the next round sends them", cut)
    renewals = {o.partition_id for o in missed_records if o.consumer_group == group}
    kept = {**kept, **{pid: s.record for pid in renewals if (s := sessions.get(pid)) is not None
                       and s.record is not None}}
    presence_sent = presence_sent and (presence_group, owner_id) not in missed
    return [r for r in releases if (r.consumer_group, r.partition_id) not in missed], presence_sent, kept
