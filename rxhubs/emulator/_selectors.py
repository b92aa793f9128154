"""Where a receiver starts: the Event Hubs selector filter a receiver attaches with, parsed.

``amqp.annotation.x-opt-offset > '-1'``, ``x-opt-sequence-number >= '42'``, ``x-opt-enqueued-time > '...'``;
offsets may be numbers, ``-1``, ``@latest`` or a geo-replicated namespace's string form.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rxhubs.emulator._geo import GEO_OFFSET

__all__ = ["StartPosition", "parse_selector"]


@dataclass(frozen=True, slots=True)
class StartPosition:
    """Where a receiver starts: ``kind`` is offset, sequence or time; ``value`` a string from the filter."""

    kind: str
    value: str
    inclusive: bool


_FILTER = re.compile(
    r"^\s*amqp\.annotation\.x-opt-(offset|sequence-number|enqueued-time)\s*(>=|>)\s*'([^']*)'\s*$"
)


def parse_selector(selector: str) -> StartPosition:
    """Parse an Event Hubs selector filter such as ``amqp.annotation.x-opt-offset > '-1'``.

    Raises:
        ValueError: The expression is not one the service understands.
    """
    m = _FILTER.match(selector)
    if not m:
        raise ValueError(f"unsupported selector filter: {selector!r}")
    kind, op, value = m.groups()
    if kind != "offset" or not (value in ("-1", "@latest") or GEO_OFFSET.match(value)):
        try:
            int(value)
        except ValueError:
            raise ValueError(f"bad value in selector filter: {selector!r}") from None
    return StartPosition(kind, value, op == ">=")
