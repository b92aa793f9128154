"""The columns of :func:`~rxhubs.spark.to_arrow`, gathered from events as plain Python lists.

This is the Spark source's per-event hot path (each executor converts every event it reads). Two ways in:

- An event received by the direct or native receive path (:class:`~rxhubs.transport._convert_messages.ReceivedMessage`,
  a lazy :class:`~rxhubs.Event` over a pyamqp ``Message``, or ``ReceivedAnnotations``, a plain message's event that
  keeps only its annotations) is read straight from its AMQP sections in one pass:
  no lazy field is decoded, no ``datetime`` and no intermediate property mapping is built. The values are those
  the lazy fields would decode to, turned into text by the same rules (:func:`~rxhubs.spark.property_to_str`);
  ``tests/spark/test_arrow_columns.py`` holds the two ways to identical tables.
- Any other event is read field by field, as an :class:`~rxhubs.Event`.

Enqueued times are gathered as the ``enqueuedTime`` column stores them, UTC microseconds since the epoch: for a
received message as an int straight from its millisecond timestamp; for any other event as its ``datetime``
itself, which pyarrow turns into microseconds by :func:`to_micros`' rules (naive ones count as UTC, aware ones
are converted) in one call for the column, instead of one Python call per event.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from rxhubs._batch import EventBatch
from rxhubs._models import Event
from rxhubs.spark._schema import PUBLISHER_PROPERTY, key_to_str, property_to_str
from rxhubs.transport._convert import (
    _ENQUEUED,
    _KEY_CACHE,
    _MESSAGE_PROPERTIES,
    _OFFSET,
    _PKEY,
    _SEQ,
    ReceivedEvent,
    key_name,
)
from rxhubs.transport._convert_messages import ReceivedAnnotations, ReceivedMessage, _a_enqueued_time

__all__ = ["Columns", "to_micros"]

_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)
_ONE_MICROSECOND = _dt.timedelta(microseconds=1)
#: Milliseconds below which ``ms * 1000`` is exactly what ``datetime.fromtimestamp(ms / 1000)`` gives in
#: microseconds (the float's error stays under half a microsecond below 2**32 seconds, the year 2106).
_EXACT_MS = 2**32 * 1000
_int_repr = int.__repr__
_MESSAGE_DATA = ReceivedEvent.__dict__["_data"].__get__


def to_micros(value: Any) -> Any:
    """An enqueued time as the ``enqueuedTime`` column stores it: int microseconds since the epoch, UTC.

    Naive datetimes count as UTC; ``None`` stays null; anything else is converted by pyarrow itself.

    Example:
        >>> to_micros(_dt.datetime(1970, 1, 1, 0, 0, 1, 5, tzinfo=_dt.UTC)), to_micros(_dt.datetime(1970, 1, 2))
        (1000005, 86400000000)
    """
    if value.__class__ is _dt.datetime:
        if value.tzinfo is None:
            return (value.replace(tzinfo=_dt.UTC) - _EPOCH) // _ONE_MICROSECOND
        if value.utcoffset() is not None:
            return (value - _EPOCH) // _ONE_MICROSECOND
    if value is None:
        return None
    import pyarrow as pa

    return pa.scalar(value, pa.timestamp("us", tz="UTC")).value


def _text_map(mapping: Mapping[Any, Any], out: dict[str, str | None]) -> dict[str, str | None]:
    """Each entry of an AMQP map into ``out`` as text; a later equal key wins, as in the lazy event's dict.

    Keys by :func:`~rxhubs.transport._convert.key_name`; values as the lazy mapping holds them (UTF-8 bytes as
    str, other bytes kept), then as :func:`property_to_str` makes them text.
    """
    names = _KEY_CACHE
    for key, value in mapping.items():
        name = names.get(key) if key.__class__ is bytes else None
        if name is None:
            name = key_name(key)
        cls = value.__class__
        if cls is bytes:
            try:
                out[name] = value.decode("utf-8")
            except UnicodeDecodeError:
                out[name] = property_to_str(value)  # base64
        elif cls is int:
            out[name] = _int_repr(value)
        else:
            out[name] = property_to_str(value)
    return out


class _MapColumn:
    """Flat keys, values and offsets of a ``map<string,string>`` column, with a cache per mapping object."""

    __slots__ = ("cache", "end", "keys", "offsets", "values")

    def __init__(self) -> None:
        self.offsets: list[int] = [0]
        self.end = 0
        self.keys: list[str] = []
        self.values: list[str | None] = []
        # id(mapping) -> (mapping, keys, values); the mapping is kept so that its id stays unique for the call.
        self.cache: dict[int, tuple[Mapping[Any, Any], list[str], list[str | None]]] = {}

    def add(self, mapping: Mapping[Any, Any]) -> None:
        """One row's map (an :class:`~rxhubs.Event`'s properties or system properties)."""
        self.extend((mapping,))

    def extend(self, mappings: Iterable[Mapping[Any, Any]]) -> None:
        """One row's map per item, in order (the loop of :meth:`add`, once per batch)."""
        cache, keys, values, offsets, end = self.cache, self.keys, self.values, self.offsets, self.end
        for mapping in mappings:
            if mapping:
                hit = cache.get(id(mapping))
                if hit is None:
                    hit = cache[id(mapping)] = (
                        mapping,
                        [key_to_str(k) for k in mapping],
                        [property_to_str(v) for v in mapping.values()],
                    )
                keys += hit[1]
                values += hit[2]
                end += len(hit[1])
            offsets.append(end)
        self.end = end

    def array(self) -> Any:
        import pyarrow as pa

        return pa.MapArray.from_arrays(
            pa.array(self.offsets, pa.int32()),
            pa.array(self.keys, pa.string()),
            pa.array(self.values, pa.string()),
        )


class Columns:
    """The eleven columns of the sink's schema, as lists, filled batch by batch (:meth:`add`)."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.partitions: list[str] = []
        self.offsets: list[str] = []
        self.sequence_numbers: list[int] = []
        self.micros: list[Any] = []  # int microseconds, or an event's own enqueued time (see the module)
        self.publishers: list[str | None] = []
        self.partition_keys: list[str | None] = []
        self.properties = _MapColumn()
        self.system_properties = _MapColumn()
        self.groups: list[str] = []
        self.hubs: list[str] = []

    def add(self, batch: EventBatch) -> None:
        """The events of ``batch``, in order."""
        events = batch.events
        n = len(events)
        if n == 0:
            return
        context = batch.context
        kinds = {event.__class__ for event in events}
        if ReceivedMessage in kinds or ReceivedAnnotations in kinds:
            self._one_by_one(events)
        else:
            self._events(events)
        self.partitions += [context.partition_id] * n
        self.groups += [context.consumer_group] * n
        self.hubs += [context.eventhub_name] * n

    def _events(self, events: Sequence[Event]) -> None:
        """Events read field by field, column by column (a comprehension per column, no call per event)."""
        self.bodies += [event.body for event in events]
        self.sequence_numbers += [event.sequence_number for event in events]
        self.offsets += [event.offset for event in events]
        # the datetimes as they are: pyarrow stores them by to_micros' rules (naive ones as UTC), in C
        self.micros += [event.enqueued_time for event in events]
        self.partition_keys += [event.partition_key for event in events]
        systems = [event.system_properties for event in events]
        self.publishers += [property_to_str(system.get(PUBLISHER_PROPERTY)) if system else None for system in systems]
        self.properties.extend([event.properties for event in events])
        self.system_properties.extend(systems)

    def _one_by_one(self, events: Sequence[Event]) -> None:
        """A batch with events received on the direct path (perhaps among others), event by event."""
        for event in events:
            kind = event.__class__
            if kind is ReceivedMessage:
                self._message(event, _MESSAGE_DATA(event))
            elif kind is ReceivedAnnotations:  # a plain message: body and sequence number set, the annotations kept
                self.bodies.append(event.body)
                self.sequence_numbers.append(event.sequence_number)
                self._sections(_MESSAGE_DATA(event), None, None)
            else:
                self._event(event)

    def _event(self, event: Event) -> None:
        self.bodies.append(event.body)
        self.sequence_numbers.append(event.sequence_number)
        self.offsets.append(event.offset)
        self.micros.append(event.enqueued_time)
        self.partition_keys.append(event.partition_key)
        system = event.system_properties
        self.publishers.append(property_to_str(system.get(PUBLISHER_PROPERTY)) if system else None)
        self.properties.add(event.properties)
        self.system_properties.add(system)

    def _message(self, event: Event, message: Any) -> None:
        # The values ReceivedMessage's lazy fields decode (rxhubs.transport._convert._m_*), read in one pass.
        data = message.data  # received_messages set these two fields from the message: the same objects
        self.bodies.append(data[0] if data.__class__ is list and len(data) == 1 else event.body)
        annotations = message.message_annotations or {}
        number = annotations.get(_SEQ)
        self.sequence_numbers.append(number if number.__class__ is int else event.sequence_number)
        self._sections(annotations, message.application_properties, message.properties)

    def _sections(self, annotations: Any, application: Any, props: Any) -> None:
        """The columns after body and sequence number, from a message's sections (None: the section is absent)."""
        offset = annotations.get(_OFFSET)
        self.offsets.append(offset.decode("ascii") if offset.__class__ is bytes else str(offset))
        enqueued = annotations.get(_ENQUEUED)
        if enqueued.__class__ is int and 0 <= enqueued < _EXACT_MS:
            self.micros.append(enqueued * 1000)
        else:
            self.micros.append(to_micros(_a_enqueued_time(annotations)))
        key = annotations.get(_PKEY)
        self.partition_keys.append(
            None if key is None else key.decode("utf-8", "replace") if key.__class__ is bytes else str(key)
        )
        column = self.properties
        if application:
            row = _text_map(application, {})
            column.keys += row
            column.values += row.values()
            column.end += len(row)
        column.offsets.append(column.end)
        # SystemProperties: the AMQP properties section's set fields, then the annotations (which win).
        system: dict[str, str | None] = {}
        if props is not None:
            for name, attribute in _MESSAGE_PROPERTIES:
                value = getattr(props, attribute, None)
                if value:
                    text = value.decode("utf-8", "replace") if value.__class__ is bytes else value
                    system[name] = property_to_str(text)
        _text_map(annotations, system)
        self.publishers.append(system.get(PUBLISHER_PROPERTY))
        column = self.system_properties
        if system:
            column.keys += system
            column.values += system.values()
            column.end += len(system)
        column.offsets.append(column.end)
