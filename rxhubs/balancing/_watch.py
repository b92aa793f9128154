"""Between rounds: looks for a handover awaited, and the owner's watch for consumers that joined (private).

:class:`Watching` is the part of :class:`~rxhubs.balancing._loop.BalancingLoop` that lists between rounds and runs
the next round at once when the listing says so:

* a **look** (:meth:`Watching._handed_over`): while this consumer awaits a handover, it lists the records when
  :class:`~rxhubs.balancing._looks.Looks` says, and claims as soon as a release shows;
* the **presence watch** (:meth:`Watching._watched`, under asyncio only): an owner served a join only at its next
  round, up to an interval after the newcomer's presence record, and when the newcomers' records came over more than
  a second its round dealt to those it saw, the others getting their share an interval later (``rxhubs bench scale
  --real``, seven joiners at 512 and 1,024 partitions: 2.8-3.3 intervals, against 2). So an owner that holds more
  than its share would be with one more consumer lists the presence records (a few blobs) every quarter interval
  between rounds; a live record of a consumer its last plan did not count makes it list the ownership records and run
  a round from both listings at once, as a look does: it writes what moves, and renewals only when due. The regular
  rounds stay on their grid (:meth:`Watching._watch_round` keeps the next one where it was), so renewals and the
  newcomers' expectation of the owner's next round (``Plan.release_expected``) hold; and a newcomer awaiting a
  handover looks every look gap from a quarter interval after its presence record (when a watching owner has seen
  it), not only from the owner's next round (:meth:`Looks.watched_from
  <rxhubs.balancing._looks.Looks.watched_from>`). Virtual time keeps the rounds alone (the marble and property
  tests describe them).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Collection

from rxhubs._models import Ownership
from rxhubs._rx._driver import current_stepper
from rxhubs.balancing._looks import Looks
from rxhubs.balancing._round_inputs import RoundInputs

__all__ = ["WATCHES_PER_INTERVAL", "Watching", "newcomers"]

log = logging.getLogger("rxhubs.balancing")

#: Listings of the presence records per interval while an owner watches for consumers that joined.
WATCHES_PER_INTERVAL = 4


def newcomers(presence: list[Ownership], owners: Collection[str], now: float, expiration: float) -> list[str]:
    """Consumers with a live presence record that are not among ``owners`` (the active owners a plan counted).

    Example:
        >>> p = [Ownership("ns", "hub", "g$presence", "b", "b", 99.0), Ownership("ns", "hub", "g", "c", "", 99.0)]
        >>> newcomers(p, ("a",), 100.0, 30.0), newcomers(p, ("a", "b"), 100.0, 30.0)
        (['b'], [])
    """
    known = set(owners)
    return [o.owner_id for o in presence if o.owner_id and o.owner_id not in known
            and o.last_modified_time is not None and o.last_modified_time + expiration >= now]


class Watching(RoundInputs):
    """Looks and the presence watch of :class:`~rxhubs.balancing._loop.BalancingLoop` (a mixin)."""

    _looks: Looks
    _looked: tuple[list[Ownership], list[Ownership]] | None
    #: When the owner next lists the presence records (None: it does not watch).
    _watch_at: float | None = None
    #: The regular round a round triggered by the watch leaves where it was (None: the last round was regular).
    _grid: float | None = None
    #: Listings of the presence records by the watch so far.
    watches = 0

    def _watch_after(self, now: float) -> None:
        """Plan the next watch after a round: under asyncio, while holding more than the share with one more owner."""
        plan, ids = self.last_plan, self.partition_ids
        watching = (current_stepper() is None and self._stopping is None and plan is not None and ids is not None
                    and len(self.sessions) > math.ceil(len(ids) / (len(plan.owners) + 1)))
        gap = self.settings.load_balancing_interval / WATCHES_PER_INTERVAL
        self._watch_at = now + gap if watching else None
        if current_stepper() is None and self._presence_at is not None:  # awaiting: owners that watch release early
            self._looks.watched_from(self._presence_at + gap, now)

    def _watch_round(self, next_round: float) -> None:
        """A round the watch triggered ended: the next regular round stays where it was due."""
        if self._grid is not None and self._grid > self._now():  # (a failed one retried past it was the regular one)
            self._next_round = min(self._grid, next_round)
        self._grid = None

    async def _watched(self) -> bool:
        """List the presence records once: True (the round runs now) if a consumer joined since the last plan."""
        plan, now = self.last_plan, self._now()
        self._watch_after(now)
        if plan is None or self.partition_ids is None:
            return False
        self.watches += 1
        try:
            presence = await self.calls.presence()
            if not newcomers(presence, plan.owners, self._now(), self.settings.ownership_expiration):
                return False
            records, presence = await self.calls.owners_and_presence()
        except Exception as exc:  # the next round lists anyway; the watch is only a shortcut
            log.debug("balancing: watching the presence records failed (%s)", exc)
            return False
        log.debug("balancing: the watch saw %s join", ", ".join(newcomers(presence, plan.owners, self._now(),
                                                                          self.settings.ownership_expiration)))
        self._looked, self._grid = (records, presence), self._next_round
        return True

    async def _handed_over(self) -> bool:
        """List the records once: True if a partition this consumer would claim was released meanwhile.

        With the presence records (a consumer joined since the last round changes every target): the round this
        look triggers claims from both listings at once.
        """
        self._looks.taken(self._now())
        if self.partition_ids is None:
            return False
        try:
            records, presence = await self.calls.owners_and_presence()
        except Exception as exc:  # the next round reports it; a look is only a shortcut
            log.debug("balancing: looking for a handover failed (%s)", exc)
            return False
        finally:
            self._looks.answered(self._now())
        seen = self._decide(records, presence, self.partition_ids)
        if not seen.claim and not self._handed_to_me(seen):
            self._looks.looked(seen, self._now())
            return False
        self._looked = records, presence
        return True
