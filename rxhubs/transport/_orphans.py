"""Management calls whose caller gave up run on to their end, so that they close their own connection.

Each azure-eventhub (5.15) management call opens a connection of its own and closes it in a ``finally``, but
only once its AMQP session exists: cancelled during the handshake (a deadline over a slow or dead path), it
leaves the connection open for good, one socket per call, and a ``ResourceWarning`` when the loop closes. So a
cancelled caller stops waiting, while the SDK call goes on in the background until it answers or fails (closing
its connection as it should); :meth:`Orphans.close` gives those still running a bounded wait, then cancels them.

Only a call cancelled there can leave its socket behind, to the garbage collector: ``close`` then runs one full
collection, so the socket closes while the loop runs. Nowhere else does rxhubs collect: a full collection stops
every thread of the process (every partition) for as long as it walks the heap, 0.4-0.8 s for the 220,000
objects of a test worker on a loaded machine, and once per cut-off call (the next round over a slow path) it
stalled healthy partitions beside the slow one.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Awaitable
from typing import Any, TypeVar

__all__ = ["Orphans"]

T = TypeVar("T")


class Orphans:
    """The management calls left running by cancelled callers.

    Example:
        >>> async def main() -> tuple[bool, int]:
        ...     orphans = Orphans()
        ...     call = asyncio.ensure_future(orphans.run(asyncio.sleep(0.05, "done")))
        ...     await asyncio.sleep(0)
        ...     call.cancel()  # the caller gives up...
        ...     await asyncio.wait({call})
        ...     left = len(orphans)  # ...the SDK call runs on
        ...     await orphans.close(timeout=1.0)
        ...     return call.cancelled(), left
        >>> asyncio.run(main())
        (True, 1)
    """

    def __init__(self) -> None:
        self._running: set[asyncio.Future[Any]] = set()

    def __len__(self) -> int:
        return len(self._running)

    async def run(self, call: Awaitable[T]) -> T:
        """Await ``call``; if the caller is cancelled, ``call`` runs on (and the caller's cancel goes on)."""
        task = asyncio.ensure_future(call)
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            if not task.done():
                self._running.add(task)
                task.add_done_callback(self._done)
            raise

    def _done(self, task: asyncio.Future[Any]) -> None:
        self._running.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: its caller is gone, and the error was a timeout's consequence

    async def close(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for the calls still running, then cancel what is left.

        Cancelled calls get as long again to finish, then one garbage collection closes the sockets they left.
        """
        running = set(self._running)
        if not running:
            return
        _, left = await asyncio.wait(running, timeout=timeout)
        for task in left:
            task.cancel()
        if left:
            await asyncio.wait(left, timeout=timeout)  # cancelled: their clean-up runs (and gives up the socket)
            gc.collect()
