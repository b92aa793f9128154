"""One partition of an :class:`~rxhubs.testing.InMemoryEventHub`: its append-only log and its readers (private)."""

from __future__ import annotations

import bisect
import datetime as dt
import hashlib
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from rxhubs._models import Event, LastEnqueuedEventProperties, Position

__all__ = ["PartitionLog", "Reader", "partition_for_key"]


class Reader(Protocol):
    """A receiver attached to a partition, as the partition's readers list holds it (``InMemoryReceiver``)."""

    @property
    def owner_level(self) -> int | None:
        """The receiver's owner level (None: none)."""
        ...

    def _steal(self, reason: str) -> None: ...


def partition_for_key(partition_key: str, partition_count: int) -> int:
    """The stable partition index for a partition key (same key, same partition, in every process)."""
    digest = hashlib.sha256(partition_key.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % partition_count


class PartitionLog:
    """One partition's log (events, sequence numbers, offsets, times) and its readers."""

    def __init__(self, partition_id: str) -> None:
        self.partition_id = partition_id
        self.events: list[Event] = []
        self.sequence_numbers: list[int] = []
        self.offsets: list[int] = []
        self.times: list[dt.datetime] = []
        self.next_offset = 0
        self.readers: dict[str, list[Reader]] = {}
        self.waiters: list[Callable[[], None]] = []
        self.faults: list[BaseException] = []
        self._last_enqueued: LastEnqueuedEventProperties | None = None

    def append(self, event: Event) -> None:
        self.events.append(event)
        self.sequence_numbers.append(event.sequence_number)
        self.offsets.append(int(event.offset))
        self.times.append(event.enqueued_time)
        self._last_enqueued = None
        waiters, self.waiters = self.waiters, []
        for wake in waiters:
            wake()

    def index_of(self, position: Position) -> int:
        """Index of the first event at or after ``position``."""
        kind, value, inclusive = position.kind, position.value, position.inclusive
        if kind == "earliest":
            return 0
        if kind == "latest":
            return len(self.events)
        if kind == "sequence_number":
            assert isinstance(value, int)
            keys: Sequence[Any] = self.sequence_numbers
        elif kind == "offset":
            assert isinstance(value, str)
            keys, value = self.offsets, int(value)
        else:
            keys = self.times
        return bisect.bisect_left(keys, value) if inclusive else bisect.bisect_right(keys, value)

    def last_enqueued(self, clock: Callable[[], dt.datetime]) -> LastEnqueuedEventProperties:
        """The newest event's properties, read at ``clock()`` (cached until the next append)."""
        cached = self._last_enqueued
        if cached is None:
            now = clock()
            if not self.events:
                cached = LastEnqueuedEventProperties(-1, "-1", None, now)
            else:
                last = self.events[-1]
                cached = LastEnqueuedEventProperties(last.sequence_number, last.offset, last.enqueued_time, now)
            self._last_enqueued = cached
        return cached
