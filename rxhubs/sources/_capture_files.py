"""Capture records as :class:`~rxhubs.Event` and back (the file format: :mod:`rxhubs.emulator._capture_format`)."""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping
from typing import Any

from rxhubs._models import Event
from rxhubs.emulator._capture_format import capture_time, parse_capture_time

__all__ = ["event_of", "record_of"]


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
    """The Capture record of an event (what the service writes for it)."""
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


def event_of(record: Mapping[str, Any]) -> Event:
    """The :class:`~rxhubs.Event` of a Capture record (system properties get the sequence number, offset, time).

    Example:
        >>> e = event_of({"SequenceNumber": 7, "Offset": "896", "EnqueuedTimeUtc": "2/6/2023 6:29:45 PM",
        ...               "SystemProperties": {"x-opt-partition-key": "k"}, "Properties": {"a": 1}, "Body": b"x"})
        >>> e.sequence_number, e.offset, e.partition_key, e.properties, e.body
        (7, '896', 'k', {'a': 1}, b'x')
    """
    enqueued = parse_capture_time(record["EnqueuedTimeUtc"])
    system = dict(record.get("SystemProperties") or {})
    key = system.get("x-opt-partition-key")
    system["x-opt-sequence-number"] = record["SequenceNumber"]
    system["x-opt-offset"] = record["Offset"]
    system["x-opt-enqueued-time"] = enqueued
    return Event._unchecked(
        record.get("Body") or b"", record["SequenceNumber"], str(record["Offset"]), enqueued,
        key if isinstance(key, str) or key is None else str(key), dict(record.get("Properties") or {}), system,
    )
