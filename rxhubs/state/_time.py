"""Time for the stateful operators: exact integer microseconds, the clocks, and when an idle partition may tick.

Event time is kept as integer microseconds since the Unix epoch (a ``datetime``'s own resolution), so window
arithmetic is exact and state keys are stable across restores.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rxhubs._models import Event
from rxhubs.errors import ConfigurationError, StateError

__all__ = ["CaughtUp", "EnqueuedTime", "EventTime", "Clock", "duration_us", "from_us", "to_us"]

UTC = dt.UTC
EPOCH = dt.datetime(1970, 1, 1, tzinfo=UTC)
_US = dt.timedelta(microseconds=1)


def to_us(value: Any) -> int:
    """A timestamp (an aware or UTC-naive ``datetime``, or seconds since the epoch) as integer microseconds."""
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        micros: int = (value - EPOCH) // _US
        return micros
    if isinstance(value, int | float) and not isinstance(value, bool):
        return round(value * 1_000_000)
    raise StateError(f"an event time must be a datetime or seconds since the epoch, got {type(value).__name__}")


def from_us(value: int) -> dt.datetime:
    """Integer microseconds since the epoch as a UTC ``datetime``."""
    return EPOCH + dt.timedelta(microseconds=value)


def duration_us(value: Any, what: str, *, zero: bool = False) -> int:
    """A ``timedelta`` or seconds as integer microseconds, > 0 (>= 0 with ``zero``); else ConfigurationError."""
    if isinstance(value, dt.timedelta):
        micros = value // _US
    elif isinstance(value, int | float) and not isinstance(value, bool):
        micros = round(value * 1_000_000)
    else:
        raise ConfigurationError(f"{what} must be a timedelta or seconds, got {value!r}")
    if micros < 0 or (micros == 0 and not zero):
        raise ConfigurationError(f"{what} must be {'>= 0' if zero else '> 0'}, got {value!r}")
    return micros


@dataclass(frozen=True, slots=True)
class EnqueuedTime:
    """The default clock: an event's time is when the service enqueued it (``Event.enqueued_time``).

    Enqueued times grow with the sequence number within a partition, so nothing is late unless ``grace`` is
    smaller than the service's own disorder (none).

    Example:
        >>> from rxhubs import windows as hw
        >>> hw.EnqueuedTime()
        EnqueuedTime()
    """

    def _describe(self) -> dict[str, Any]:
        return {"clock": "enqueued"}


@dataclass(frozen=True, slots=True)
class EventTime:
    """A clock reading the time from the event itself, e.g. a device's own timestamp.

    Attributes:
        get: ``get(event)`` -> a ``datetime`` (naive means UTC) or seconds since the epoch.
        max_delay: The most an event's time may lag its enqueued time (``timedelta`` or seconds), or None.
            When given, stream time also advances to ``enqueued_time - max_delay`` (an event older than that
            may be late), and an idle partition may tick (:class:`CaughtUp`). None: only the events' own
            times move stream time.

    Example:
        >>> import datetime as dt
        >>> from rxhubs import windows as hw
        >>> clock = hw.EventTime(lambda e: e.body_as_json()["ts"], max_delay=dt.timedelta(seconds=30))
        >>> clock.max_delay
        datetime.timedelta(seconds=30)
    """

    get: Callable[[Event], Any]
    max_delay: dt.timedelta | float | None = None

    def __post_init__(self) -> None:
        if not callable(self.get):
            raise ConfigurationError(f"EventTime(get): get must be callable, got {type(self.get).__name__}")
        if self.max_delay is not None:
            duration_us(self.max_delay, "EventTime max_delay", zero=True)

    def _describe(self) -> dict[str, Any]:
        delay = None if self.max_delay is None else duration_us(self.max_delay, "max_delay", zero=True)
        return {"clock": "event", "max_delay": delay}


#: The clocks: :class:`EnqueuedTime` or :class:`EventTime`.
Clock = EnqueuedTime | EventTime


@dataclass(frozen=True, slots=True)
class CaughtUp:
    """Opt-in: let an idle partition's windows close when it has read everything the hub holds.

    Event time stands still while a partition receives nothing, so its last windows would stay open until the
    next event. With ``idle=CaughtUp(...)`` the operator advances a partition's stream time to
    ``now - skew - max_delay`` on a *heartbeat* (an empty batch) when

    * the batch's ``last_enqueued`` says the hub's newest event of the partition is one this operator has
      already seen (the partition is caught up), and
    * no event arrived for ``after``.

    It needs heartbeats: read with ``emit_empty=True`` (one empty batch per ``max_wait`` of silence) and keep
    ``track_last_enqueued_event_properties`` on (the default). A partition from which this consumer has not
    received anything yet has no ``last_enqueued`` on AMQP transports: it does not tick until its first event.

    It is sound if events arriving later are not older than that: an event's time is at least its enqueued
    time minus ``max_delay``, and the service's clock and the delivery delay differ from this machine's clock
    by less than ``skew``. It makes results depend on when heartbeats came (processing time) and is off by
    default: without it results depend on the events only (exactly reproducible).

    Attributes:
        after: Silence (``timedelta`` or seconds) before a caught-up partition ticks.
        skew: Allowance for clock skew and delivery delay.

    Example:
        >>> from rxhubs import windows as hw
        >>> hw.CaughtUp(after=5.0).skew
        2.0
    """

    after: dt.timedelta | float = 5.0
    skew: dt.timedelta | float = 2.0

    def __post_init__(self) -> None:
        duration_us(self.after, "CaughtUp after", zero=True)
        duration_us(self.skew, "CaughtUp skew", zero=True)
