"""The Event Hubs Capture file format: the Avro schema, file names, times; writing and reading the files.

Capture writes each partition's events to Avro container files named
``{Namespace}/{EventHub}/{PartitionId}/{Year}/{Month}/{Day}/{Hour}/{Minute}/{Second}.avro`` (zero-padded, UTC;
the name is the second the file's window opened), one record per event with this schema (Microsoft Learn,
"Capture Event Hubs data", and the files the service writes)::

    {"type": "record", "name": "EventData", "namespace": "Microsoft.ServiceBus.Messaging", "fields": [
      {"name": "SequenceNumber", "type": "long"}, {"name": "Offset", "type": "string"},
      {"name": "EnqueuedTimeUtc", "type": "string"},
      {"name": "SystemProperties", "type": {"type": "map", "values": ["long", "double", "string", "bytes"]}},
      {"name": "Properties", "type": {"type": "map", "values": ["long", "double", "string", "bytes", "null"]}},
      {"name": "Body", "type": ["null", "bytes"]}]}

``EnqueuedTimeUtc`` is text such as ``2/6/2023 6:29:45 PM``: a captured event's time is known to the second.
``SystemProperties`` holds the event's AMQP properties (``content-type``, ``message-id``...) and the service's
annotations other than sequence number, offset and time (``x-opt-partition-key``...).
"""

from __future__ import annotations

import datetime as _dt
import io
import json
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, BinaryIO

__all__ = [
    "SCHEMA",
    "SCHEMA_TEXT",
    "capture_time",
    "file_name",
    "file_time",
    "parse_capture_time",
    "read_records",
    "write_file",
]

SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "EventData",
    "namespace": "Microsoft.ServiceBus.Messaging",
    "fields": [
        {"name": "SequenceNumber", "type": "long"},
        {"name": "Offset", "type": "string"},
        {"name": "EnqueuedTimeUtc", "type": "string"},
        {"name": "SystemProperties", "type": {"type": "map", "values": ["long", "double", "string", "bytes"]}},
        {"name": "Properties", "type": {"type": "map", "values": ["long", "double", "string", "bytes", "null"]}},
        {"name": "Body", "type": ["null", "bytes"]},
    ],
}

#: The schema as the service writes it in each file's header (compact JSON, in this field order).
SCHEMA_TEXT = json.dumps(SCHEMA, separators=(",", ":"))
UTC = _dt.UTC
_BLOCK_BYTES = 1 << 20  # records per block: about 1 MB
_NAME = re.compile(r"(?:^|/)(\d{4})/(\d{2})/(\d{2})/(\d{2})/(\d{2})/(\d{2})(?:\.avro)?$")
_PARSED: Any = None


def _fastavro() -> Any:
    try:
        import fastavro
    except ImportError as exc:  # pragma: no cover - an install without the extra
        raise ImportError("Event Hubs Capture files need fastavro: pip install 'rxhubs[capture]'") from exc
    return fastavro


def _schema() -> Any:
    global _PARSED
    if _PARSED is None:
        _PARSED = _fastavro().parse_schema(SCHEMA)
    return _PARSED


def capture_time(when: _dt.datetime) -> str:
    """``EnqueuedTimeUtc`` as Capture writes it: month/day/year, 12-hour clock, to the second.

    Example:
        >>> capture_time(_dt.datetime(2023, 2, 6, 18, 29, 45, 900000, tzinfo=UTC))
        '2/6/2023 6:29:45 PM'
        >>> capture_time(_dt.datetime(2016, 11, 16, 0, 4, 1, tzinfo=UTC))
        '11/16/2016 12:04:01 AM'
    """
    t = when.astimezone(UTC)
    hour = t.hour % 12 or 12
    return f"{t.month}/{t.day}/{t.year} {hour}:{t.minute:02d}:{t.second:02d} {'PM' if t.hour >= 12 else 'AM'}"


def parse_capture_time(text: str) -> _dt.datetime:
    """The UTC time of an ``EnqueuedTimeUtc`` (Capture's text; ISO 8601 is accepted too).

    Raises:
        ValueError: Neither form.

    Example:
        >>> parse_capture_time("2/6/2023 6:29:45 PM")
        datetime.datetime(2023, 2, 6, 18, 29, 45, tzinfo=datetime.timezone.utc)
    """
    try:
        return _dt.datetime.strptime(text, "%m/%d/%Y %I:%M:%S %p").replace(tzinfo=UTC)
    except ValueError:
        parsed = _dt.datetime.fromisoformat(text)
        return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)


def file_name(namespace: str, eventhub_name: str, partition_id: str, opened: _dt.datetime) -> str:
    """A Capture file's name (the default format) for a window opened at ``opened``.

    Example:
        >>> file_name("myns", "telemetry", "0", _dt.datetime(2023, 7, 17, 17, 27, 57, 123, tzinfo=UTC))
        'myns/telemetry/0/2023/07/17/17/27/57.avro'
    """
    t = opened.astimezone(UTC)
    return (f"{namespace}/{eventhub_name}/{partition_id}/{t.year:04d}/{t.month:02d}/{t.day:02d}/{t.hour:02d}/"
            f"{t.minute:02d}/{t.second:02d}.avro")


def file_time(name: str) -> _dt.datetime | None:
    """When a Capture file's window opened, from its name (None: not a Capture file name).

    Example:
        >>> file_time("ns/hub/3/2023/07/17/17/27/57.avro")
        datetime.datetime(2023, 7, 17, 17, 27, 57, tzinfo=datetime.timezone.utc)
        >>> file_time("ns/hub/3/notes.txt") is None
        True
    """
    m = _NAME.search(name)
    if m is None:
        return None
    try:
        y, mo, d, h, mi, s = (int(g) for g in m.groups())
        return _dt.datetime(y, mo, d, h, mi, s, tzinfo=UTC)
    except ValueError:
        return None


def write_file(out: BinaryIO, records: Iterable[Mapping[str, Any]]) -> None:
    """Write one Capture file: an Avro container (codec null) whose header holds the schema as the service writes it.

    No records writes the empty file Capture writes for a window without events (the header only).
    """
    fastavro = _fastavro()
    write = fastavro.schemaless_writer
    sync = os.urandom(16)
    out.write(b"Obj\x01")
    write(out, {"type": "map", "values": "bytes"}, {"avro.codec": b"null", "avro.schema": SCHEMA_TEXT.encode()})
    out.write(sync)
    schema = _schema()
    block = io.BytesIO()
    count = 0

    def flush() -> None:
        data = block.getvalue()
        write(out, "long", count)
        write(out, "long", len(data))
        out.write(data)
        out.write(sync)

    for record in records:
        write(block, schema, record)
        count += 1
        if block.tell() >= _BLOCK_BYTES:
            flush()
            block.seek(0)
            block.truncate()
            count = 0
    if count:
        flush()


def read_records(source: BinaryIO) -> Iterator[dict[str, Any]]:
    """The records of one Capture file, in order (codecs null and deflate; snappy with python-snappy).

    Raises:
        ValueError: Not an Avro container file (fastavro's error, chained).
    """
    yield from _fastavro().reader(source)
