"""Releases between rounds: partitions whose handover finished go out at once, beside the releases in flight.

At a handover of many partitions their streams finish one after another (each lingers until its next batch),
and each becomes ready once its final checkpoint is written. A release that waited for the answer to the one
before it held the later partitions' newcomers up by as much: on a busy storage account (Azurite's one thread
answering 16 checkpoint and ownership writes at once) 30-120 ms per release, measured at 32 partitions and 800
events/s. So under asyncio each release is sent as soon as its partitions are ready (:meth:`Releases.send`),
and a round begins only once every release in flight is answered (:meth:`Releases.landed`): its claim never
carries a record that a release is changing. In virtual time releases run one after another, as before
(:meth:`Releases.run`).

**A release partly answered counts for what was answered.** A release of many records goes out in calls of 32
(:meth:`StoreCalls.claim_partly <rxhubs.balancing._store_calls.StoreCalls.claim_partly>`); on a slow store some
calls time out, or are not sent once the release has taken the store timeout. The records answered are released
(forgotten at once); only the others stay ready, and go out with the next round. When one failed call failed the
whole release, an owner handing 896 partitions over kept every one of them ready, re-sent all of them (the written
ones only to be refused) at its next round, where they crowded the same deadline again, and partitions whose release
never went out expired, read again by their next owners from the checkpoint before.

**Beside a round's claim.** A round's claim of many renewals takes seconds on a slow store (an owner of 1,024
partitions on Azurite: 4-15 s per round, one round after another while it hands 896 partitions over), and releases
that waited for the round's end came in steps of one round each: the handover of 896 took 68 s. So under asyncio,
while a round's claim is in flight, a partition that becomes ready and is not among the records the claim carries is
released at once (:meth:`Releases.beside`), and the round then leaves it out of what it records
(:meth:`Releases.close_window`). A partition the claim carries waits for its answer, as before: a release beside a
renewal of the same record would race it on the record's etag.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from rxhubs._models import Ownership
from rxhubs.errors import StoreError

__all__ = ["Releases"]

log = logging.getLogger("rxhubs.balancing")


class Releases:
    """The releases of one balancing loop that are in flight, and what to do with each answer.

    Args:
        claim: Sends records in ``claim_ownership`` calls (the loop's bounded store calls); returns the records won
            and those left unanswered (a call failed or was not sent), and raises if no call was answered.
        on_released: Called with the records whose release was answered (written, or refused: changed meanwhile).
        on_failed: Called with the records left unanswered and the error (the loop retries at its next round).
        wake: Wakes the loop (a release answered: more may be ready, or a round may now begin).

    Example:
        >>> import asyncio
        >>> from rxhubs._models import Ownership
        >>> sent, done = [], []
        >>> async def claim(records):
        ...     sent.append([r.partition_id for r in records])
        ...     return list(records), []
        >>> releases = Releases(claim, lambda rs: done.extend(r.partition_id for r in rs),
        ...                     lambda rs, e: None, lambda: None)
        >>> async def main():
        ...     releases.send([Ownership("ns", "hub", "$Default", "0", "")])
        ...     releases.send([Ownership("ns", "hub", "$Default", "1", "")])
        ...     in_flight = sorted(releases.in_flight)
        ...     await releases.landed()
        ...     return in_flight, sorted(releases.in_flight)
        >>> asyncio.run(main()), sent, done
        ((['0', '1'], []), [['0'], ['1']], ['0', '1'])
    """

    def __init__(
        self,
        claim: Callable[[list[Ownership]], Awaitable[tuple[list[Ownership], list[Ownership]]]],
        on_released: Callable[[list[Ownership]], None],
        on_failed: Callable[[list[Ownership], Exception], None],
        wake: Callable[[], None],
    ) -> None:
        self._claim = claim
        self._on_released = on_released
        self._on_failed = on_failed
        self._wake = wake
        #: Partition ids whose release is in flight (not to be released again meanwhile).
        self.in_flight: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        #: While a round's claim is in flight: the partition ids it carries (None: no claim in flight).
        self._window: set[str] | None = None
        self._beside: set[str] = set()

    def open_window(self, carried: set[str]) -> None:
        """A round's claim carrying the records of ``carried`` is being sent: others may be released meanwhile."""
        self._window, self._beside = carried, set()

    def close_window(self) -> set[str]:
        """The round's claim was answered: the partitions released beside it (the round must not record them)."""
        beside, self._window, self._beside = self._beside, None, set()
        return beside

    def beside(self, partition_id: str, releases: Callable[[], list[Ownership]]) -> bool:
        """Release ``partition_id`` now (``releases()``: its record) if a claim is in flight that does not carry it.

        Example:
            >>> released = Releases(None, None, None, None)  # type: ignore[arg-type]
            >>> released.beside("3", list)  # no claim in flight: the loop releases it between rounds
            False
        """
        window = self._window
        if window is None or partition_id in window or partition_id in self.in_flight:
            return False
        records = releases()
        if not records:
            return False
        self._beside.add(partition_id)
        self.send(records)
        return True

    def send(self, releases: list[Ownership]) -> None:
        """Release ``releases`` in a task of its own, without waiting for the releases in flight."""
        if not releases:
            return
        self.in_flight.update(r.partition_id for r in releases)  # before the task runs: not sent twice
        task = asyncio.ensure_future(self.run(releases))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def run(self, releases: list[Ownership]) -> None:
        """Release ``releases`` now; return once answered (``on_released`` / ``on_failed`` get what came of each)."""
        if not releases:
            return
        ids = {r.partition_id for r in releases}
        self.in_flight.update(ids)
        began = time.monotonic()
        failure: Exception | None = None
        try:
            won, unanswered = await self._claim(releases)
        except Exception as exc:
            won, unanswered, failure = [], releases, exc
        self.in_flight.difference_update(ids)
        missed = {r.partition_id for r in unanswered}
        answered = [r for r in releases if r.partition_id not in missed]
        if log.isEnabledFor(logging.DEBUG):
            kept = {r.partition_id for r in won}
            log.debug("balancing: released %d of %d partitions in %.2f s (%d refused: changed meanwhile)",
                      len(answered), len(releases), time.monotonic() - began, len(ids - missed - kept))
        if answered:
            self._on_released(answered)
        if unanswered:
            self._on_failed(unanswered, failure or StoreError(f"claim_ownership: {len(missed)} releases not answered"))
        self._wake()

    async def landed(self) -> None:
        """Wait until every release in flight is answered."""
        while self._tasks:
            await asyncio.wait(set(self._tasks))
