"""The row schema of the Spark sink: the Spark Event Hubs connector's columns plus consumer group and hub name.

Users of the azure-event-hubs-spark connector already know these columns; rxhubs keeps their names and types
and adds ``consumerGroup`` and ``eventHubName`` so that rows from several hubs or groups can share a table.

Property values (``properties`` and ``systemProperties``) are ``map<string,string>``; a value is turned into a
string by :func:`property_to_str`: text stays as it is, ``None`` stays null, numbers, booleans, lists and maps
become compact JSON, bytes become base64, datetimes become ISO 8601 in UTC. Keys are text (bytes keys are
decoded as UTF-8).
"""

from __future__ import annotations

import base64
import datetime as _dt
import decimal
import functools
import json
import uuid
from collections.abc import Mapping
from typing import Any

__all__ = ["COLUMNS", "SCHEMA", "arrow_schema", "property_to_str"]

#: Column names and Spark SQL types, in order.
COLUMNS: tuple[tuple[str, str], ...] = (
    ("body", "binary"),
    ("partition", "string"),
    ("offset", "string"),
    ("sequenceNumber", "long"),
    ("enqueuedTime", "timestamp"),
    ("publisher", "string"),
    ("partitionKey", "string"),
    ("properties", "map<string,string>"),
    ("systemProperties", "map<string,string>"),
    ("consumerGroup", "string"),
    ("eventHubName", "string"),
)

#: The schema as a Spark DDL string (``spark.createDataFrame([], SCHEMA)``, ``StructType.fromDDL(SCHEMA)``).
SCHEMA: str = ", ".join(f"{name} {type_}" for name, type_ in COLUMNS)

#: The system property that carries the publisher, as the connector reads it.
PUBLISHER_PROPERTY = "x-opt-publisher"


@functools.cache
def arrow_schema() -> Any:
    """The schema as a ``pyarrow.Schema`` (timestamps in microseconds, UTC); imports pyarrow on first use.

    Example:
        >>> arrow_schema().field("enqueuedTime").type
        TimestampType(timestamp[us, tz=UTC])
    """
    import pyarrow as pa

    text_map = pa.map_(pa.string(), pa.string())
    return pa.schema(
        [
            pa.field("body", pa.binary()),
            pa.field("partition", pa.string()),
            pa.field("offset", pa.string()),
            pa.field("sequenceNumber", pa.int64()),
            pa.field("enqueuedTime", pa.timestamp("us", tz="UTC")),
            pa.field("publisher", pa.string()),
            pa.field("partitionKey", pa.string()),
            pa.field("properties", text_map),
            pa.field("systemProperties", text_map),
            pa.field("consumerGroup", pa.string()),
            pa.field("eventHubName", pa.string()),
        ]
    )


def _jsonable(value: Any) -> Any:
    """``value`` with every part JSON can hold as it is, and the rest turned into text."""
    if value is None or isinstance(value, str | bool | int | float):
        return value
    text = _scalar_text(value)
    if text is not None:
        return text
    if isinstance(value, Mapping):
        return {key_to_str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, set | frozenset):
        return [_jsonable(v) for v in sorted(value, key=repr)]
    return str(value)


def _scalar_text(value: Any) -> str | None:
    """Text for the scalar kinds JSON lacks (bytes, datetimes, UUIDs, decimals); None for anything else."""
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, _dt.datetime):
        moment: _dt.datetime = value if value.tzinfo is not None else value.replace(tzinfo=_dt.UTC)
        return moment.astimezone(_dt.UTC).isoformat()
    if isinstance(value, _dt.date | _dt.time):
        return value.isoformat()
    if isinstance(value, uuid.UUID | decimal.Decimal):
        return str(value)
    return None


def key_to_str(key: Any) -> str:
    """A map key as text: str as is, bytes decoded as UTF-8 (invalid bytes replaced), anything else ``str()``."""
    if isinstance(key, str):
        return key
    if isinstance(key, bytes | bytearray):
        return bytes(key).decode("utf-8", "replace")
    return str(key)


_int_text = int.__repr__  # json.dumps(an int) is exactly this


def property_to_str(value: Any) -> str | None:
    r"""A property value as the string stored in the ``properties`` / ``systemProperties`` maps.

    Rules: ``str`` unchanged; ``None`` -> null; ``bool`` -> ``"true"``/``"false"``; ``int``/``float`` -> their
    JSON text; ``bytes`` -> base64; ``datetime`` -> ISO 8601 in UTC (naive means UTC); ``date``, ``UUID``,
    ``Decimal`` -> their usual text; lists, tuples and mappings -> compact JSON (with the same rules inside);
    anything else -> ``str(value)``.

    Example:
        >>> [property_to_str(v) for v in ("a", 1, 2.5, True, None, b"\x00\xff", {"k": [1, "x"]})]
        ['a', '1', '2.5', 'true', None, 'AP8=', '{"k":[1,"x"]}']
    """
    kind = value.__class__
    if kind is str:
        return value  # type: ignore[no-any-return]
    if kind is int:
        return _int_text(value)  # what json.dumps gives, without its encoder (0.1 us against 1.4 us)
    if isinstance(value, str):
        return value
    if value is None:
        return None
    if isinstance(value, bool | int | float):
        return json.dumps(value)
    text = _scalar_text(value)
    if text is not None:
        return text
    if isinstance(value, Mapping | list | tuple | set | frozenset):
        return json.dumps(_jsonable(value), separators=(",", ":"), ensure_ascii=False)
    return str(value)
