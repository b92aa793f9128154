"""``hops.publish`` into an ``rxhubs.EventHub``: a send's events as columns, no object per event.

The native send path encodes bodies and properties straight from two lists
(:class:`~rxhubs.transport._publisher.EventColumns`), so building an ``OutgoingEvent`` per event only to take it
apart again is waste (with the garbage collector's share, about a microsecond per event at 200k events/s). With
the default options (the source event's own body, properties and partition key: what the ``eventhub:`` sink of
``rxhubs consume`` does) the plain events of the native receive path are read without decoding anything but
the partition key from their annotations.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from rxhubs._batch import EventBatch
from rxhubs.errors import ConfigurationError
from rxhubs.transport._publisher import EventColumns, check_routing

__all__ = ["ColumnGroups", "add_columns", "as_bytes", "as_columns", "outgoing"]

Route = tuple[str | None, str | None]  # (partition_id, partition_key)
#: Events by routing, as (bodies, properties mappings), each in source order.
ColumnGroups = dict[Route, tuple[list[bytes], list[Mapping[str, Any]]]]

_PKEY = b"x-opt-partition-key"
_NO_PROPERTIES: Mapping[str, Any] = {}  # shared by events without properties: one section (none) per run


def _plain_type() -> type | None:
    """The native receive path's plain event class, if that path is loaded (no Azure import from here)."""
    module = sys.modules.get("rxhubs.transport._convert_messages")
    return getattr(module, "ReceivedAnnotations", None)


def as_bytes(value: Any) -> bytes:
    """A body function's result as bytes (str as UTF-8); a ConfigurationError for anything else."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    raise ConfigurationError(f"publish: body must return bytes, str or None, got {type(value).__name__}")


def _own(batch: EventBatch, groups: ColumnGroups) -> None:
    """The default options: each event's own body, properties and partition key."""
    plain = _plain_type()
    last_key: Any = 0  # not a key: the first event looks its group up
    bodies: list[bytes] = []
    props: list[Mapping[str, Any]] = []
    for event in batch.events:
        if type(event) is plain:  # annotations only: no application properties, the key among the annotations
            raw = event._data.get(_PKEY)  # type: ignore[attr-defined]
            key = None if raw is None else raw.decode("utf-8", "replace") if raw.__class__ is bytes else str(raw)
            properties = _NO_PROPERTIES
        else:
            key = event.partition_key
            properties = event.properties or _NO_PROPERTIES
        if key != last_key:
            bodies, props = groups.setdefault((None, key), ([], []))
            last_key = key
        bodies.append(event.body)
        props.append(properties)


def outgoing(
    batch: EventBatch, body: Callable[[Any], Any] | None, partition_key: Callable[[Any], Any] | None,
    partition_id: Callable[[Any], Any] | None, properties: Callable[[Any], Any] | None,
) -> Iterator[tuple[Route, bytes, Mapping[str, Any]]]:
    """Each outgoing event of ``batch`` as (routing, body, properties), in order; those ``body`` drops left out."""
    for event in batch.events:
        if body is None:
            out = event.body
        else:
            made = body(event)
            if made is None:
                continue  # the function dropped it
            out = as_bytes(made)
        props = event.properties if properties is None else properties(event)
        pid = partition_id(event) if partition_id is not None else None
        key = partition_key(event) if partition_key is not None else None
        check_routing(pid, key)
        yield (pid, key), out, props or _NO_PROPERTIES


def add_columns(
    batch: EventBatch, groups: ColumnGroups, body: Callable[[Any], Any] | None,
    partition_key: Callable[[Any], Any] | None, partition_id: Callable[[Any], Any] | None,
    properties: Callable[[Any], Any] | None, own_key: Callable[[Any], Any],
) -> None:
    """Add ``batch``'s outgoing events to ``groups`` by routing (the options as ``hops.publish`` resolved them)."""
    if body is None and properties is None and partition_id is None and partition_key is own_key:
        _own(batch, groups)
        return
    for route, out, props in outgoing(batch, body, partition_key, partition_id, properties):
        bodies, maps = groups.setdefault(route, ([], []))
        bodies.append(out)
        maps.append(props)


def as_columns(bodies: list[bytes], props: list[Mapping[str, Any]]) -> EventColumns:
    """One send's columns: a single properties mapping when no event has its own (the usual case)."""
    if props.count(_NO_PROPERTIES) == len(props):  # (every mapping empty: == at C speed)
        return EventColumns(bodies, _NO_PROPERTIES)
    return EventColumns(bodies, props)
