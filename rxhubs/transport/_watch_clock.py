"""One timer per event loop looks at every watchdog of that loop (:class:`~rxhubs.transport._liveness.Watchdog`).

A watchdog looks at its connection every second. When each slept on a timer of its own, a consumer of 1,024 idle
partitions woke 1,024 times a second for the looks alone (a timer, a task step and a context switch each, several
percent of a core with nothing to read). Here the watchdogs that look at the same pace share one timer: one task
sleeps, then looks at all of them in turn, looks once more a moment later at those that found their path dead, and
answers each dead one's waiting future. A look that comes late (the event loop was busy) excuses the time before it
for every watchdog, as each watchdog's own timer did.

Example:
    >>> import asyncio
    >>> class Dog:
    ...     paused = None
    ...     def __init__(self, dead): self.dead = dead
    ...     def check(self): return 12.5 if self.dead else None
    ...     def excuse(self): pass
    >>> async def main():
    ...     alive, dead = Dog(False), Dog(True)
    ...     clock = WatchClock.of(0.01, heartbeat=None)
    ...     waiting = asyncio.ensure_future(clock.wait(alive))
    ...     silent = await clock.wait(dead)
    ...     still = not waiting.done()
    ...     waiting.cancel()
    ...     return silent, still, clock is WatchClock.of(0.01, heartbeat=None)
    >>> asyncio.run(main())
    (12.5, True, True)
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

__all__ = ["WatchClock"]

#: The second look at a path found dead, after the reader had a chance to take what the socket holds.
CONFIRM = 0.05


class _Dog(Protocol):
    paused: Any

    def check(self) -> float | None: ...

    def excuse(self) -> None: ...


_clocks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[float, WatchClock]] = weakref.WeakKeyDictionary()


class WatchClock:
    """The watchdogs of one event loop that look every ``every`` seconds, and the one task that looks at them."""

    def __init__(self, every: float, heartbeat: Callable[[Any], Awaitable[None]] | None) -> None:
        self.every = every
        self._heartbeat = heartbeat
        self._waiting: dict[_Dog, asyncio.Future[float]] = {}
        self._task: asyncio.Task[None] | None = None

    @classmethod
    def of(cls, every: float, heartbeat: Callable[[Any], Awaitable[None]] | None) -> WatchClock:
        """The running loop's clock for ``every`` (made at its first use); ``heartbeat(connection)`` for paused ones."""
        clocks = _clocks.setdefault(asyncio.get_running_loop(), {})
        clock = clocks.get(every)
        if clock is None:
            clock = clocks[every] = cls(every, heartbeat)
        return clock

    async def wait(self, dog: _Dog) -> float:
        """Return the seconds of silence once ``dog`` finds its path dead (confirmed by a second look)."""
        future: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        self._waiting[dog] = future
        if self._task is None:
            self._task = asyncio.ensure_future(self._run())
        try:
            return await future
        finally:
            if self._waiting.get(dog) is future:
                del self._waiting[dog]

    async def _run(self) -> None:
        try:
            while self._waiting:
                started = time.monotonic()
                await asyncio.sleep(self.every)
                late = time.monotonic() - started > 2 * self.every
                suspects, paused, heartbeat = [], [], self._heartbeat
                for dog in list(self._waiting):
                    if late:
                        dog.excuse()
                    if dog.check() is not None:
                        suspects.append(dog)
                    elif dog.paused is not None and heartbeat is not None:
                        paused.append(dog.paused)
                if paused and heartbeat is not None:
                    await asyncio.gather(*(heartbeat(connection) for connection in paused))
                if suspects:
                    await asyncio.sleep(CONFIRM)
                    for dog in suspects:
                        future = self._waiting.get(dog)
                        silent = dog.check() if future is not None and not future.done() else None
                        if silent is not None and future is not None:
                            del self._waiting[dog]
                            future.set_result(silent)
        finally:
            self._task = None
