"""Between a balancing loop's rounds: release what finished its handover, look, watch, and sleep until the next.

:class:`BetweenRounds` is the part of :class:`~rxhubs.balancing._loop.BalancingLoop` that waits: it releases the
partitions whose handover finished (under asyncio beside a claim in flight: :mod:`~rxhubs.balancing._releases`),
looks for a release while a handover is awaited (:mod:`~rxhubs.balancing._looks`), watches the presence records
(:mod:`~rxhubs.balancing._presence_watch`), and returns when the next round is due, or sooner when either saw a
change. Its state is set by ``BalancingLoop.__init__``.
"""

from __future__ import annotations

import logging

from rxhubs._models import Ownership
from rxhubs._rx._driver import current_stepper
from rxhubs.balancing._looks import SAME_INSTANT
from rxhubs.balancing._records import releases_of
from rxhubs.balancing._releases import Releases
from rxhubs.balancing._round_inputs import RoundInputs

__all__ = ["BetweenRounds"]

log = logging.getLogger("rxhubs.balancing")


class BetweenRounds(RoundInputs):
    """The wait between rounds, and the releases of handovers that finish meanwhile."""

    _releases: Releases
    _release_failed: bool
    _next_round: float

    async def _between_rounds(self) -> None:
        """Release what became ready; sleep until the next round is due (or the loop is stopped).

        While awaiting a handover, look at the records every :func:`~rxhubs.balancing._looks.look_gap` seconds
        meanwhile, and return (run the round now) as soon as a partition this consumer would claim was released.
        """
        try:
            while self._stopping is None:
                in_flight = self._releases.in_flight
                if not self._release_failed and any(
                    s.ready and pid not in in_flight for pid, s in self.sessions.items()
                ):
                    await self._release_ready()
                    continue
                now = self._now()
                remaining = self._next_round - now
                if remaining < SAME_INSTANT:  # due: a shorter wait would not advance a virtual clock
                    return
                look = self._looks.due(now)
                watch = self._watch.next_at if look is None and current_stepper() is None else None
                if look is not None and look < self._next_round:
                    if look - now < SAME_INSTANT:
                        if await self._handed_over():
                            return
                        continue
                    remaining = look - now
                elif watch is not None and watch < self._next_round:  # the group changed: round now (_presence_watch)
                    if watch - now < SAME_INSTANT:
                        if await self._watch.changed(self.calls, self._now):
                            return
                        continue
                    remaining = watch - now
                self._wake.clear()
                await self._wake.wait(remaining)
        finally:  # the round (or the wind-down) starts from answered releases (_releases)
            await self._releases.landed()

    async def _release_ready(self) -> None:
        """Release the partitions ready for it: at once under asyncio, beside those in flight (_releases)."""
        releases = releases_of(self.sessions.values(), self.store, skip=self._releases.in_flight)
        if current_stepper() is not None:
            await self._releases.run(releases)
        else:
            self._releases.send(releases)

    def _release_failed_with(self, releases: list[Ownership], exc: Exception) -> None:
        log.warning("balancing: releasing %d partitions failed (%s); retrying next round", len(releases), exc)
        self.listener.on_error("release", exc)
        self._release_failed = True
