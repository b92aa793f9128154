"""How many checkpoint writes one consumer has in flight on one store at once (private).

Each partition's checkpoint writes go out one at a time, but partitions write side by side, and partitions that
began together write together: a consumer that claims 1,024 partitions at once writes 1,024 first checkpoints at
once, and again every ``max_interval`` after; an owner that hands 896 partitions over flushes 896 final positions
at once. Each write is bounded by its timeout from the moment it is made, so writes queued behind the others (in
the HTTP client's connection pool, or in the storage account: Azurite answers one request at a time) spent their
timeout queued, failed together, and were retried together; and the balancing loop's renewals, queued behind them,
did not land either, so partitions expired and were read again by their next owners (``rxhubs bench scale --real``
at 512 partitions: the first checkpoints of all 512 timed out at once, the owner did not renew for 70 s, and 4,945
events were processed by two owners, some partitions from their first event).

So under asyncio at most :data:`WRITES_IN_FLIGHT` checkpoint writes per store are sent at once; the others wait
for a turn, and a write's timeout runs from its turn (what it measures is then the store's answer, not the queue).
A burst of 1,024 writes goes through in turns of 16, leaving the connections to the balancing loop's calls. In
virtual time nothing waits (stores answer at once there).
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Awaitable, Callable
from typing import TypeVar

from rxhubs._rx._driver import current_stepper
from rxhubs.stores._contract import CheckpointStore

__all__ = ["WRITES_IN_FLIGHT", "in_turn"]

T = TypeVar("T")

#: Checkpoint writes per store in flight at once (per consumer process and event loop).
WRITES_IN_FLIGHT = 16

_gates: weakref.WeakKeyDictionary[CheckpointStore, tuple[asyncio.AbstractEventLoop, asyncio.Semaphore]] = (
    weakref.WeakKeyDictionary()
)


def _gate(store: CheckpointStore) -> asyncio.Semaphore | None:
    if current_stepper() is not None:
        return None
    loop = asyncio.get_running_loop()
    try:
        entry = _gates.get(store)
        if entry is None or entry[0] is not loop:
            entry = _gates[store] = (loop, asyncio.Semaphore(WRITES_IN_FLIGHT))
    except TypeError:  # a store that cannot be weakly referenced: no turns
        return None
    return entry[1]


async def in_turn(store: CheckpointStore, write: Callable[[], Awaitable[T]]) -> T:
    """Run ``write`` (one checkpoint write to ``store``) once fewer than :data:`WRITES_IN_FLIGHT` are in flight.

    Example:
        >>> import asyncio
        >>> from rxhubs.stores import InMemoryCheckpointStore
        >>> async def main():
        ...     store, peak, now = InMemoryCheckpointStore(), [0], [0]
        ...     async def write():
        ...         now[0] += 1
        ...         peak[0] = max(peak[0], now[0])
        ...         await asyncio.sleep(0.001)
        ...         now[0] -= 1
        ...     await asyncio.gather(*(in_turn(store, write) for _ in range(100)))
        ...     return peak[0]
        >>> asyncio.run(main()) == WRITES_IN_FLIGHT
        True
    """
    gate = _gate(store)
    if gate is None:
        return await write()
    async with gate:
        return await write()
