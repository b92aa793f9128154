"""The contiguous prefix of a partition's batches: what a checkpoint may cover, whatever order batches arrive in."""

from __future__ import annotations

from collections import deque
from typing import Any, TypeVar

from rxhubs._batch import Origin
from rxhubs._models import Event

__all__ = ["ContiguousPrefix"]

_RETIRED = 16  # reads remembered as finished, so their stragglers are ignored

T = TypeVar("T")


class ContiguousPrefix:
    """Tracks which batches of one partition have been seen, by their place in their read (:class:`Origin`).

    A checkpoint may cover a batch only when every batch before it in the same read was seen too: if a
    pipeline reorders batches (a ``flat_map`` over async work), the prefix stops at the first one still
    missing, and the events after it are not checkpointed until it arrives.

    Example:
        >>> import datetime as dt
        >>> t = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
        >>> read, events = object(), [Event(b"", n, str(n), t) for n in range(3)]
        >>> prefix = ContiguousPrefix()
        >>> prefix.advance(Origin(read, 1, events[1]), events[1])   # batch 1 before batch 0: no progress
        (None, True)
        >>> prefix.advance(Origin(read, 0, events[0]), events[0])   # 0 arrives: the prefix covers 0 and 1
        (Event(body=b'', sequence_number=1, ...), False)
    """

    __slots__ = ("_ahead", "_next", "_read", "_retired")

    def __init__(self) -> None:
        self._read: object | None = None
        self._next = 0
        self._ahead: dict[int, tuple[Event | None, Any]] = {}
        self._retired: deque[object] = deque(maxlen=_RETIRED)

    def advance(self, origin: Origin, position: Event | None) -> tuple[Event | None, bool]:
        """Take a batch in; ``position`` is the event its checkpoint would record (None: nothing).

        Returns:
            The event the prefix now ends with, if it moved and ends with one (else None), and whether the
            batch arrived ahead of one still missing.
        """
        newest, reordered, _ = self.advance_with(origin, position, None)
        return newest, reordered

    def advance_with(self, origin: Origin, position: Event | None, payload: T) -> tuple[Event | None, bool, list[T]]:
        """:meth:`advance`, with a payload per batch (its state deltas) that comes back once the prefix covers it.

        Returns:
            As :meth:`advance`, and the payloads of the batches the prefix now covers, in their read order
            (empty when the batch waits behind a missing one, or was seen already).
        """
        if origin.read is not self._read:
            if any(origin.read is read for read in self._retired):
                return None, False, []  # a straggler of a read that has ended
            if self._read is not None:
                self._retired.append(self._read)
            self._read, self._next, self._ahead = origin.read, 0, {}
        index = origin.index
        if index < self._next or index in self._ahead:
            return None, False, []  # seen already
        if index > self._next:
            self._ahead[index] = (position, payload)
            return None, True, []
        newest, released = position, [payload]
        self._next = index + 1
        while self._next in self._ahead:
            later, carried = self._ahead.pop(self._next)
            released.append(carried)
            if later is not None:
                newest = later
            self._next += 1
        return newest, False, released
