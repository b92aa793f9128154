"""Where bytes become an :class:`~rxhubs.Event`: azure-eventhub's received ``EventData``, decoded on first use.

This is the per-event hot path of the Azure transport. The receiver wraps each received ``EventData`` in a
:class:`ReceivedEvent` (one small object, about 0.2 us) and decodes a field only when something reads it:
a pipeline that reads bodies and sequence numbers never pays for properties, offsets or times
(:func:`event_from_sdk`, the eager conversion, cost about 3 us per event). System properties stay lazy
even once read (:class:`SystemProperties`). The direct receive path's pyamqp messages:
:mod:`rxhubs.transport._convert_messages`.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import ItemsView, Iterator, KeysView, Mapping, ValuesView
from typing import Any

from azure.eventhub import EventData
from azure.eventhub.amqp import AmqpMessageBodyType

from rxhubs._models import Event, LastEnqueuedEventProperties

__all__ = [
    "ReceivedEvent",
    "SystemProperties",
    "event_from_sdk",
    "last_enqueued_from_sdk",
    "received_events",
]

UTC = _dt.UTC

_SEQ = b"x-opt-sequence-number"
_OFFSET = b"x-opt-offset"
_ENQUEUED = b"x-opt-enqueued-time"
_PKEY = b"x-opt-partition-key"
_DATA = AmqpMessageBodyType.DATA
_fromtimestamp = _dt.datetime.fromtimestamp

# Decoded names of the keys seen most (system properties repeat on every event).
_KEY_CACHE: dict[bytes, str] = {}


def key_name(key: Any) -> str:
    """An AMQP map key as text: bytes decoded as UTF-8 (the first 1,024 distinct ones cached), others by ``str``."""
    if key.__class__ is bytes:
        name = _KEY_CACHE.get(key)
        if name is None:
            name = key.decode("utf-8", "replace")
            if len(_KEY_CACHE) < 1024:
                _KEY_CACHE[key] = name
        return name
    return key if key.__class__ is str else str(key)


def _str_map(items: Mapping[Any, Any]) -> dict[str, Any]:
    """Keys to str (:func:`key_name`); bytes values to str when they are UTF-8 (AMQP hands strings as bytes)."""
    out: dict[str, Any] = {}
    names = _KEY_CACHE
    for key, value in items.items():
        name = names.get(key) if key.__class__ is bytes else None
        if name is None:
            name = key_name(key)
        if value.__class__ is bytes:
            try:
                value = value.decode("utf-8")
            except UnicodeDecodeError:
                pass
        out[name] = value
    return out


# The AMQP properties section, as the SDK names its entries among system properties.
_MESSAGE_PROPERTIES = (
    ("message-id", "message_id"),
    ("user-id", "user_id"),
    ("to", "to"),
    ("subject", "subject"),
    ("reply-to", "reply_to"),
    ("correlation-id", "correlation_id"),
    ("content-type", "content_type"),
    ("content-encoding", "content_encoding"),
    ("absolute-expiry-time", "absolute_expiry_time"),
    ("creation-time", "creation_time"),
    ("group-id", "group_id"),
    ("group-sequence", "group_sequence"),
    ("reply-to-group-id", "reply_to_group_id"),
)


class SystemProperties(Mapping[str, Any]):
    """A received event's service-set properties (``x-opt-*`` annotations and the AMQP properties section).

    Decoded on first use: most consumers never look, and decoding them for every event would cost about a
    third of the conversion. Behaves as a read-only dict with str keys (it equals, and pickles as, one).

    Example:
        >>> sp = SystemProperties({b"x-opt-sequence-number": 7, b"x-opt-offset": b"896"}, None)
        >>> sp["x-opt-offset"], len(sp), sp == {"x-opt-sequence-number": 7, "x-opt-offset": "896"}
        ('896', 2, True)
    """

    __slots__ = ("_annotations", "_data", "_properties")

    def __init__(self, annotations: Mapping[Any, Any] | None, properties: Any) -> None:
        self._annotations = annotations
        self._properties = properties
        self._data: dict[str, Any] | None = None

    def _load(self) -> dict[str, Any]:
        data = self._data
        if data is None:
            data = {}
            props = self._properties
            if props is not None:
                for name, attribute in _MESSAGE_PROPERTIES:
                    value = getattr(props, attribute, None)
                    if value:
                        data[name] = value.decode("utf-8", "replace") if value.__class__ is bytes else value
            if self._annotations:
                data.update(_str_map(self._annotations))
            self._data = data
            self._annotations = self._properties = None
        return data

    def __getitem__(self, key: str) -> Any:
        return self._load()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._load())

    def __len__(self) -> int:
        return len(self._load())

    # The dict's own methods: Mapping's mixins go through __getitem__ per key (and get() through a KeyError).
    def __contains__(self, key: object) -> bool:
        return key in self._load()

    def get(self, key: str, default: Any = None) -> Any:
        return self._load().get(key, default)

    def keys(self) -> KeysView[str]:
        return self._load().keys()

    def values(self) -> ValuesView[Any]:
        return self._load().values()

    def items(self) -> ItemsView[str, Any]:
        return self._load().items()

    def __repr__(self) -> str:
        return repr(self._load())

    def __reduce__(self) -> tuple[Any, ...]:
        return (dict, (self._load(),))


def _body_bytes(raw: Any) -> bytes:
    body_type = raw.body_type
    body = raw.body
    if body_type is _DATA:
        return b"".join(body)
    if isinstance(body, bytes):
        return body
    if isinstance(body, str):
        return body.encode("utf-8")
    if body is None:
        return b""
    if body_type == AmqpMessageBodyType.SEQUENCE:
        body = list(body)
    return str(body).encode("utf-8")


def _sequence_number(data: EventData) -> int:
    annotations = data.raw_amqp_message.annotations
    assert annotations is not None  # the service sets x-opt-sequence-number on every event
    return int(annotations[_SEQ])


def _offset(data: EventData) -> str:
    offset = (data.raw_amqp_message.annotations or {}).get(_OFFSET)
    return offset.decode("ascii") if offset.__class__ is bytes else str(offset)


def _enqueued_time(data: EventData) -> _dt.datetime:
    enqueued = (data.raw_amqp_message.annotations or {}).get(_ENQUEUED)
    if isinstance(enqueued, int | float):
        return _fromtimestamp(enqueued / 1000, UTC)
    return enqueued if isinstance(enqueued, _dt.datetime) else _fromtimestamp(0, UTC)


def _partition_key(data: EventData) -> str | None:
    key = (data.raw_amqp_message.annotations or {}).get(_PKEY)
    return None if key is None else key.decode("utf-8", "replace") if key.__class__ is bytes else str(key)


def _properties(data: EventData) -> dict[str, Any]:
    app = data.raw_amqp_message.application_properties
    return _str_map(app) if app else {}


def _system_properties(data: EventData) -> SystemProperties:
    raw = data.raw_amqp_message
    return SystemProperties(raw.annotations or {}, raw.properties)


def _body(data: EventData) -> bytes:
    return _body_bytes(data.raw_amqp_message)


_DECODERS = (
    ("body", _body),
    ("sequence_number", _sequence_number),
    ("offset", _offset),
    ("enqueued_time", _enqueued_time),
    ("partition_key", _partition_key),
    ("properties", _properties),
    ("system_properties", _system_properties),
)


class ReceivedEvent(Event):
    """An :class:`~rxhubs.Event` over a received azure-eventhub ``EventData``, each field decoded on first read.

    It is an ``Event`` in every way a pipeline can tell: the same fields, values and methods, immutable, equal
    to an ``Event`` with the same fields; it pickles and copies as a plain ``Event``, and
    ``dataclasses.replace`` gives a plain ``Event``. Built by the Azure receiver only (:func:`received_events`).

    Example:
        >>> data = EventData(b"hi")
        >>> data.raw_amqp_message.annotations = {b"x-opt-sequence-number": 7, b"x-opt-offset": b"896"}
        >>> e = received_events([data])[0]
        >>> e.body, e.sequence_number, e.offset, isinstance(e, Event), e == event_from_sdk(data)
        (b'hi', 7, '896', True, True)
    """

    __slots__ = ("_data",)

    _data: EventData

    def __new__(cls, *args: Any, **kwargs: Any) -> ReceivedEvent:
        # Calling the class (dataclasses.replace, copy) makes a plain, fully decoded Event.
        return Event(*args, **kwargs)  # type: ignore[return-value]

    def __reduce__(self) -> tuple[Any, ...]:
        return (Event._unchecked, self._fields())


def _lazy_field(name: str, decode: Any) -> property:
    slot = Event.__dict__[name]
    get, store = slot.__get__, slot.__set__

    def read(self: ReceivedEvent) -> Any:
        try:
            return get(self, ReceivedEvent)
        except AttributeError:  # not decoded yet
            value = decode(self._data)
            store(self, value)
            return value

    return property(read, doc=f"``Event.{name}``, decoded on first read.")


for _name, _decode in _DECODERS:
    setattr(ReceivedEvent, _name, _lazy_field(_name, _decode))

_SET_DATA = ReceivedEvent.__dict__["_data"].__set__


def received_events(batch: list[EventData]) -> list[Event]:
    """Wrap a received batch: one :class:`ReceivedEvent` per ``EventData``, nothing decoded yet.

    An event without a sequence number (its annotations lost to a damaged section code) raises the retriable
    ``FrameError`` of the native path (:func:`rxhubs.transport._events_py.received_messages`).
    """
    new = object.__new__
    out: list[Event] = []
    append = out.append
    for data in batch:
        annotations = data._raw_amqp_message.annotations
        if not annotations or annotations.get(_SEQ) is None:
            from rxhubs.transport._events_py import _NO_POSITION, FrameError

            raise FrameError(_NO_POSITION)
        event = new(ReceivedEvent)
        _SET_DATA(event, data)
        append(event)
    return out


def event_from_sdk(event: EventData) -> Event:
    """Convert an azure-eventhub ``EventData`` (as received) to an :class:`~rxhubs.Event`, decoding every field.

    The body becomes bytes (data sections joined; value and sequence bodies as UTF-8 text), property keys
    become str, and property values the AMQP stack returns as bytes become str when they are valid UTF-8
    (AMQP strings arrive as bytes in the Python SDK); ``partition_key`` and ``offset`` become str and
    ``enqueued_time`` an aware UTC datetime.

    Example:
        >>> data = EventData(b"hi")
        >>> data.properties = {"kind": "greeting"}
        >>> data.raw_amqp_message.annotations = {
        ...     b"x-opt-sequence-number": 7, b"x-opt-offset": b"896", b"x-opt-enqueued-time": 1767225600000}
        >>> e = event_from_sdk(data)
        >>> e.body, e.sequence_number, e.offset, e.enqueued_time.isoformat(), e.properties
        (b'hi', 7, '896', '2026-01-01T00:00:00+00:00', {'kind': 'greeting'})
    """
    return Event._unchecked(
        _body(event), _sequence_number(event), _offset(event), _enqueued_time(event), _partition_key(event),
        _properties(event), _system_properties(event),
    )


def last_enqueued_from_sdk(props: Mapping[str, Any] | None) -> LastEnqueuedEventProperties | None:
    if not props or props.get("sequence_number") is None:
        return None
    return LastEnqueuedEventProperties(
        sequence_number=int(props["sequence_number"]),
        offset=props.get("offset"),
        enqueued_time=props.get("enqueued_time"),
        retrieval_time=props.get("retrieval_time"),
    )
