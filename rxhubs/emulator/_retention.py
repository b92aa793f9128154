"""Retention: how long a partition keeps its events, by time and (for tests) by count, and what expiry moves.

The service keeps each event for the hub's retention (1 to 7 days on Standard, up to 90 on Premium), then drops
it: the partition's ``beginning_sequence_number`` moves forward. A reader that asks for a position before it is
not refused: the service delivers from the first event it still holds (the Spark connector reports this as
"request seqNo X is less than the received seqNo Y", azure-event-hubs-spark #408 and #670, and warns "Some
events may have expired and been missed", #321). The emulator does the same, so a client sees the expiry only
by comparing the first sequence number it gets with the one it asked for, or by reading the partition's
properties.

:class:`Retention` is a hub's setting; :func:`expire` applies it to a partition (on every append, before a
reader's start is resolved, when properties are read, and once a second while the emulator runs, so an idle
hub ages too). Expired events leave memory in chunks (``Partition.drop_expired``); a durable log keeps their
bytes on disk, and a restarted emulator applies the same retention to what it reloads.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rxhubs.errors import ConfigurationError

if TYPE_CHECKING:
    from rxhubs.emulator._hubs import Partition

__all__ = ["Retention", "expire", "retention_of"]


@dataclass(frozen=True, slots=True)
class Retention:
    """A hub's retention, by age and by count (None: no limit of that kind).

    ``seconds``: events enqueued longer ago expire. ``events``: at most that many newest events per partition
    stay (a test's stand-in for days of retention).

    Example:
        >>> Retention(seconds=3600.0, events=500)
        Retention(seconds=3600.0, events=500)
        >>> Retention(events=0)
        Traceback (most recent call last):
        ...
        rxhubs.errors.ConfigurationError: retain_events must be a whole number >= 1 or None, got 0
    """

    seconds: float | None = None
    events: int | None = None

    def __post_init__(self) -> None:
        s, n = self.seconds, self.events
        if s is not None and (isinstance(s, bool) or not isinstance(s, int | float) or not s > 0):
            raise ConfigurationError(f"retention must be a number of seconds > 0 or None, got {s!r}")
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
            raise ConfigurationError(f"retain_events must be a whole number >= 1 or None, got {n!r}")

    @property
    def limited(self) -> bool:
        """Whether anything ever expires."""
        return self.seconds is not None or self.events is not None


def retention_of(
    hubs: Mapping[str, int],
    seconds: float | Mapping[str, float] | None,
    events: int | Mapping[str, int] | None,
) -> dict[str, Retention]:
    """Each hub's :class:`Retention` from the emulator's arguments (one value for every hub, or one per hub).

    Raises:
        ConfigurationError: A value is out of range, or a mapping names a hub the emulator does not serve.

    Example:
        >>> retention_of({"a": 1, "b": 2}, 60, {"b": 10})
        {'a': Retention(seconds=60, events=None), 'b': Retention(seconds=60, events=10)}
    """

    def pick(value: object, name: str, hub: str) -> object:
        if isinstance(value, Mapping):
            unknown = sorted(set(value) - set(hubs))
            if unknown:
                raise ConfigurationError(f"{name} names unknown event hub(s) {unknown}; the emulator serves "
                                         f"{sorted(hubs)}")
            return value.get(hub)
        return value

    out: dict[str, Retention] = {}
    for hub in hubs:
        s = pick(seconds, "retention", hub)
        n = pick(events, "retain_events", hub)
        out[hub] = Retention(s, n)  # type: ignore[arg-type]  # checked in __post_init__
    return out


def expire(partition: Partition, retention: Retention, now_ms: int) -> int:
    """Move the partition's first retained sequence number by ``retention`` at ``now_ms``; return it.

    Never moves it back; never past the next sequence number (an empty partition's first is its next).
    """
    first = partition.first
    end = partition.next_sequence_number
    if retention.events is not None:
        first = max(first, end - retention.events)
    if retention.seconds is not None and partition.times:
        cutoff = now_ms - int(retention.seconds * 1000)
        first = max(first, partition.base + bisect.bisect_left(partition.times, cutoff))
    first = min(first, end)
    if first != partition.first:
        partition.first = first
        partition.drop_expired()
    return first
