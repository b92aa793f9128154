"""An in-process event hub with the service's semantics, for tests and demos.

Partitions are append-only lists with real sequence numbers (from 0), offsets (the byte position of the
event in the partition, as a string) and enqueued times. Several receivers may read one partition, each at
its own position. Owner levels behave as in the service: a receiver with an equal or higher owner level takes the
partition and the older one's next pull raises :class:`~rxhubs.errors.OwnershipLostError`; a lower level
is refused while a higher one reads; at most five receivers without an owner level per partition and
consumer group.

Receivers wait for events with the kernel's :class:`~rxhubs._rx.Signal`, so the same ``receive_batch`` waits
in real time under asyncio and in virtual time when a pipeline runs under ``reactivex.testing.TestScheduler``.
A partition's log is ``_memory_partition.PartitionLog``; the receiver is ``_memory_receiver.InMemoryReceiver``.
"""

from __future__ import annotations

import datetime as dt
import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from rxhubs._models import (
    Event,
    EventHubProperties,
    PartitionContext,
    PartitionProperties,
    Position,
)
from rxhubs.errors import (
    ConfigurationError,
    NotFoundError,
)
from rxhubs.testing._memory_partition import PartitionLog, partition_for_key
from rxhubs.testing._memory_receiver import InMemoryReceiver
from rxhubs.transport._base import (
    DEFAULT_CONSUMER_GROUP,
    check_receiver_args,
)
from rxhubs.transport._publisher import OutgoingEvent, check_routing

__all__ = ["InMemoryEventHub", "InMemoryReceiver"]

UTC = dt.UTC

Body = bytes | str


def _utcnow() -> dt.datetime:
    return dt.datetime.now(UTC)


class InMemoryEventHub:
    """An event hub in this process, with the same hub protocol as :class:`rxhubs.EventHub`.

    Args:
        partition_count: How many partitions ("0", "1", ...).
        eventhub_name: The hub's name.
        fully_qualified_namespace: The namespace reported in partition contexts.
        consumer_groups: Consumer groups besides ``$Default``; receivers for others raise ``NotFoundError``.
        clock: Returns the current UTC time for enqueued times (the test kit passes virtual time).

    Example:
        >>> import asyncio
        >>> hub = InMemoryEventHub(partition_count=2)
        >>> [e.sequence_number for e in hub.send([b"a", b"b"], partition_id="1")]
        [0, 1]
        >>> async def read():
        ...     async with hub.receiver("1") as receiver:
        ...         return [e.body for e in await receiver.receive_batch(10, max_wait=0)]
        >>> asyncio.run(read())
        [b'a', b'b']
    """

    def __init__(
        self,
        partition_count: int = 4,
        *,
        eventhub_name: str = "telemetry",
        fully_qualified_namespace: str = "inmemory.servicebus.local",
        consumer_groups: Iterable[str] = (),
        clock: Callable[[], dt.datetime] | None = None,
    ) -> None:
        if isinstance(partition_count, bool) or not isinstance(partition_count, int) or partition_count < 1:
            raise ConfigurationError(f"partition_count must be an int >= 1, got {partition_count!r}")
        self._name = eventhub_name
        self._namespace = fully_qualified_namespace
        self._consumer_groups = {DEFAULT_CONSUMER_GROUP, *consumer_groups}
        self._partitions = {str(i): PartitionLog(str(i)) for i in range(partition_count)}
        self._ids = tuple(self._partitions)
        self._round_robin = itertools.cycle(self._ids)
        self.clock: Callable[[], dt.datetime] = clock or _utcnow
        self.created_at = self.clock()

    @property
    def fully_qualified_namespace(self) -> str:
        return self._namespace

    @property
    def eventhub_name(self) -> str:
        return self._name

    @property
    def partition_ids(self) -> tuple[str, ...]:
        """The partition ids."""
        return self._ids

    def _partition(self, partition_id: str) -> PartitionLog:
        try:
            return self._partitions[partition_id]
        except KeyError:
            raise NotFoundError(
                f"partition {partition_id!r} not found in event hub {self._name!r} (ids: {', '.join(self._ids)})"
            ) from None

    # -- producing -----------------------------------------------------------------------------------------
    def send(
        self,
        bodies: Iterable[Body] | Body,
        partition_id: str | None = None,
        partition_key: str | None = None,
        properties: Mapping[str, Any] | None = None,
    ) -> list[Event]:
        """Append events and return them as stored (with sequence numbers, offsets and times).

        Without ``partition_id`` or ``partition_key`` the events of one call go to one partition, chosen
        round robin (like a batch sent to the hub); a key always maps to the same partition. Raises
        ``ConfigurationError`` (both routings, a body that is not bytes/str) or ``NotFoundError``.
        """
        if isinstance(bodies, bytes | str):
            bodies = [bodies]
        props = dict(properties or {})
        items: list[tuple[bytes, Mapping[str, Any]]] = []
        for body in bodies:
            if isinstance(body, str):
                body = body.encode("utf-8")
            elif not isinstance(body, bytes):
                raise ConfigurationError(f"event bodies must be bytes or str, got {type(body).__name__}")
            items.append((body, props))
        return self._append(items, partition_id, partition_key)

    async def publish(
        self,
        events: Sequence[OutgoingEvent],
        *,
        partition_id: str | None = None,
        partition_key: str | None = None,
    ) -> None:
        """Append events, each with its own properties (the :class:`~rxhubs.operators.Publisher` method).

        All go to one partition: ``partition_id``, the one ``partition_key`` maps to, or the next round robin.
        Raises ``ConfigurationError`` (bad routing, a body that is not bytes) or ``NotFoundError``.
        """
        check_routing(partition_id, partition_key)
        items = []
        for event in events:
            if not isinstance(event.body, bytes):
                raise ConfigurationError(f"event bodies must be bytes, got {type(event.body).__name__}")
            items.append((event.body, dict(event.properties)))
        self._append(items, partition_id, partition_key)

    def _append(
        self, items: Sequence[tuple[bytes, Mapping[str, Any]]], partition_id: str | None, partition_key: str | None
    ) -> list[Event]:
        if partition_id is not None and partition_key is not None:
            raise ConfigurationError("give partition_id or partition_key, not both")
        if partition_id is not None:
            partition = self._partition(partition_id)
        elif partition_key is not None:
            partition = self._partitions[self._ids[partition_for_key(partition_key, len(self._ids))]]
        else:
            partition = self._partitions[next(self._round_robin)]
        now = self.clock()
        stored: list[Event] = []
        for body, props in items:
            seq = partition.events[-1].sequence_number + 1 if partition.events else 0
            event = Event(
                body=body,
                sequence_number=seq,
                offset=str(partition.next_offset),
                enqueued_time=now,
                partition_key=partition_key,
                properties=props,
                system_properties={},
            )
            partition.next_offset += len(body) + 64
            partition.append(event)
            stored.append(event)
        return stored

    def events(self, partition_id: str) -> tuple[Event, ...]:
        """Everything stored in a partition, in order."""
        return tuple(self._partition(partition_id).events)

    def add_partitions(self, partition_count: int) -> tuple[str, ...]:
        """Grow the hub to ``partition_count`` partitions, as the service's premium tier can; returns the ids.

        New partitions are empty and readable at once; ``get_partition_ids`` lists them, and sends without a
        partition id spread over every partition from now on (partition keys may map elsewhere, as in the
        service). Receivers of the old partitions are not disturbed.

        Raises:
            ConfigurationError: Fewer partitions than now (a hub never shrinks), or not an int.

        Example:
            >>> hub = InMemoryEventHub(partition_count=2)
            >>> hub.add_partitions(4)
            ('0', '1', '2', '3')
        """
        count = partition_count
        if isinstance(count, bool) or not isinstance(count, int) or count < len(self._ids):
            raise ConfigurationError(
                f"partition_count must be an int >= {len(self._ids)} (partitions are never removed), got {count!r}"
            )
        for i in range(len(self._ids), count):
            self._partitions[str(i)] = PartitionLog(str(i))
        self._ids = tuple(self._partitions)
        self._round_robin = itertools.cycle(self._ids)
        return self._ids

    def inject_error(self, partition_id: str, error: BaseException) -> None:
        """Make the next pull of any receiver of this partition raise ``error`` (once per call)."""
        self._partition(partition_id).faults.append(error)

    # -- properties ----------------------------------------------------------------------------------------
    def properties(self) -> EventHubProperties:
        """Synchronous form of :meth:`get_properties`."""
        return EventHubProperties(self._name, self.created_at, self._ids)

    def partition_properties(self, partition_id: str) -> PartitionProperties:
        """Synchronous form of :meth:`get_partition_properties`."""
        p = self._partition(partition_id)
        last = p.events[-1] if p.events else None
        return PartitionProperties(
            eventhub_name=self._name,
            partition_id=partition_id,
            beginning_sequence_number=p.events[0].sequence_number if p.events else 0,
            last_enqueued_sequence_number=last.sequence_number if last else -1,
            last_enqueued_offset=last.offset if last else "-1",
            last_enqueued_time_utc=last.enqueued_time if last else None,
            is_empty=last is None,
        )

    async def get_properties(self) -> EventHubProperties:
        return self.properties()

    async def get_partition_ids(self) -> Sequence[str]:
        return self._ids

    async def get_partition_properties(self, partition_id: str) -> PartitionProperties:
        return self.partition_properties(partition_id)

    # -- receiving -----------------------------------------------------------------------------------------
    def receiver(
        self,
        partition_id: str,
        consumer_group: str = DEFAULT_CONSUMER_GROUP,
        start: Position | None = None,
        owner_level: int | None = None,
        prefetch: int = 300,
        track_last_enqueued_event_properties: bool | None = None,
    ) -> InMemoryReceiver:
        """A receiver of one partition; it attaches on its first pull.

        Raises:
            ConfigurationError: Bad arguments (an empty id, a negative owner level, a start that is not a Position).
            NotFoundError: Unknown partition or consumer group.
        """
        check_receiver_args(partition_id, consumer_group, owner_level, prefetch)
        if start is None:
            start = Position.earliest()
        elif not isinstance(start, Position):
            raise ConfigurationError(f"start must be an rxhubs.Position, got {type(start).__name__}")
        partition = self._partition(partition_id)
        if consumer_group not in self._consumer_groups:
            raise NotFoundError(f"consumer group {consumer_group!r} not found in event hub {self._name!r}")
        context = PartitionContext(self._namespace, self._name, consumer_group, partition_id)
        track = track_last_enqueued_event_properties is not False
        return InMemoryReceiver(self, partition, context, start, owner_level, track)

    async def close(self) -> None:
        """Nothing to release; present for the hub protocol."""

    async def __aenter__(self) -> InMemoryEventHub:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"InMemoryEventHub(eventhub_name={self._name!r}, partition_count={len(self._ids)})"
