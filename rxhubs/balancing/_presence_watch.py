"""Between rounds a consumer watches the presence records, and runs its round at once when the group changed.

A consumer that joins writes its presence record at its first round; one that stops releases it. The others used to
learn of it at their next round: up to a whole interval later (10 s at 1,024 partitions), which was the first part of
every change's convergence time (the **phase**). So under asyncio, between rounds, a consumer lists the presence
group (one listing of as many records as there are consumers) every quarter interval, and when the live consumers
it sees differ from those its last round saw (one joined, one left, one's record expired) it runs its round now:
the round lists the records again and plans from them as any round does. A failed listing changes nothing; the
next round comes when it is due.

**During a steady round's claim too.** A round that only renews (nothing to claim, release or take) renews a share
of what its consumer owns: an owner of 1,024 partitions sends about 512 renewals, which took Azurite 8.5-9 s while
seven consumers were starting on the same two cores, and the round that served their join began only after it
(``rxhubs bench scale --real``: 11-13.5 s after they started). So the watch goes on while such a claim is in
flight (:meth:`PresenceWatch.during_claim`), and a change cuts the claim short: the calls already sent are answered,
the others are not sent (:class:`~rxhubs.balancing._store_calls.Cut`), and the next round runs at once, renewing
them (each is renewed well before a third of its expiration: two thirds are left for such delays).

In virtual time the loop does not watch (the store calls that tests count stay those of the rounds), and while a
consumer awaits a handover its looks list the presence records anyway (:mod:`~rxhubs.balancing._looks`).

Example:
    >>> from rxhubs._models import Ownership
    >>> def present(*owners, at=100.0):
    ...     return [Ownership("ns", "hub", "$Default$presence", o, o, at, "e") for o in owners]
    >>> watch = PresenceWatch("a", interval=8.0, expiration=24.0)
    >>> watch.after_round(present("a", "b"), started=100.0, now=101.0)
    >>> watch.next_at
    102.0
    >>> watch.differs(present("a", "b"), now=102.0), watch.next_at
    (False, 104.0)
    >>> watch.differs(present("a", "b", "c"), now=104.0)  # c joined
    True
    >>> watch.differs(present("a", "b", at=70.0) + present("a"), now=104.0)  # b's record expired
    True
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable

from rxhubs._models import Ownership
from rxhubs.balancing._store_calls import Cut, StoreCalls

__all__ = ["WATCHES_PER_INTERVAL", "PresenceWatch"]

log = logging.getLogger("rxhubs.balancing")

#: Listings of the presence records per interval between rounds.
WATCHES_PER_INTERVAL = 4


class PresenceWatch:
    """The live consumers a loop's last round saw, and when to look at the presence records next."""

    def __init__(self, owner_id: str, *, interval: float, expiration: float) -> None:
        self._owner_id = owner_id
        #: Seconds between watches: another consumer's new presence record is seen within this.
        self.gap = interval / WATCHES_PER_INTERVAL
        self._expiration = expiration
        self._known: frozenset[str] | None = None
        self._stale: frozenset[str] = frozenset()  # planned with, presence released (after_round)
        #: When the next watch is due (None: before the first round).
        self.next_at: float | None = None

    def _live(self, presence: Iterable[Ownership], now: float) -> frozenset[str]:
        return frozenset(
            p.owner_id for p in presence
            if p.owner_id and p.owner_id != self._owner_id and p.last_modified_time is not None
            and p.last_modified_time + self._expiration >= now
        )

    def after_round(
        self, presence: Iterable[Ownership], *, started: float, now: float, planned: Iterable[str] = ()
    ) -> None:
        """A round that began at ``started`` planned from ``presence``: watch from a quarter interval after it.

        ``planned``: the owners the round planned with. One whose presence record ``presence`` shows released counts
        as known all the same, once: the round's listing of the records still named it (that listing was answered
        before the presence listing, and a stopping consumer releases its presence record last), so the round planned
        with it, and the next watch, which lists its presence record released, runs the round again. Before, a
        survivor at a stop of four of eight consumers that planned with eight owners from such listings saw no change
        at its watches and claimed the leavers' partitions an interval later. Once: records that keep naming a
        stopped consumer (its release lost) do not make every watch run a round until they expire.
        """
        presence = list(presence)
        released = {p.partition_id.lower() for p in presence if not p.owner_id}
        stale = frozenset(o for o in planned if o.lower() in released and o.lower() != self._owner_id.lower())
        self._known = self._live(presence, now) | (stale - self._stale)
        self._stale = stale
        self.next_at = started + self.gap

    def differs(self, presence: Iterable[Ownership], now: float) -> bool:
        """Whether the live consumers of ``presence`` differ from the last round's; the next watch is scheduled."""
        self.next_at = now + self.gap
        if self._known is None:
            return False
        changed = self._live(presence, now) ^ self._known
        if changed:
            log.debug("balancing: the group changed (%s): running the round now", ", ".join(sorted(changed)))
        return bool(changed)

    async def changed(self, calls: StoreCalls, clock: Callable[[], float]) -> bool:
        """List the presence records once: True if the group changed since the last round (run it now)."""
        try:
            presence = await calls.presence()
        except Exception as exc:  # the next round reports it; a watch is only a shortcut
            log.debug("balancing: watching the presence records failed (%s)", exc)
            self.next_at = clock() + self.gap
            return False
        return self.differs(presence, clock())

    async def during_claim(
        self, calls: StoreCalls, clock: Callable[[], float], presence: Iterable[Ownership], cut: Cut
    ) -> None:
        """List the presence records every :attr:`gap` while a steady round's claim is in flight.

        Once the live consumers differ from ``presence`` (the round's), set ``cut.event``. The caller cancels this
        when the claim is answered.
        """
        listed = list(presence)
        while True:
            await asyncio.sleep(self.gap)
            try:
                now = await calls.presence(), clock()
            except Exception as exc:  # a watch is only a shortcut: the round goes on
                log.debug("balancing: watching the presence records during a claim failed (%s)", exc)
                continue
            changed = self._live(now[0], now[1]) ^ self._live(listed, now[1])
            if changed:
                log.debug("balancing: the group changed (%s) during the round's renewals: cutting them short",
                          ", ".join(sorted(changed)))
                cut.event.set()
                return
