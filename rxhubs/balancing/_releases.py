"""Releases between rounds: partitions whose handover finished go out at once, beside the releases in flight.

At a handover of many partitions their streams finish one after another (each lingers until its next batch),
and each becomes ready once its final checkpoint is written. A release that waited for the answer to the one
before it held the later partitions' newcomers up by as much: on a busy storage account (Azurite's one thread
answering 16 checkpoint and ownership writes at once) 30-120 ms per release, measured at 32 partitions and 800
events/s. So under asyncio each release is sent as soon as its partitions are ready (:meth:`Releases.send`),
and a round begins only once every release in flight is answered (:meth:`Releases.landed`): its claim never
carries a record that a release is changing. In virtual time releases run one after another, as before
(:meth:`Releases.run`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from rxhubs._models import Ownership

__all__ = ["Releases"]


class Releases:
    """The releases of one balancing loop that are in flight, and what to do with each answer.

    Args:
        claim: Sends records in one ``claim_ownership`` call (the loop's bounded store call).
        on_released: Called with the records once their release was answered.
        on_failed: Called with the records and the error if it failed (the loop retries at its next round).
        wake: Wakes the loop (a release answered: more may be ready, or a round may now begin).

    Example:
        >>> import asyncio
        >>> from rxhubs._models import Ownership
        >>> sent, done = [], []
        >>> async def claim(records):
        ...     sent.append([r.partition_id for r in records])
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
        claim: Callable[[list[Ownership]], Awaitable[object]],
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

    def send(self, releases: list[Ownership]) -> None:
        """Release ``releases`` in a task of its own, without waiting for the releases in flight."""
        if not releases:
            return
        self.in_flight.update(r.partition_id for r in releases)  # before the task runs: not sent twice
        task = asyncio.ensure_future(self.run(releases))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def run(self, releases: list[Ownership]) -> None:
        """Release ``releases`` now; return once answered (the outcome goes to ``on_released`` or ``on_failed``)."""
        if not releases:
            return
        ids = {r.partition_id for r in releases}
        self.in_flight.update(ids)
        try:
            await self._claim(releases)
        except Exception as exc:
            self.in_flight.difference_update(ids)
            self._on_failed(releases, exc)
        else:
            self.in_flight.difference_update(ids)
            self._on_released(releases)
        self._wake()

    async def landed(self) -> None:
        """Wait until every release in flight is answered."""
        while self._tasks:
            await asyncio.wait(set(self._tasks))
