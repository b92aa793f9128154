"""The receiver of an :class:`~rxhubs.testing.InMemoryEventHub` partition: owner levels as the service has them.

A receiver with an equal or higher owner level takes the partition and the older one's next pull raises
:class:`~rxhubs.errors.OwnershipLostError`; a lower level is refused while a higher one reads; at most five
receivers without an owner level per partition and consumer group. It waits for events with the kernel's
:class:`~rxhubs._rx.Signal`: in real time under asyncio, in virtual time under a ``TestScheduler``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Protocol

from rxhubs._models import Event, PartitionContext, PartitionProperties, Position
from rxhubs._rx import Signal
from rxhubs.errors import OwnershipLostError, QuotaExceededError
from rxhubs.testing._memory_partition import PartitionLog
from rxhubs.transport._base import ReceiverBase

__all__ = ["MAX_READERS", "InMemoryReceiver"]

MAX_READERS = 5


class MemoryHost(Protocol):
    """What a receiver needs from the :class:`~rxhubs.testing.InMemoryEventHub` that made it."""

    clock: Callable[[], dt.datetime]

    def partition_properties(self, partition_id: str) -> PartitionProperties:
        """One partition's properties, now."""
        ...


class InMemoryReceiver(ReceiverBase):
    """A receiver of an :class:`InMemoryEventHub` partition. Create it with ``hub.receiver(...)``."""

    def __init__(
        self,
        hub: MemoryHost,
        partition: PartitionLog,
        context: PartitionContext,
        start: Position,
        owner_level: int | None,
        track_last_enqueued_event_properties: bool = True,
    ) -> None:
        super().__init__(context, start, owner_level)
        self._track = track_last_enqueued_event_properties
        self._hub = hub
        self._partition = partition
        self._index: int | None = None  # next event to hand out, once attached
        self._stolen: str | None = None

    # -- attaching and owner levels ------------------------------------------------------------------------
    def _attach(self) -> None:
        if self._index is not None:
            return
        readers = self._partition.readers.setdefault(self._context.consumer_group, [])
        levels = [r.owner_level for r in readers if r.owner_level is not None]
        top = max(levels, default=None)
        mine = self.owner_level
        if top is not None and (mine is None or mine < top):
            raise OwnershipLostError(
                f"partition {self._context.partition_id}: a reader with owner level {top} is attached"
                f" (this receiver: {mine})"
            )
        if mine is None and len(readers) >= MAX_READERS:
            raise QuotaExceededError(
                f"partition {self._context.partition_id}: at most {MAX_READERS} readers per consumer group"
            )
        if mine is not None:
            for other in list(readers):
                if other is not self and (other.owner_level is None or other.owner_level <= mine):
                    other._steal(f"a reader with owner level {mine} took partition {self._context.partition_id}")
        readers.append(self)
        self._index = self._partition.index_of(self.position)

    def _steal(self, reason: str) -> None:
        self._stolen = reason
        self._detach()
        waiters, self._partition.waiters = self._partition.waiters, []
        for wake in waiters:
            wake()

    def _detach(self) -> None:
        readers = self._partition.readers.get(self._context.consumer_group, [])
        if self in readers:
            readers.remove(self)

    # -- pulling -------------------------------------------------------------------------------------------
    def _take_ready(self, max_count: int) -> list[Event]:
        if self._stolen is not None:
            raise OwnershipLostError(self._stolen)
        if self._partition.faults:
            raise self._partition.faults.pop(0)
        self._attach()
        index = self._index
        assert index is not None
        events = self._partition.events[index : index + max_count]
        if events:
            self._index = index + len(events)
            self._advance(events[-1])
        if self._track:
            self._last_enqueued = self._partition.last_enqueued(self._hub.clock)
        return events

    async def _receive(self, max_count: int, max_wait: float | None) -> list[Event]:
        events = self._take_ready(max_count)
        if events or max_wait == 0:
            return events
        arrived = Signal()  # set by the next append (or a steal); waits in virtual time under a TestScheduler
        self._partition.waiters.append(arrived.set)
        try:
            await arrived.wait(max_wait)
        finally:
            if arrived.set in self._partition.waiters:
                self._partition.waiters.remove(arrived.set)
        self._check_open()
        return self._take_ready(max_count)

    async def _close(self) -> None:
        self._detach()

    async def get_partition_properties(self) -> PartitionProperties:
        return self._hub.partition_properties(self._context.partition_id)
