"""Table rows: the Spark Event Hubs connector's columns (as rxhubs.spark writes them), in SQL-friendly types.

``enqueuedTime`` is ISO 8601 text in UTC, the property maps are compact JSON text (values as the Spark sink turns
them into strings), ``body`` stays bytes. ``consumerGroup`` and ``eventHubName`` let several hubs share a table.
"""

from __future__ import annotations

import base64
import datetime as _dt
import json
from collections.abc import Mapping
from typing import Any

from rxhubs._batch import EventBatch
from rxhubs._models import Event

__all__ = ["COLUMNS", "row"]

#: Column names, in order, and their SQL types (portable: SQLite and PostgreSQL take them).
COLUMNS: tuple[tuple[str, str], ...] = (
    ("body", "BLOB"),
    ("partition", "TEXT"),
    ("offset", "TEXT"),
    ("sequenceNumber", "BIGINT"),
    ("enqueuedTime", "TEXT"),
    ("publisher", "TEXT"),
    ("partitionKey", "TEXT"),
    ("properties", "TEXT"),
    ("systemProperties", "TEXT"),
    ("consumerGroup", "TEXT"),
    ("eventHubName", "TEXT"),
)

PUBLISHER_PROPERTY = "x-opt-publisher"


def _text(value: Any) -> Any:
    """A property value as the Spark sink stores it: text as is, bytes base64, times ISO, the rest JSON."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool | int | float):
        return json.dumps(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, _dt.datetime):
        moment = value if value.tzinfo is not None else value.replace(tzinfo=_dt.UTC)
        return moment.astimezone(_dt.UTC).isoformat()
    if isinstance(value, Mapping | list | tuple):
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)
    return str(value)


def _map(values: Mapping[Any, Any] | None) -> str | None:
    if not values:
        return None
    keys = (k.decode("utf-8", "replace") if isinstance(k, bytes | bytearray) else str(k) for k in values)
    return json.dumps(dict(zip(keys, map(_text, values.values()), strict=True)), separators=(",", ":"),
                      ensure_ascii=False)


def row(batch: EventBatch, event: Event) -> dict[str, Any]:
    """One event as a table row (keys: :data:`COLUMNS`' names, in order).

    Example:
        >>> import datetime as dt
        >>> from rxhubs import Event, EventBatch, PartitionContext
        >>> t = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
        >>> e = Event(b"hi", 7, "70", t)
        >>> r = row(EventBatch(PartitionContext("ns", "hub", "$Default", "0"), (e,)), e)
        >>> r["sequenceNumber"], r["enqueuedTime"], r["eventHubName"]
        (7, '2026-01-01T00:00:00+00:00', 'hub')
    """
    system = event.system_properties or {}
    publisher = system.get(PUBLISHER_PROPERTY) if system else None
    context = batch.context
    return {
        "body": bytes(event.body),
        "partition": context.partition_id,
        "offset": event.offset,
        "sequenceNumber": event.sequence_number,
        "enqueuedTime": event.enqueued_time.astimezone(_dt.UTC).isoformat(),
        "publisher": _text(publisher),
        "partitionKey": event.partition_key,
        "properties": _map(event.properties),
        "systemProperties": _map(system),
        "consumerGroup": context.consumer_group,
        "eventHubName": context.eventhub_name,
    }
