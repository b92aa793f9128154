"""The producers' trace contexts of a batch, as span links.

azure-eventhub (with tracing on) writes each event's creation context into its application properties:
``traceparent`` and ``tracestate`` (W3C Trace Context), and the same value under ``Diagnostic-Id`` for older
consumers. Other producers set ``traceparent`` themselves. The contexts are read through the global
OpenTelemetry propagator (``opentelemetry.propagate``), so an application that configured another format
(``OTEL_PROPAGATORS``) gets it read too; ``Diagnostic-Id`` stands in for a missing ``traceparent``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from opentelemetry import propagate, trace
from opentelemetry.propagators.textmap import Getter
from opentelemetry.trace import Link

from rxhubs._models import Event
from rxhubs.otel._names import ENQUEUED_TIME

__all__ = ["producer_links"]

_TRACEPARENT = "traceparent"
_DIAGNOSTIC_ID = "Diagnostic-Id"


class _PropertiesGetter(Getter[Mapping[str, Any]]):
    """Reads an event's application properties as a propagation carrier (str or bytes values)."""

    def get(self, carrier: Mapping[str, Any], key: str) -> list[str] | None:
        value = carrier.get(key)
        if value is None and key == _TRACEPARENT:
            value = carrier.get(_DIAGNOSTIC_ID)
        if value is None:
            return None
        if isinstance(value, bytes | bytearray):
            value = bytes(value).decode("ascii", "replace")
        return [str(value)]

    def keys(self, carrier: Mapping[str, Any]) -> list[str]:
        return [str(key) for key in carrier]


_GETTER = _PropertiesGetter()


def producer_links(events: Iterable[Event], limit: int) -> list[Link]:
    """One link per distinct valid producer context among ``events``, in order, at most ``limit``.

    Events without a context cost a few dictionary look-ups; each distinct context costs one extraction
    (a few microseconds). Each link carries the event's enqueued time
    (``messaging.eventhubs.message.enqueued_time``, epoch seconds).

    Example:
        >>> import datetime as dt
        >>> t = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
        >>> parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        >>> events = [Event(b"a", 0, "0", t, properties={"traceparent": parent}),
        ...           Event(b"b", 1, "1", t, properties={"traceparent": parent}),   # the same context: one link
        ...           Event(b"c", 2, "2", t, properties={"Diagnostic-Id": parent.replace("b7", "c8", 1)}),
        ...           Event(b"d", 3, "3", t)]
        >>> [format(link.context.span_id, "016x") for link in producer_links(events, limit=128)]
        ['b7ad6b7169203331', 'c8ad6b7169203331']
    """
    if limit <= 0:
        return []
    propagator = propagate.get_global_textmap()
    fields = frozenset((*propagator.fields, _DIAGNOSTIC_ID))
    links: list[Link] = []
    seen: set[tuple[int, int]] = set()
    raw_seen: set[str | bytes] = set()
    for event in events:
        properties = event.properties
        if not properties or fields.isdisjoint(properties):
            continue
        raw = properties.get(_TRACEPARENT) or properties.get(_DIAGNOSTIC_ID)
        if isinstance(raw, str | bytes):
            if raw in raw_seen:
                continue  # a context already read (producers often stamp one context on many events)
            raw_seen.add(raw)
        context = propagator.extract(properties, getter=_GETTER)
        span_context = trace.get_current_span(context).get_span_context()
        if not span_context.is_valid:
            continue
        key = (span_context.trace_id, span_context.span_id)
        if key in seen:
            continue
        seen.add(key)
        links.append(Link(span_context, {ENQUEUED_TIME: int(event.enqueued_time.timestamp())}))
        if len(links) >= limit:
            break
    return links
