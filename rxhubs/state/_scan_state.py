"""``hops.scan_state``: any keyed state machine, its state committed with the checkpoint, expired by event time."""

from __future__ import annotations

import datetime as dt
import heapq
import itertools
import json
from collections.abc import Callable
from typing import Any

import reactivex
from reactivex import Observable, abc

from rxhubs._batch import EventBatch
from rxhubs._models import Event, PartitionContext
from rxhubs.errors import ConfigurationError, StateError
from rxhubs.state._codec import OperatorState, StateDelta
from rxhubs.state._spec import ScanBatch
from rxhubs.state._stateful import Keyed, Runner, check_cap, check_name, dump, fingerprint, hashable, plain
from rxhubs.state._time import EnqueuedTime, EventTime, duration_us, to_us
from rxhubs.state._window import DEFAULT_MAX_STATE_BYTES

__all__ = ["scan_state"]

Step = Callable[[Any, Event], tuple[Any, Any]]
_MISSING: Any = object()


class ScanState(Keyed):
    """One partition: key -> state, the event time each key was last touched, and when keys expire.

    Saved keys are ``json.dumps(key)``; values ``[state, last event time in microseconds]``; meta ``t``
    (stream time) and ``seq``. A key whose last event is ``ttl`` or more older than stream time is expired,
    whether or not it was swept yet, so results do not depend on how events were batched.
    """

    def __init__(self, name: str, context: PartitionContext, key: Callable[[Event], Any], step: Step, ttl: int,
                 get_time: Callable[[Event], Any] | None) -> None:
        super().__init__(name, context)
        self.key, self.step, self.ttl, self.get_time = key, step, ttl, get_time
        self.states: dict[Any, Any] = {}
        self.last: dict[Any, int] = {}
        self.heap: list[tuple[int, int, Any]] = []
        self.counter = itertools.count()
        self.dirty: set[Any] = set()
        self.t: int | None = None

    def meta(self) -> dict[str, Any]:
        return {"t": self.t, "seq": self.seq}

    def restore(self, state: OperatorState) -> None:
        super().restore(state)
        self.t = state.meta.get("t")
        try:
            for skey, (value, last) in state.keys.items():
                k = hashable(json.loads(skey))
                self.states[k], self.last[k] = value, int(last)
                heapq.heappush(self.heap, (int(last) + self.ttl, next(self.counter), k))
        except (ValueError, TypeError) as exc:
            raise StateError(f"saved state of operator {self.name!r} is not scan_state state: {exc}") from exc

    def run(self, batch: EventBatch, now: float | None) -> Callable[[tuple[StateDelta, ...]], EventBatch]:
        outputs: list[Any] = []
        expired: list[tuple[Any, Any]] = []
        for event in batch.events:
            if event.sequence_number <= self.seq:
                continue
            self.seq = event.sequence_number
            t = to_us(event.enqueued_time if self.get_time is None else self.get_time(event))
            if self.t is None or t > self.t:
                self.t = t
            k = self.key(event)
            try:
                current = self.states.get(k, _MISSING)
            except TypeError as exc:
                raise StateError(f"scan_state keys must be hashable and JSON-able, got {k!r}") from exc
            if current is not _MISSING and self.last[k] + self.ttl <= self.t:
                expired.append((k, current))
                self._remove(k)
                current = _MISSING
            new, out = self.step(None if current is _MISSING else current, event)
            if out is not None:
                outputs.extend(out)
            if new is None:
                if current is not _MISSING:
                    self._remove(k)
            else:
                self.states[k] = new
                self.last[k] = t if current is _MISSING else max(self.last[k], t)
                self.dirty.add(k)
        for k in self.dirty:
            heapq.heappush(self.heap, (self.last[k] + self.ttl, next(self.counter), k))
        self._sweep(expired)  # (removes expired keys from dirty)
        for k in self.dirty:
            value, last = self.states[k], self.last[k]
            text = dump([value, last], f"the state of key {k!r}")
            if not plain(value):
                self.states[k] = json.loads(text)[0]
            self.put(self._skey(k), json.loads(text) if not plain(value) else [value, last], text)
        self.dirty = set()
        if len(self.heap) > 2 * len(self.states) + 64:  # stale entries of keys touched again: compact
            self.heap = [(self.last[k] + self.ttl, next(self.counter), k) for k in self.states]
            heapq.heapify(self.heap)
        return lambda state: ScanBatch(batch.context, batch.events, batch.last_enqueued, batch._lease,
                                       batch._session, batch._origin, state, tuple(outputs), tuple(expired))

    def passthrough(self, batch: EventBatch) -> EventBatch:
        return ScanBatch(batch.context, batch.events, batch.last_enqueued, batch._lease, batch._session,
                         batch._origin, batch._state)

    def _skey(self, k: Any) -> str:
        return dump(k, f"the key {k!r}")

    def _remove(self, k: Any) -> None:
        del self.states[k], self.last[k]
        self.dirty.discard(k)
        self.drop(self._skey(k))

    def _sweep(self, expired: list[tuple[Any, Any]]) -> None:
        t = self.t
        while t is not None and self.heap and self.heap[0][0] <= t:
            _, _, k = heapq.heappop(self.heap)
            if k in self.states and self.last[k] + self.ttl <= t:
                expired.append((k, self.states[k]))
                self._remove(k)


def scan_state(
    name: str,
    *,
    key: Callable[[Event], Any],
    step: Step,
    ttl: dt.timedelta | float,
    clock: EnqueuedTime | EventTime = EnqueuedTime(),  # noqa: B008
    max_state_bytes: int | None = DEFAULT_MAX_STATE_BYTES,
) -> Callable[[Observable[EventBatch]], Observable[EventBatch]]:
    """A keyed state machine: ``step(state, event) -> (new_state, outputs)`` per event, state saved per key.

    ``state`` is None for a key not seen yet (or expired); returning ``new_state=None`` deletes the key. The
    ``outputs`` (an iterable, or None) of a batch's events are the :class:`rxhubs.windows.ScanBatch`'s
    ``outputs``; the batch's events go on unchanged. A key with no event for ``ttl`` of event time (the
    largest event time seen in the partition, from ``clock``) expires: it is dropped from state and listed in
    ``expired`` with its last state. States must be JSON-able (they are committed with the checkpoint, like
    ``hops.window``'s: see there for restore, fingerprints and ``max_state_bytes``; the fingerprint covers
    ``ttl`` and the clock, not ``step``).

    Marble diagram (``step`` counts the events of each key and outputs on every second one; ttl 60 s;
    a=k1@0 s, b=k1@10, c=k2@20, d=k2@90)::

        batches:  -a-b-c-d-|
        outputs:  ---x-----|     x = "k1: 2" (b is k1's second event)
        expired:  -------y-|     y = (k2, 1): touched by d 70 s after c, then (k1, 2): swept (80 s silent)
        state:    -1-1-2-1-|     keys held after each batch (k2 starts again at d)

    Args:
        name: Names the operator's saved state.
        key: ``key(event)``: hashable and JSON-able.
        step: ``step(state, event) -> (new_state, outputs)``.
        ttl: Event time after which an untouched key expires (required: state stays bounded).
        clock: :class:`rxhubs.windows.EnqueuedTime` (default) or :class:`~rxhubs.windows.EventTime`.
        max_state_bytes: Cap on the state of one partition (its JSON size); None for none.

    Returns:
        An operator ``Observable[EventBatch] -> Observable[ScanBatch]``.

    Raises:
        ConfigurationError: At call time, for invalid options.

    Example:
        >>> import datetime as dt, reactivex, rxhubs
        >>> from rxhubs import operators as hops
        >>> ctx = rxhubs.PartitionContext("ns", "hub", "$Default", "0")
        >>> t0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
        >>> batch = rxhubs.EventBatch(ctx, tuple(rxhubs.Event(b"", n, str(n), t0) for n in range(3)))
        >>> def step(n, event):
        ...     n = (n or 0) + 1
        ...     return n, [f"third event of {event.partition_key}"] if n == 3 else []
        >>> out = []
        >>> _ = reactivex.of(batch).pipe(
        ...     hops.scan_state("thirds", key=lambda e: "all", step=step, ttl=dt.timedelta(hours=1))
        ... ).subscribe(out.append)
        >>> out[0].outputs
        ('third event of None',)
    """
    name = check_name(name)
    if not callable(key) or not callable(step):
        raise ConfigurationError("scan_state: key and step must be callable")
    ttl_us = duration_us(ttl, "scan_state ttl")
    if not isinstance(clock, EnqueuedTime | EventTime):
        raise ConfigurationError(f"clock must be rxhubs.windows.EnqueuedTime() or EventTime(...), got {clock!r}")
    cap = check_cap(max_state_bytes)
    digest = fingerprint({"op": "scan_state", "v": 1, "ttl": ttl_us, **clock._describe()})
    get_time = clock.get if isinstance(clock, EventTime) else None

    def make(context: PartitionContext) -> ScanState:
        return ScanState(name, context, key, step, ttl_us, get_time)

    def operator(source: Observable[EventBatch]) -> Observable[EventBatch]:
        def subscribe(observer: abc.ObserverBase[EventBatch], sched: abc.SchedulerBase | None = None) -> Any:
            runner = Runner(observer, name, digest, cap, make, None)
            runner.upstream.disposable = source.subscribe(
                runner.on_next, runner.on_error, runner.on_completed, scheduler=sched
            )
            return runner.upstream

        return reactivex.create(subscribe)

    return operator
