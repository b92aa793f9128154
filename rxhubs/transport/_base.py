"""The hub and receiver protocols every transport implements, and a base class for receivers.

A *hub* knows one event hub (its namespace, name and partitions) and opens *receivers*. A
:class:`PartitionReceiver` reads one partition for one consumer group from one position, pull by pull:
``await receive_batch(max_count, max_wait)`` returns between 0 and ``max_count`` events, waiting at most
``max_wait`` seconds for the first one, and the next call continues exactly after the last event returned.

``receive_nowait(max_count)`` hands out what the receiver already holds, without waiting: partition streams
call it first and await ``receive_batch`` only when it returns nothing, so a busy partition costs no task per
batch. Every receiver implements both; :class:`ReceiverBase` carries the checks and the bookkeeping.

rxhubs awaits receivers through :func:`rxhubs._rx.from_coroutine`: the Azure receiver under asyncio, the
in-memory one also in virtual time (it waits only on the kernel's clock primitives).
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from types import TracebackType
from typing import Protocol, runtime_checkable

from rxhubs._models import (
    Event,
    EventHubProperties,
    LastEnqueuedEventProperties,
    PartitionContext,
    PartitionProperties,
    Position,
)
from rxhubs.errors import ConfigurationError, ReceiverClosedError

__all__ = ["Hub", "PartitionReceiver", "ReceiverBase", "check_receive_args"]

DEFAULT_CONSUMER_GROUP = "$Default"


@runtime_checkable
class PartitionReceiver(Protocol):
    """Pull-based reader of one partition (the .NET ``PartitionReceiver`` design).

    Example:
        >>> async def read_some(hub):  # doctest: +SKIP
        ...     async with hub.receiver("0", start=rxhubs.Position.earliest()) as receiver:
        ...         events = await receiver.receive_batch(100, max_wait=1.0)
    """

    @property
    def context(self) -> PartitionContext:
        """The partition and consumer group this receiver reads."""
        ...

    @property
    def position(self) -> Position:
        """Where the next batch starts: after the last event returned, or the start position."""
        ...

    @property
    def owner_level(self) -> int | None:
        """The receiver's owner level (epoch), if exclusive."""
        ...

    @property
    def last_enqueued_event_properties(self) -> LastEnqueuedEventProperties | None:
        """The partition's newest event as last reported with a delivery, if tracked."""
        ...

    async def receive_batch(self, max_count: int, max_wait: float | None = None) -> list[Event]:
        """Return 0..max_count events, waiting at most ``max_wait`` seconds for the first.

        Raises:
            ConfigurationError: ``max_count`` < 1 or ``max_wait`` < 0.
            ReceiverClosedError: The receiver was closed.
            OwnershipLostError: A reader with a higher owner level took the partition.
            NotFoundError: The hub, partition or consumer group does not exist.
        """
        ...

    def receive_nowait(self, max_count: int) -> list[Event]:
        """Return the events already received (0..max_count), without waiting or opening anything.

        Raises:
            The errors of :meth:`receive_batch` that are already known.
        """
        ...

    async def get_partition_properties(self) -> PartitionProperties:
        """The partition's current properties."""
        ...

    async def close(self) -> None:
        """Release the link now; idempotent."""
        ...

    async def __aenter__(self) -> PartitionReceiver: ...

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...


@runtime_checkable
class Hub(Protocol):
    """One event hub: its identity, its partitions, and receivers for them.

    ``rxhubs.EventHub`` (Azure, through azure-eventhub) and ``rxhubs.testing.InMemoryEventHub`` implement it;
    so can a wrapper of your own.

    Example:
        >>> from rxhubs.testing import InMemoryEventHub
        >>> isinstance(InMemoryEventHub(partition_count=2), Hub)
        True
    """

    @property
    def fully_qualified_namespace(self) -> str: ...

    @property
    def eventhub_name(self) -> str: ...

    async def get_properties(self) -> EventHubProperties:
        """Name, creation time and partition ids."""
        ...

    async def get_partition_ids(self) -> Sequence[str]:
        """The partition ids, in the service's order."""
        ...

    async def get_partition_properties(self, partition_id: str) -> PartitionProperties:
        """One partition's properties. Raises NotFoundError for an unknown partition."""
        ...

    def receiver(
        self,
        partition_id: str,
        consumer_group: str = DEFAULT_CONSUMER_GROUP,
        start: Position | None = None,
        owner_level: int | None = None,
        prefetch: int = 300,
        track_last_enqueued_event_properties: bool | None = None,
    ) -> PartitionReceiver:
        """A receiver for one partition; it opens on first use and must be closed (``async with``).

        ``track_last_enqueued_event_properties``: report the partition's newest event with each batch (for lag);
        None keeps the hub's own setting.
        """
        ...

    async def close(self) -> None:
        """Close every connection this hub opened."""
        ...


def check_receive_args(max_count: object, max_wait: object) -> None:
    """Validate ``receive_batch`` arguments, raising :class:`ConfigurationError`."""
    if isinstance(max_count, bool) or not isinstance(max_count, int) or max_count < 1:
        raise ConfigurationError(f"max_count must be an int >= 1, got {max_count!r}")
    if max_wait is not None and (
        isinstance(max_wait, bool) or not isinstance(max_wait, int | float) or max_wait < 0
    ):
        raise ConfigurationError(f"max_wait must be a number of seconds >= 0 or None, got {max_wait!r}")


def check_receiver_args(partition_id: object, consumer_group: object, owner_level: object, prefetch: object) -> None:
    """Validate ``hub.receiver`` arguments, raising :class:`ConfigurationError`."""
    if not isinstance(partition_id, str) or not partition_id:
        raise ConfigurationError(f"partition_id must be a non-empty str, got {partition_id!r}")
    if not isinstance(consumer_group, str) or not consumer_group:
        raise ConfigurationError(f"consumer_group must be a non-empty str, got {consumer_group!r}")
    bad_level = isinstance(owner_level, bool) or not isinstance(owner_level, int) or owner_level < 0
    if owner_level is not None and bad_level:
        raise ConfigurationError(f"owner_level must be an int >= 0 or None, got {owner_level!r}")
    if isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 1:
        raise ConfigurationError(f"prefetch must be an int >= 1, got {prefetch!r}")


class ReceiverBase(abc.ABC):
    """Optional base for receivers: argument checks, the closed state and the context-manager boilerplate.

    Subclasses implement :meth:`_receive`, :meth:`_take_ready` and :meth:`_close`.
    """

    def __init__(self, context: PartitionContext, start: Position, owner_level: int | None) -> None:
        self._context = context
        self._start = start
        self._last_sequence_number: int | None = None
        self._owner_level = owner_level
        self._closed = False
        self._last_enqueued: LastEnqueuedEventProperties | None = None

    @property
    def context(self) -> PartitionContext:
        return self._context

    @property
    def position(self) -> Position:
        last = self._last_sequence_number
        return self._start if last is None else Position.from_sequence_number(last)

    @property
    def owner_level(self) -> int | None:
        return self._owner_level

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called."""
        return self._closed

    @property
    def last_enqueued_event_properties(self) -> LastEnqueuedEventProperties | None:
        return self._last_enqueued

    async def receive_batch(self, max_count: int, max_wait: float | None = None) -> list[Event]:
        check_receive_args(max_count, max_wait)
        self._check_open()
        events = await self._receive(max_count, max_wait)
        if events:
            self._advance(events[-1])
        return events

    def receive_nowait(self, max_count: int) -> list[Event]:
        check_receive_args(max_count, 0)
        self._check_open()
        events = self._take_ready(max_count)
        if events:
            self._advance(events[-1])
        return events

    def _advance(self, last: Event) -> None:
        self._last_sequence_number = last.sequence_number

    def _check_open(self) -> None:
        if self._closed:
            raise ReceiverClosedError(f"receiver for partition {self._context.partition_id} is closed")

    @abc.abstractmethod
    async def _receive(self, max_count: int, max_wait: float | None) -> list[Event]: ...

    @abc.abstractmethod
    def _take_ready(self, max_count: int) -> list[Event]:
        """Up to ``max_count`` events available now; raise a known error; never wait."""

    @abc.abstractmethod
    async def get_partition_properties(self) -> PartitionProperties: ...

    async def _close(self) -> None:  # noqa: B027 - optional hook
        """Release resources; called once."""

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self._close()

    async def __aenter__(self) -> ReceiverBase:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    def __repr__(self) -> str:
        c = self._context
        return (
            f"{type(self).__name__}(eventhub_name={c.eventhub_name!r}, consumer_group={c.consumer_group!r}, "
            f"partition_id={c.partition_id!r}, position={self.position!r}, closed={self._closed})"
        )
