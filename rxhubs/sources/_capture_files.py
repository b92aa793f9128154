"""Capture records as :class:`~rxhubs.Event` and back (the file format: :mod:`rxhubs._capture_format`)."""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping
from typing import Any

from rxhubs._capture_format import capture_time, parse_capture_time
from rxhubs._models import Event

__all__ = ["CapturedEvent", "captured_events", "event_of", "record_of"]


def _system_value(value: Any) -> Any:
    """A value as the SystemProperties union takes it (long, double, string, bytes)."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int | float | str | bytes):
        return value
    if isinstance(value, _dt.datetime):
        return int(value.timestamp() * 1000)
    return str(value)


def _property_value(value: Any) -> Any:
    """A value as the Properties union takes it (long, double, string, bytes, null)."""
    return None if value is None else _system_value(value)


def record_of(event: Event) -> dict[str, Any]:
    """The Capture record of an event (what the service writes for it): :func:`event_of` read back gives it again.

    Example:
        >>> record = {"SequenceNumber": 7, "Offset": "896", "EnqueuedTimeUtc": "2/6/2023 6:29:45 PM",
        ...           "SystemProperties": {"x-opt-partition-key": "k", "content-type": "application/json"},
        ...           "Properties": {"a": 1, "ok": "true"}, "Body": b"x"}
        >>> record_of(event_of(record)) == record
        True
    """
    system = {k: _system_value(v) for k, v in event.system_properties.items()
              if k not in ("x-opt-sequence-number", "x-opt-offset", "x-opt-enqueued-time") and v is not None}
    if event.partition_key is not None:
        system["x-opt-partition-key"] = event.partition_key
    return {
        "SequenceNumber": event.sequence_number,
        "Offset": event.offset,
        "EnqueuedTimeUtc": capture_time(event.enqueued_time),
        "SystemProperties": system,
        "Properties": {str(k): _property_value(v) for k, v in event.properties.items()},
        "Body": event.body,
    }


def event_of(record: Mapping[str, Any], times: dict[str, Any] | None = None) -> Event:
    """The :class:`~rxhubs.Event` of a Capture record (system properties get the sequence number, offset, time).

    Example:
        >>> e = event_of({"SequenceNumber": 7, "Offset": "896", "EnqueuedTimeUtc": "2/6/2023 6:29:45 PM",
        ...               "SystemProperties": {"x-opt-partition-key": "k"}, "Properties": {"a": 1}, "Body": b"x"})
        >>> e.sequence_number, e.offset, e.partition_key, e.properties, e.body
        (7, '896', 'k', {'a': 1}, b'x')
    """
    text = record["EnqueuedTimeUtc"]
    enqueued = times.get(text) if times is not None else None
    if enqueued is None:
        enqueued = parse_capture_time(text)
        if times is not None:
            times[text] = enqueued
    system = dict(record.get("SystemProperties") or {})
    key = system.get("x-opt-partition-key")
    system["x-opt-sequence-number"] = record["SequenceNumber"]
    system["x-opt-offset"] = record["Offset"]
    system["x-opt-enqueued-time"] = enqueued
    return Event._unchecked(
        record.get("Body") or b"", record["SequenceNumber"], str(record["Offset"]), enqueued,
        key if isinstance(key, str) or key is None else str(key), dict(record.get("Properties") or {}), system,
    )


_TIMES: dict[str, _dt.datetime] = {}


def _time(record: Mapping[str, Any]) -> _dt.datetime:
    text = record["EnqueuedTimeUtc"]
    when = _TIMES.get(text)
    if when is None:
        if len(_TIMES) > 4096:
            _TIMES.clear()
        when = _TIMES[text] = parse_capture_time(text)
    return when


def _system(record: Mapping[str, Any]) -> dict[str, Any]:
    system = dict(record.get("SystemProperties") or {})
    system["x-opt-sequence-number"] = record["SequenceNumber"]
    system["x-opt-offset"] = record["Offset"]
    system["x-opt-enqueued-time"] = _time(record)
    return system


def _key(record: Mapping[str, Any]) -> str | None:
    key = (record.get("SystemProperties") or {}).get("x-opt-partition-key")
    return key if isinstance(key, str) or key is None else str(key)


_DECODERS: tuple[tuple[str, Any], ...] = (
    ("body", lambda r: r.get("Body") or b""),
    ("sequence_number", lambda r: r["SequenceNumber"]),
    ("offset", lambda r: str(r["Offset"])),
    ("enqueued_time", _time),
    ("partition_key", _key),
    ("properties", lambda r: dict(r.get("Properties") or {})),
    ("system_properties", _system),
)


class CapturedEvent(Event):
    """An :class:`~rxhubs.Event` over a Capture record, each field decoded on first read.

    As the live transport's events are: a backfill that reads bodies and sequence numbers pays for nothing else.
    It equals, pickles and copies as a plain ``Event`` with the same fields.

    Example:
        >>> [e] = captured_events([{"SequenceNumber": 7, "Offset": "896", "EnqueuedTimeUtc": "2/6/2023 6:29:45 PM",
        ...                         "SystemProperties": {}, "Properties": {"a": 1}, "Body": b"x"}])
        >>> e.sequence_number, e.body, e.properties, isinstance(e, Event), e == event_of(e._record)
        (7, b'x', {'a': 1}, True, True)
    """

    __slots__ = ("_record",)

    _record: Mapping[str, Any]

    def __new__(cls, *args: Any, **kwargs: Any) -> CapturedEvent:
        return Event(*args, **kwargs)  # type: ignore[return-value]  # calling the class makes a plain Event

    def __reduce__(self) -> tuple[Any, ...]:
        return (Event._unchecked, self._fields())


def _lazy_field(name: str, decode: Any) -> property:
    slot = Event.__dict__[name]
    get, store = slot.__get__, slot.__set__

    def read(self: CapturedEvent) -> Any:
        try:
            return get(self, CapturedEvent)
        except AttributeError:  # not decoded yet
            value = decode(self._record)
            store(self, value)
            return value

    return property(read, doc=f"``Event.{name}``, decoded on first read.")


for _name, _decode in _DECODERS:
    setattr(CapturedEvent, _name, _lazy_field(_name, _decode))

_SET_RECORD = CapturedEvent.__dict__["_record"].__set__


def captured_events(records: Any) -> list[Event]:
    """One :class:`CapturedEvent` per Capture record, nothing decoded yet."""
    new = object.__new__
    out: list[Event] = []
    append = out.append
    for record in records:
        event = new(CapturedEvent)
        _SET_RECORD(event, record)
        append(event)
    return out
