"""What ``hops.window`` computes: window kinds, aggregates, and the batches that carry results downstream."""

from __future__ import annotations

import builtins
import datetime as dt
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rxhubs._batch import EventBatch
from rxhubs._models import Event
from rxhubs.errors import ConfigurationError
from rxhubs.state._time import duration_us

__all__ = [
    "Aggregate", "Hopping", "ScanBatch", "Session", "Tumbling", "WindowBatch", "WindowResult", "Windows",
    "count", "count_add", "fold", "hopping", "max", "min", "session", "sum", "tumbling",
]  # fmt: skip


# -- window kinds ---------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Tumbling:
    """Fixed, back-to-back windows ``[start, start + size)`` (times in microseconds)."""

    size: int
    offset: int = 0

    def _describe(self) -> dict[str, Any]:
        return {"kind": "tumbling", "size": self.size, "offset": self.offset}


@dataclass(frozen=True, slots=True)
class Hopping:
    """Overlapping windows of ``size`` starting every ``step`` (times in microseconds)."""

    size: int
    step: int
    offset: int = 0

    def _describe(self) -> dict[str, Any]:
        return {"kind": "hopping", "size": self.size, "step": self.step, "offset": self.offset}


@dataclass(frozen=True, slots=True)
class Session:
    """Per-key bursts of activity: events less than ``gap`` apart share a window (times in microseconds)."""

    gap: int

    def _describe(self) -> dict[str, Any]:
        return {"kind": "session", "gap": self.gap}


Windows = Tumbling | Hopping | Session


def tumbling(size: dt.timedelta | float, *, offset: dt.timedelta | float = 0) -> Tumbling:
    """Back-to-back windows of ``size``: ``[0, size)``, ``[size, 2 size)``... (since the epoch, plus ``offset``).

    Example:
        >>> import datetime as dt
        >>> from rxhubs import windows as hw
        >>> hw.tumbling(dt.timedelta(minutes=1)).size  # microseconds
        60000000
    """
    return Tumbling(duration_us(size, "tumbling size"), duration_us(offset, "tumbling offset", zero=True))


def hopping(size: dt.timedelta | float, step: dt.timedelta | float, *, offset: dt.timedelta | float = 0) -> Hopping:
    """Windows of ``size`` starting every ``step`` (``step < size``: each event is in ``size / step`` windows).

    Example:
        >>> from rxhubs import windows as hw
        >>> w = hw.hopping(60, 15)   # one-minute windows every 15 s
        >>> w.size // w.step
        4
    """
    w = Hopping(duration_us(size, "hopping size"), duration_us(step, "hopping step"),
                duration_us(offset, "hopping offset", zero=True))
    if w.step > w.size:
        raise ConfigurationError(f"hopping step must not exceed the size, got size={size!r} step={step!r}")
    return w


def session(gap: dt.timedelta | float) -> Session:
    """Session windows per key: a window ends ``gap`` after its last event; closer events join it.

    A session is ``[first event, last event + gap)``; an event whose ``[time, time + gap)`` overlaps sessions
    of its key merges them (the aggregate needs ``merge``).

    Example:
        >>> from rxhubs import windows as hw
        >>> hw.session(300).gap
        300000000
    """
    return Session(duration_us(gap, "session gap"))


# -- aggregates -----------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Aggregate:
    """How a window's value is built: ``init()``, then ``add(value, event)`` per event; ``merge`` for sessions.

    ``kind`` is part of the operator's fingerprint; the functions are not (see ``hops.window``).
    """

    kind: str
    init: Callable[[], Any]
    add: Callable[[Any, Event], Any]
    merge: Callable[[Any, Any], Any] | None = None


def _getter(get: Callable[[Event], Any] | None, what: str) -> Callable[[Event], Any]:
    if get is None:
        return lambda event: event.body_as_json()
    if not callable(get):
        raise ConfigurationError(f"{what}(get): get must be callable, got {type(get).__name__}")
    return get


def count_add(n: int, _: Event) -> int:
    """``count()``'s step (``hops.window`` recognises it and adds one without calling it)."""
    return n + 1


def count() -> Aggregate:
    """The number of events in the window.

    Example:
        >>> from rxhubs import windows as hw
        >>> hw.count().kind
        'count'
    """
    return Aggregate("count", lambda: 0, count_add, lambda a, b: a + b)


def sum(get: Callable[[Event], Any] | None = None) -> Aggregate:
    """The sum of ``get(event)`` (default: the body parsed as JSON) over the window's events.

    Example:
        >>> from rxhubs import windows as hw
        >>> hw.sum(lambda e: e.body_as_json()["kwh"]).kind
        'sum'
    """
    value = _getter(get, "sum")
    return Aggregate("sum", lambda: 0, lambda acc, e: acc + value(e), lambda a, b: a + b)


def _extreme(kind: str, get: Callable[[Event], Any] | None, pick: Callable[[Any, Any], Any]) -> Aggregate:
    value = _getter(get, kind)

    def add(acc: Any, event: Event) -> Any:
        v = value(event)
        return v if acc is None else pick(acc, v)

    def merge(a: Any, b: Any) -> Any:
        return b if a is None else a if b is None else pick(a, b)

    return Aggregate(kind, lambda: None, add, merge)


def min(get: Callable[[Event], Any] | None = None) -> Aggregate:
    """The smallest ``get(event)`` in the window (None for none).

    Example:
        >>> from rxhubs import windows as hw
        >>> hw.min(lambda e: e.properties["t"]).kind
        'min'
    """
    return _extreme("min", get, builtins.min)


def max(get: Callable[[Event], Any] | None = None) -> Aggregate:
    """The largest ``get(event)`` in the window (None for none).

    Example:
        >>> from rxhubs import windows as hw
        >>> hw.max(lambda e: e.properties["t"]).kind
        'max'
    """
    return _extreme("max", get, builtins.max)


def fold(
    init: Any, add: Callable[[Any, Event], Any], merge: Callable[[Any, Any], Any] | None = None
) -> Aggregate:
    """A user aggregate: ``init`` (a JSON-able value, or a function making one), ``add(value, event)``.

    Values must be JSON-able (they are saved with the checkpoint): tuples come back as lists and dict keys as
    strings, which the operator applies at once so a restored value equals the live one. A value that is not
    JSON-able fails the partition with :class:`~rxhubs.errors.StateError`. ``merge(a, b)`` combines two
    values; session windows need it.

    Example:
        >>> from rxhubs import windows as hw
        >>> avg = hw.fold([0, 0.0], lambda acc, e: [acc[0] + 1, acc[1] + e.body_as_json()["t"]],
        ...               merge=lambda a, b: [a[0] + b[0], a[1] + b[1]])
        >>> avg.init()
        [0, 0.0]
    """
    if not callable(add):
        raise ConfigurationError(f"fold(add): add must be callable, got {type(add).__name__}")
    if merge is not None and not callable(merge):
        raise ConfigurationError(f"fold(merge): merge must be callable, got {type(merge).__name__}")
    if callable(init):
        return Aggregate("fold", init, add, merge)
    try:
        template = json.dumps(init)
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(f"fold(init): the initial value must be JSON-able: {exc}") from exc
    return Aggregate("fold", lambda: json.loads(template), add, merge)


# -- results --------------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class WindowResult:
    """One window's value.

    Attributes:
        key: The key (as the ``key`` function returned it; tuples stay tuples).
        start: The window's start (UTC, inclusive).
        end: Its end (exclusive).
        value: The aggregate.
        final: True once the window closed (always, with ``emit="final"``).

    Example:
        >>> import datetime as dt
        >>> t = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
        >>> WindowResult("dev1", t, t + dt.timedelta(minutes=1), 42).value
        42
    """

    key: Any
    start: dt.datetime
    end: dt.datetime
    value: Any
    final: bool = True

    @classmethod
    def _unchecked(cls, key: Any, start: dt.datetime, end: dt.datetime, value: Any, final: bool) -> WindowResult:
        """The same record without the frozen dataclass's ``__init__`` (half its cost), for ``hops.window``'s loop."""
        result = _new(cls)
        _SET_KEY(result, key)
        _SET_START(result, start)
        _SET_END(result, end)
        _SET_VALUE(result, value)
        _SET_FINAL(result, final)
        return result


_new = object.__new__
_SET_KEY, _SET_START, _SET_END, _SET_VALUE, _SET_FINAL = (
    WindowResult.__dict__[name].__set__ for name in ("key", "start", "end", "value", "final")
)


@dataclass(frozen=True, slots=True)
class WindowBatch(EventBatch):
    """The batch ``hops.window`` passes on: its events unchanged, plus what the operator found.

    Attributes:
        results: The windows this batch closed (``emit="final"``), or changed or closed (``"updates"``), ordered
            by end, start, key.
        late: Events of this batch that arrived after (one of) their windows had closed (``late="side"``).
        late_count: How many of this batch's events were late (also with ``late="drop"``).

    Example:
        >>> import rxhubs
        >>> ctx = rxhubs.PartitionContext("ns", "hub", "$Default", "0")
        >>> WindowBatch(ctx, ()).results
        ()
    """

    results: tuple[WindowResult, ...] = ()
    late: tuple[Event, ...] = ()
    late_count: int = 0

    def with_events(self, events: Sequence[Event]) -> WindowBatch:
        """The same batch with other events (filtered, say): its results and late events stay."""
        return WindowBatch(
            self.context, tuple(events), self.last_enqueued, self._lease, self._session, self._origin, self._state,
            self.results, self.late, self.late_count,
        )


@dataclass(frozen=True, slots=True)
class ScanBatch(EventBatch):
    """The batch ``hops.scan_state`` passes on: its events unchanged, plus the outputs of ``step``.

    Attributes:
        outputs: What ``step`` returned for this batch's events, in order.
        expired: ``(key, state)`` of the keys that expired (no event for ``ttl`` of event time) in this batch.

    Example:
        >>> import rxhubs
        >>> ctx = rxhubs.PartitionContext("ns", "hub", "$Default", "0")
        >>> ScanBatch(ctx, (), outputs=("alarm",)).outputs
        ('alarm',)
    """

    outputs: tuple[Any, ...] = ()
    expired: tuple[tuple[Any, Any], ...] = field(default=())

    def with_events(self, events: Sequence[Event]) -> ScanBatch:
        """The same batch with other events: its outputs stay."""
        return ScanBatch(
            self.context, tuple(events), self.last_enqueued, self._lease, self._session, self._origin, self._state,
            self.outputs, self.expired,
        )
