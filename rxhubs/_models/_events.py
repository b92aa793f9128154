"""What flows through pipelines: events, partition contexts, positions, properties (frozen, Azure's field names).

Batches of events are :mod:`rxhubs._batch`; the records stores keep are :mod:`rxhubs._models._records`.
"""

from __future__ import annotations

import datetime as _dt
import enum
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from rxhubs.errors import ConfigurationError

__all__ = [
    "CloseReason",
    "Event",
    "ErrorContext",
    "EventHubProperties",
    "LastEnqueuedEventProperties",
    "PartitionContext",
    "PartitionProperties",
    "Position",
]

UTC = _dt.UTC


def _utc(value: _dt.datetime) -> _dt.datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


@dataclass(frozen=True, slots=True, eq=False)
class Event:
    """One event as stored in a partition.

    Attributes:
        body: The payload bytes.
        sequence_number: Position in the partition, from 0, gap-free and increasing.
        offset: The service's opaque position string (increasing, not contiguous).
        enqueued_time: When the service accepted the event (UTC).
        partition_key: The key the sender hashed on, if any.
        properties: Application properties set by the sender.
        system_properties: Service-set annotations (``x-opt-*``), as received.

    Example:
        >>> import datetime as dt
        >>> e = Event(b'{"t": 21.5}', 7, "896", dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc))
        >>> e.body_as_json()["t"], e.body_as_str()
        (21.5, '{"t": 21.5}')
    """

    body: bytes
    sequence_number: int
    offset: str
    enqueued_time: _dt.datetime
    partition_key: str | None = None
    properties: Mapping[str, Any] = field(default_factory=dict)
    system_properties: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def _unchecked(
        cls,
        body: bytes,
        sequence_number: int,
        offset: str,
        enqueued_time: _dt.datetime,
        partition_key: str | None,
        properties: Mapping[str, Any],
        system_properties: Mapping[str, Any],
    ) -> Event:
        """Build an event without the dataclass ``__init__`` (a third of its cost), for transports' hot paths.

        Every field is given; the result is the same frozen, equal-comparing record.
        """
        event = _new(cls)
        _SET_BODY(event, body)
        _SET_SEQUENCE(event, sequence_number)
        _SET_OFFSET(event, offset)
        _SET_TIME(event, enqueued_time)
        _SET_KEY(event, partition_key)
        _SET_PROPERTIES(event, properties)
        _SET_SYSTEM(event, system_properties)
        return event

    def _fields(self) -> tuple[Any, ...]:
        return (
            self.body, self.sequence_number, self.offset, self.enqueued_time, self.partition_key,
            self.properties, self.system_properties,
        )

    def __eq__(self, other: object) -> bool:
        # Any two events with equal fields are equal, whichever transport made them (a transport may hand
        # out a subclass that decodes its fields on first use: rxhubs.transport._convert).
        if isinstance(other, Event):
            return self._fields() == other._fields()
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._fields())

    def body_as_str(self, encoding: str = "utf-8") -> str:
        """The body decoded as text."""
        return self.body.decode(encoding)

    def body_as_json(self, encoding: str = "utf-8") -> Any:
        """The body parsed as JSON."""
        return json.loads(self.body.decode(encoding))


_new = object.__new__
_SET_BODY, _SET_SEQUENCE, _SET_OFFSET, _SET_TIME, _SET_KEY, _SET_PROPERTIES, _SET_SYSTEM = (
    Event.__dict__[name].__set__
    for name in (
        "body", "sequence_number", "offset", "enqueued_time", "partition_key", "properties", "system_properties"
    )
)


@dataclass(frozen=True, slots=True)
class PartitionContext:
    """Which partition of which hub, read by which consumer group.

    Example:
        >>> PartitionContext("ns.servicebus.windows.net", "telemetry", "$Default", "0").partition_id
        '0'
    """

    fully_qualified_namespace: str
    eventhub_name: str
    consumer_group: str
    partition_id: str


#: The operations an error hook is told about (``ErrorContext.operation``).
OPERATIONS = ("receive", "process", "publish", "checkpoint", "claim", "list", "release", "initialize", "close")


@dataclass(frozen=True, slots=True)
class ErrorContext(PartitionContext):
    """The context an error hook (``on_partition_error``) receives: the partition, and what failed.

    Attributes:
        operation: ``"receive"``, ``"process"``, ``"publish"``, ``"checkpoint"``, ``"claim"``, ``"list"``,
            ``"release"``, ``"initialize"`` or ``"close"``. Balancing failures (``"list"``, ``"claim"``,
            ``"release"``) concern the consumer group rather than one partition: their ``partition_id`` is ``""``.

    Example:
        >>> context = ErrorContext("ns", "telemetry", "$Default", "3", "process")
        >>> context.partition_id, context.operation, isinstance(context, PartitionContext)
        ('3', 'process', True)
    """

    operation: str = ""


@dataclass(frozen=True, slots=True)
class LastEnqueuedEventProperties:
    """What the service last told us about the newest event of a partition (for lag).

    Attributes:
        sequence_number: Sequence number of the newest event (-1 if the partition is empty).
        offset: Its offset.
        enqueued_time: When it was enqueued.
        retrieval_time: When this information was read.

    Example:
        >>> last = LastEnqueuedEventProperties(1041, "98304", None, None)
        >>> last.sequence_number - 1000  # lag behind a consumer at sequence number 1000
        41
    """

    sequence_number: int
    offset: str | None
    enqueued_time: _dt.datetime | None
    retrieval_time: _dt.datetime | None


@dataclass(frozen=True, slots=True)
class PartitionProperties:
    """A partition's state as the service reports it.

    Example:
        >>> p = PartitionProperties("telemetry", "0", 0, 41, "4096", None, False)
        >>> p.last_enqueued_sequence_number - p.beginning_sequence_number + 1
        42
    """

    eventhub_name: str
    partition_id: str
    beginning_sequence_number: int
    last_enqueued_sequence_number: int
    last_enqueued_offset: str
    last_enqueued_time_utc: _dt.datetime | None
    is_empty: bool


@dataclass(frozen=True, slots=True)
class EventHubProperties:
    """An event hub's name, creation time and partition ids.

    Example:
        >>> EventHubProperties("telemetry", None, ("0", "1")).partition_ids
        ('0', '1')
    """

    name: str
    created_at: _dt.datetime | None
    partition_ids: tuple[str, ...]


PositionKind = Literal["earliest", "latest", "offset", "sequence_number", "enqueued_time"]


def is_offset(value: object) -> bool:
    """Whether ``value`` can be an event's offset: a non-empty string of visible characters, no quote.

    Offsets are opaque strings: numbers on a Standard namespace (``"4096"``), the service's geo-replicated form
    on a namespace with geo-replication, which changes at a promotion (docs/operations.md, "Geo-replication").
    Only what cannot be one (empty, spaces, a quote, which would break the receiver's filter) is refused.

    Example:
        >>> is_offset("4096"), is_offset("1:0:4096"), is_offset(""), is_offset("a b"), is_offset(4096)
        (True, True, False, False, False)
    """
    return isinstance(value, str) and value.isprintable() and bool(value) and " " not in value and "'" not in value


@dataclass(frozen=True, slots=True)
class Position:
    """Where a receiver starts in a partition.

    Build one with the class methods; ``inclusive`` says whether the event at the position itself is read.

    Example:
        >>> Position.from_sequence_number(41).inclusive
        False
        >>> Position.earliest()
        Position(kind='earliest', value=None, inclusive=True)
    """

    kind: PositionKind
    value: int | str | _dt.datetime | None = None
    inclusive: bool = False

    def __post_init__(self) -> None:
        kind, value = self.kind, self.value
        if kind in ("earliest", "latest"):
            if value is not None:
                raise ConfigurationError(f"Position.{kind}() takes no value")
        elif kind == "sequence_number":
            if isinstance(value, bool) or not isinstance(value, int) or value < -1:
                raise ConfigurationError(f"sequence number must be an int >= -1, got {value!r}")
        elif kind == "offset":
            if not is_offset(value):
                raise ConfigurationError(f"offset must be a non-empty string without spaces or quotes (digits, or a"
                                         f" geo-replicated namespace's offset), got {value!r}")
        elif kind == "enqueued_time":
            if not isinstance(value, _dt.datetime):
                raise ConfigurationError(f"enqueued time must be a datetime, got {value!r}")
            object.__setattr__(self, "value", _utc(value))
        else:
            raise ConfigurationError(f"unknown position kind {kind!r}")
        if not isinstance(self.inclusive, bool):
            raise ConfigurationError(f"inclusive must be a bool, got {self.inclusive!r}")

    @classmethod
    def earliest(cls) -> Position:
        """The first event still retained in the partition."""
        return cls("earliest", None, True)

    @classmethod
    def latest(cls) -> Position:
        """Only events enqueued after the receiver opens."""
        return cls("latest", None, False)

    @classmethod
    def from_sequence_number(cls, sequence_number: int, *, inclusive: bool = False) -> Position:
        """After (or at, when inclusive) the event with this sequence number."""
        return cls("sequence_number", sequence_number, inclusive)

    @classmethod
    def from_offset(cls, offset: str | int, *, inclusive: bool = False) -> Position:
        """After (or at, when inclusive) the event with this offset."""
        if isinstance(offset, bool) or not isinstance(offset, str | int):
            raise ConfigurationError(f"offset must be a str or int, got {offset!r}")
        return cls("offset", str(offset), inclusive)

    @classmethod
    def from_enqueued_time(cls, enqueued_time: _dt.datetime, *, inclusive: bool = False) -> Position:
        """The first event enqueued after (or at, when inclusive) this time."""
        return cls("enqueued_time", enqueued_time, inclusive)

    @classmethod
    def coerce(cls, value: object, *, inclusive: bool = False) -> Position:
        """Accept a Position, or the forms azure-eventhub's ``starting_position`` takes.

        ``"-1"`` is the earliest event, ``"@latest"`` the end of the partition, an int a sequence number, a
        datetime an enqueued time, any other string with a digit an offset (digits, or a geo-replicated
        namespace's opaque form); ``inclusive`` is the SDK's ``starting_position_inclusive`` (for the last three).

        Raises:
            ConfigurationError: For anything else.

        Example:
            >>> Position.coerce(41, inclusive=True)
            Position(kind='sequence_number', value=41, inclusive=True)
            >>> Position.coerce("@latest").kind, Position.coerce("-1").kind, Position.coerce("8192").kind
            ('latest', 'earliest', 'offset')
            >>> Position.coerce("1:0:8192")
            Position(kind='offset', value='1:0:8192', inclusive=False)
        """
        if isinstance(value, Position):
            return value
        if value == "-1" or value == "earliest" or value == "@earliest":
            return cls.earliest()
        if value == "@latest" or value == "latest":
            return cls.latest()
        if isinstance(value, int) and not isinstance(value, bool):
            return cls.from_sequence_number(value, inclusive=inclusive)
        if isinstance(value, _dt.datetime):
            return cls.from_enqueued_time(value, inclusive=inclusive)
        if isinstance(value, str) and is_offset(value) and any(c.isdigit() for c in value):
            return cls.from_offset(value, inclusive=inclusive)  # digits, or a geo-replicated offset (has digits)
        raise ConfigurationError(f"not a position: {value!r} (use rxhubs.Position.earliest(), ...)")


class CloseReason(enum.Enum):
    """Why a partition stream ended.

    ``SHUTDOWN``: this consumer stopped (disposed, interrupted, completed).
    ``OWNERSHIP_LOST``: another consumer took the partition, or this one handed it over.

    Example:
        >>> CloseReason.OWNERSHIP_LOST.value
        'ownership_lost'
    """

    SHUTDOWN = "shutdown"
    OWNERSHIP_LOST = "ownership_lost"
