"""Where bytes become an :class:`~rxhubs.Event`: azure-eventhub's received ``EventData`` converted, once per event.

This is the per-event hot path of the Azure transport (about 3 us of the cost of an event): keep it lean.
System properties are decoded only when read (:class:`SystemProperties`).
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterator, Mapping
from typing import Any

from azure.eventhub import EventData
from azure.eventhub.amqp import AmqpMessageBodyType

from rxhubs._models import Event, LastEnqueuedEventProperties

__all__ = ["SystemProperties", "event_from_sdk", "last_enqueued_from_sdk"]

UTC = _dt.UTC

_SEQ = b"x-opt-sequence-number"
_OFFSET = b"x-opt-offset"
_ENQUEUED = b"x-opt-enqueued-time"
_PKEY = b"x-opt-partition-key"
_DATA = AmqpMessageBodyType.DATA
_fromtimestamp = _dt.datetime.fromtimestamp

# Decoded names of the keys seen most (system properties repeat on every event).
_KEY_CACHE: dict[bytes, str] = {}


def _str_map(items: Mapping[Any, Any]) -> dict[str, Any]:
    """Keys to str; bytes values to str when they are UTF-8 (the AMQP stack hands strings back as bytes)."""
    out: dict[str, Any] = {}
    for key, value in items.items():
        if key.__class__ is bytes:
            name = _KEY_CACHE.get(key)
            if name is None:
                name = key.decode("utf-8", "replace")
                if len(_KEY_CACHE) < 1024:
                    _KEY_CACHE[key] = name
        else:
            name = key if key.__class__ is str else str(key)
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


def event_from_sdk(event: EventData) -> Event:
    """Convert an azure-eventhub ``EventData`` (as received) to an :class:`~rxhubs.Event`.

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
    raw = event.raw_amqp_message
    annotations = raw.annotations or {}
    offset = annotations.get(_OFFSET)
    enqueued = annotations.get(_ENQUEUED)
    key = annotations.get(_PKEY)
    app = raw.application_properties
    return Event._unchecked(
        _body_bytes(raw),
        int(annotations[_SEQ]),
        offset.decode("ascii") if offset.__class__ is bytes else str(offset),
        (
            _fromtimestamp(enqueued / 1000, UTC)
            if enqueued.__class__ is int or isinstance(enqueued, int | float)
            else enqueued
            if isinstance(enqueued, _dt.datetime)
            else _dt.datetime.fromtimestamp(0, UTC)
        ),
        None if key is None else key.decode("utf-8", "replace") if key.__class__ is bytes else str(key),
        _str_map(app) if app else {},
        SystemProperties(annotations, raw.properties),
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
