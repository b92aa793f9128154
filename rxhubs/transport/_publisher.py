"""What a publish target is: :class:`Publisher`, and the :class:`OutgoingEvent` it sends.

``rxhubs.EventHub`` and ``rxhubs.testing.InMemoryEventHub`` are publishers; an azure-eventhub aio
``EventHubProducerClient`` becomes one through :class:`~rxhubs.transport._producer.ProducerPublisher`; a class of
your own is one when it has the method below. No Azure import here: the operator layer checks targets cheaply.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, overload, runtime_checkable

from rxhubs.errors import ConfigurationError

__all__ = ["EventColumns", "OutgoingEvent", "Publisher", "check_routing", "outgoing_events"]


@dataclass(frozen=True, slots=True)
class OutgoingEvent:
    """An event to publish: its body and application properties (the service assigns the rest).

    Attributes:
        body: The payload.
        properties: Application properties (str keys; values str, int, float, bool, bytes or None).

    Example:
        >>> OutgoingEvent(b'{"t": 21.5}', {"unit": "C"}).properties["unit"]
        'C'
    """

    body: bytes
    properties: Mapping[str, Any] = field(default_factory=dict)


class EventColumns(Sequence[OutgoingEvent]):
    """Events as columns, for a bulk send: their bodies, and one properties mapping for all or one per event.

    A sequence of :class:`OutgoingEvent` (made on access, for the SDK's send path and for errors), which the native
    send path encodes straight from the columns: no object per event. ``EventHub.publish`` takes it as it takes a
    list (the Spark writer's tasks send their rows so); the acknowledged prefix leaves it, as it leaves a list
    (``del events[:n]``).

    Example:
        >>> events = EventColumns([b"a", b"b", b"c"], {"unit": "C"})
        >>> len(events), events[1]
        (3, OutgoingEvent(body=b'b', properties={'unit': 'C'}))
        >>> del events[:2]
        >>> [e.body for e in events]
        [b'c']
    """

    __slots__ = ("bodies", "properties")

    def __init__(self, bodies: list[bytes], properties: Mapping[str, Any] | list[Mapping[str, Any]] | None = None):
        if isinstance(properties, list) and len(properties) != len(bodies):
            raise ConfigurationError(f"{len(bodies)} bodies but {len(properties)} properties mappings")
        self.bodies = bodies
        self.properties: Mapping[str, Any] | list[Mapping[str, Any]] = {} if properties is None else properties

    def __len__(self) -> int:
        return len(self.bodies)

    @overload
    def __getitem__(self, index: int) -> OutgoingEvent: ...

    @overload
    def __getitem__(self, index: slice) -> EventColumns: ...

    def __getitem__(self, index: int | slice) -> OutgoingEvent | EventColumns:
        props = self.properties
        if isinstance(index, slice):
            return EventColumns(self.bodies[index], props[index] if isinstance(props, list) else props)
        return OutgoingEvent(self.bodies[index], props[index] if isinstance(props, list) else props)

    def __delitem__(self, index: slice) -> None:
        del self.bodies[index]
        if isinstance(self.properties, list):
            del self.properties[index]

    def copy(self) -> EventColumns:
        """A new container over copies of the columns (the maps themselves are shared)."""
        props = self.properties
        return EventColumns(list(self.bodies), list(props) if isinstance(props, list) else props)

    def __repr__(self) -> str:
        return f"EventColumns({len(self.bodies)} events)"


@runtime_checkable
class Publisher(Protocol):
    """A target :func:`rxhubs.operators.publish` can send to: one method, awaited until the events are stored.

    ``publish`` sends ``events`` in order, all to ``partition_id``, or all with ``partition_key`` (the service
    hashes it to a partition), or, with neither, wherever the service puts them; in as few service batches as
    fit. It returns once the service acknowledged every event, and raises otherwise (after its own retries):
    an :class:`~rxhubs.errors.RxHubsError` says with ``retriable`` whether trying again may help. Events sent
    before a failure may be stored: a retry may duplicate them (at-least-once).

    ``rxhubs.EventHub`` and ``rxhubs.testing.InMemoryEventHub`` implement it; an azure-eventhub aio
    ``EventHubProducerClient`` given to ``publish`` is wrapped in one.

    Example:
        >>> class Printer:
        ...     eventhub_name = "console"
        ...     async def publish(self, events, *, partition_id=None, partition_key=None):
        ...         for event in events:
        ...             print(partition_key, event.body)
        >>> isinstance(Printer(), Publisher)
        True
    """

    async def publish(
        self,
        events: Sequence[OutgoingEvent],
        *,
        partition_id: str | None = None,
        partition_key: str | None = None,
    ) -> None:
        """Send ``events`` in order to one partition (or key); return once all were acknowledged."""
        ...


def check_routing(partition_id: object, partition_key: object) -> None:
    """Raise :class:`~rxhubs.errors.ConfigurationError` unless at most one of the two is a non-empty str.

    Example:
        >>> check_routing("0", None)
        >>> check_routing("0", "device-7")
        Traceback (most recent call last):
        rxhubs.errors.ConfigurationError: give partition_id or partition_key, not both
    """
    if partition_id is not None and (not isinstance(partition_id, str) or not partition_id):
        raise ConfigurationError(f"partition_id must be a non-empty str or None, got {partition_id!r}")
    if partition_key is not None and not isinstance(partition_key, str):
        raise ConfigurationError(f"partition_key must be a str or None, got {partition_key!r}")
    if partition_id is not None and partition_key is not None:
        raise ConfigurationError("give partition_id or partition_key, not both")


def outgoing_events(bodies: Iterable[bytes | str], properties: Mapping[str, Any] | None) -> list[OutgoingEvent]:
    """The events :meth:`EventHub.send` sends: each body (str as UTF-8) with the same properties.

    Example:
        >>> [e.body for e in outgoing_events(["a", b"b"], None)]
        [b'a', b'b']
    """
    if isinstance(bodies, bytes | str):
        raise ConfigurationError("bodies must be an iterable of bytes or str, not a single body")
    items = list(bodies)
    for body in items:
        if not isinstance(body, bytes | str):
            raise ConfigurationError(f"event bodies must be bytes or str, got {type(body).__name__}")
    props = {str(k): v for k, v in properties.items()} if properties else {}
    return [OutgoingEvent(b.encode("utf-8") if isinstance(b, str) else b, props) for b in items]
