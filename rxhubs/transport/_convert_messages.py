"""The direct receive path's events: pyamqp messages become :class:`~rxhubs.Event` s without the SDK's ``EventData``.

Used by :mod:`rxhubs.transport._direct` and the native path (:mod:`rxhubs.transport._native`): each received
message is wrapped in a :class:`ReceivedMessage` that decodes its fields on first read, as
:class:`~rxhubs.transport._convert.ReceivedEvent` does for ``EventData``. A plain message (one data section,
no properties) becomes a :class:`ReceivedAnnotations`, which keeps only the message's annotations.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable, Mapping
from typing import Any

from azure.eventhub import EventData

from rxhubs._models import Event, LastEnqueuedEventProperties
from rxhubs.transport._convert import (
    _ENQUEUED,
    _OFFSET,
    _PKEY,
    _SEQ,
    UTC,
    ReceivedEvent,
    SystemProperties,
    _body_bytes,
    _fromtimestamp,
    _lazy_field,
    _str_map,
)

__all__ = [
    "ReceivedAnnotations", "ReceivedMessage", "last_enqueued_from_annotations", "last_enqueued_from_message",
    "received_messages",
]



def _m_body(message: Any) -> bytes:
    data = message.data
    if data is not None:
        return data if data.__class__ is bytes else b"".join(data)
    return _body_bytes(EventData._from_message(message).raw_amqp_message)  # value and sequence bodies: rare


def _m_annotations(message: Any) -> dict[Any, Any]:
    return message.message_annotations or {}


def _m_sequence_number(message: Any) -> int:
    return int(message.message_annotations[_SEQ])


def _a_offset(annotations: Mapping[Any, Any]) -> str:
    offset = annotations.get(_OFFSET)
    return offset.decode("ascii") if offset.__class__ is bytes else str(offset)


def _a_enqueued_time(annotations: Mapping[Any, Any]) -> _dt.datetime:
    enqueued = annotations.get(_ENQUEUED)
    if isinstance(enqueued, int | float):
        return _fromtimestamp(enqueued / 1000, UTC)
    return enqueued if isinstance(enqueued, _dt.datetime) else _fromtimestamp(0, UTC)


def _a_partition_key(annotations: Mapping[Any, Any]) -> str | None:
    key = annotations.get(_PKEY)
    return None if key is None else key.decode("utf-8", "replace") if key.__class__ is bytes else str(key)


def _m_offset(message: Any) -> str:
    return _a_offset(_m_annotations(message))


def _m_enqueued_time(message: Any) -> _dt.datetime:
    return _a_enqueued_time(_m_annotations(message))


def _m_partition_key(message: Any) -> str | None:
    return _a_partition_key(_m_annotations(message))


def _m_properties(message: Any) -> dict[str, Any]:
    app = message.application_properties
    return _str_map(app) if app else {}


def _m_system_properties(message: Any) -> SystemProperties:
    return SystemProperties(_m_annotations(message), message.properties)


class ReceivedMessage(ReceivedEvent):
    """A :class:`ReceivedEvent` over the AMQP message itself (the direct receive path: no ``EventData`` made).

    Example:
        >>> from azure.eventhub._pyamqp.message import Message
        >>> m = Message(data=[b"hi"], message_annotations={b"x-opt-sequence-number": 7, b"x-opt-offset": b"896"})
        >>> e = received_messages([m])[0]
        >>> e.body, e.sequence_number, e.offset, e.properties
        (b'hi', 7, '896', {})
    """

    __slots__ = ()


_MESSAGE_DECODERS: tuple[tuple[str, Callable[[Any], Any]], ...] = (
    ("body", _m_body),
    ("sequence_number", _m_sequence_number),
    ("offset", _m_offset),
    ("enqueued_time", _m_enqueued_time),
    ("partition_key", _m_partition_key),
    ("properties", _m_properties),
    ("system_properties", _m_system_properties),
)
for _field, _reader in _MESSAGE_DECODERS:
    setattr(ReceivedMessage, _field, _lazy_field(_field, _reader))


class ReceivedAnnotations(ReceivedMessage):
    """A :class:`ReceivedMessage` of a plain message, holding only the message's annotations (an untracked dict).

    A plain message has one data section, an int sequence number, and neither an AMQP properties section nor
    application properties: every field but the body and the sequence number (set at once) comes from its
    annotations. Keeping that dict instead of the whole message lets the message and its data list go at once,
    so an event held until a later commit (``hops.exactly_once``, a window) is one object for the garbage
    collector to visit instead of three. Its system properties, once read, are a plain dict (of text and
    numbers, which the collector does not track either) rather than a :class:`SystemProperties`.

    Example:
        >>> from azure.eventhub._pyamqp.message import Message
        >>> m = Message(data=[b"hi"], message_annotations={b"x-opt-sequence-number": 7, b"x-opt-offset": b"896"})
        >>> e = received_messages([m])[0]
        >>> type(e).__name__, e.body, e.offset, e.properties, dict(e.system_properties)
        ('ReceivedAnnotations', b'hi', '896', {}, {'x-opt-sequence-number': 7, 'x-opt-offset': '896'})
    """

    __slots__ = ()


def _a_properties(annotations: Mapping[Any, Any]) -> dict[str, Any]:
    return {}


def _a_system_properties(annotations: Mapping[Any, Any]) -> dict[str, Any]:
    return _str_map(annotations)  # a plain dict of text and numbers: untracked by the garbage collector


# Body and sequence number are always set when the event is made: plain slots, no decoder.
ReceivedAnnotations.body = Event.__dict__["body"]  # type: ignore[misc]
ReceivedAnnotations.sequence_number = Event.__dict__["sequence_number"]  # type: ignore[misc]
for _field, _reader in (
    ("offset", _a_offset),
    ("enqueued_time", _a_enqueued_time),
    ("partition_key", _a_partition_key),
    ("properties", _a_properties),
    ("system_properties", _a_system_properties),
):
    setattr(ReceivedAnnotations, _field, _lazy_field(_field, _reader))


_SET_BODY = Event.__dict__["body"].__set__
_SET_SEQUENCE_NUMBER = Event.__dict__["sequence_number"].__set__


def received_messages(messages: list[Any]) -> list[Event]:
    """Wrap received AMQP messages: one :class:`ReceivedMessage` each, lazy but for two fields.

    The body of a one-data-section message (the same bytes object) and an int sequence number are set at once:
    every pipeline reads both (the receiver itself reads sequence numbers), and setting them costs less than
    the first read of a lazy field (which finds its slot empty by an AttributeError). Everything else is
    decoded on first read, as is an unusual body or sequence number. A plain message (see
    :class:`ReceivedAnnotations`) keeps only its annotations. The work is
    :func:`rxhubs.transport._events_py.received_messages`, compiled where the frame reader is
    (:func:`rxhubs.transport._frames.event_wrapper`).
    """
    wrap = _WRAP
    if wrap is None:
        from rxhubs.transport._frames import event_wrapper

        wrap = _set_wrap(event_wrapper())
    return wrap(messages)


_WRAP: Callable[[list[Any]], list[Any]] | None = None


def _set_wrap(wrap: Callable[[list[Any]], list[Any]]) -> Callable[[list[Any]], list[Any]]:
    global _WRAP
    _WRAP = wrap
    return wrap


def last_enqueued_from_message(message: Any) -> LastEnqueuedEventProperties | None:
    """The partition's last-enqueued properties the service put in a message's delivery annotations, if any."""
    return last_enqueued_from_annotations(message.delivery_annotations)


def last_enqueued_from_annotations(annotations: Any) -> LastEnqueuedEventProperties | None:
    """The partition's last-enqueued properties in a message's delivery annotations (a map or None), if any.

    Example:
        >>> last_enqueued_from_annotations({b"last_enqueued_sequence_number": 9, b"last_enqueued_offset": b"42"})
        LastEnqueuedEventProperties(sequence_number=9, offset='42', enqueued_time=None, retrieval_time=None)
    """
    if not annotations or annotations.__class__ is not dict:
        return None
    sequence_number = annotations.get(b"last_enqueued_sequence_number")
    if sequence_number is None:
        return None
    offset = annotations.get(b"last_enqueued_offset")
    enqueued = annotations.get(b"last_enqueued_time_utc")
    retrieved = annotations.get(b"runtime_info_retrieval_time_utc")
    return LastEnqueuedEventProperties(
        sequence_number=int(sequence_number),
        offset=offset.decode("utf-8") if offset.__class__ is bytes else offset,
        enqueued_time=_fromtimestamp(float(enqueued) / 1000, UTC) if enqueued else None,
        retrieval_time=_fromtimestamp(float(retrieved) / 1000, UTC) if retrieved else None,
    )
