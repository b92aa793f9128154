"""``hops.window``: event-time windows per key, exact across crashes and handovers (state rides the checkpoint)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any, Literal

import reactivex
from reactivex import Observable, abc
from reactivex.disposable import Disposable

from rxhubs._batch import EventBatch
from rxhubs._models import Event, PartitionContext
from rxhubs._rx import pipeline_scheduler
from rxhubs.errors import ConfigurationError
from rxhubs.state._spec import Aggregate, Hopping, Session, Tumbling, Windows
from rxhubs.state._stateful import Runner, check_cap, check_name, fingerprint
from rxhubs.state._time import CaughtUp, EnqueuedTime, EventTime, duration_us
from rxhubs.state._window_state import WindowState

__all__ = ["DEFAULT_MAX_STATE_BYTES", "window"]

#: The default cap on one operator's state in one partition (its JSON size).
DEFAULT_MAX_STATE_BYTES = 32 * 1024 * 1024


def window(
    name: str,
    *,
    key: Callable[[Event], Any],
    windows: Windows,
    aggregate: Aggregate,
    clock: EnqueuedTime | EventTime = EnqueuedTime(),  # noqa: B008
    grace: dt.timedelta | float = 0,
    emit: Literal["final", "updates"] = "final",
    late: Literal["side", "drop"] = "side",
    idle: CaughtUp | None = None,
    max_state_bytes: int | None = DEFAULT_MAX_STATE_BYTES,
    scheduler: abc.SchedulerBase | None = None,
) -> Callable[[Observable[EventBatch]], Observable[EventBatch]]:
    """Aggregate events per key in event-time windows; pass each batch on with the windows it closed.

    Every batch goes on, its events unchanged, as a :class:`rxhubs.windows.WindowBatch` whose ``results``
    are the windows it closed (``emit="final"``) or changed (``emit="updates"``, with ``final`` set on the
    closed ones), and whose ``late`` are its late events. Place it where a partition's batches are in order
    (after the source or ``hops.process``), before ``hops.checkpoint``: the batch also carries the operator's
    state delta, and the checkpoint commits the state with the position, so after a crash or a handover the
    next owner restores exactly the state of the events up to the checkpoint and reads on from there.

    **Time.** Each partition has its stream time (the largest event time seen) and a watermark
    ``stream time - grace`` that never goes back, so idle *keys* close too. A window ``[start, end)`` closes
    once ``end <= watermark``. An event arriving for a closed window is *late*: it is left out of that window,
    counted (``late_count``, and ``late`` in the saved meta) and, with ``late="side"``, listed in ``late``
    (for session windows: an event older than the watermark). Windows close only as event time moves: an idle
    *partition* keeps its windows open unless ``idle=CaughtUp(...)``. The end of the stream (the partition
    moved, or the consumer stops) closes nothing: the state is committed and the next owner closes them.

    **Results are at least once.** After a crash the batches after the checkpoint are read again and may
    emit windows again, with the same values: write them with an upsert keyed by (key, start), or use an
    exactly-once sink.

    **Saved state.** Per partition: ``json.dumps([key, start])`` -> the aggregate (keys and aggregate values
    must be JSON-able: tuples come back as lists, which the operator applies at once), and the meta
    (stream time, watermark, late count). A *fingerprint* of the parameters (window kind and sizes, aggregate
    kind, grace, clock kind and ``max_delay``) is saved too, and a restore under another one fails the
    partition with :class:`~rxhubs.errors.StateError` rather than giving wrong results. The fingerprint does not
    cover your functions (``key``, the getter of ``sum``, a ``fold``): if you change what they compute, give
    the operator a new ``name`` (it starts afresh). A state over ``max_state_bytes`` fails the partition too.

    Marble diagram (tumbling 60 s, grace 0, event times: a=d1@10 s, b=d1@50, c=d2@55, d=d1@65, e=d1@30)::

        batches:  -a-b-c-d-e-|
        results:  -·-·-·-x-·-|     x = (d1,[0,60),2) (d2,[0,60),1): d moves the watermark to 65
        late:     ---------e-|     e's window closed before it came
        state:    -1-1-2-1-1-|     open windows after each batch: 0 once traffic stops past the grace

    Args:
        name: Names the operator's saved state (unique within the pipeline).
        key: ``key(event)``: the key to aggregate by (hashable and JSON-able: str, int, tuple...).
        windows: :func:`rxhubs.windows.tumbling`, :func:`~rxhubs.windows.hopping` or
            :func:`~rxhubs.windows.session`.
        aggregate: :func:`rxhubs.windows.count`, ``sum``, ``min``, ``max`` or ``fold``.
        clock: :class:`rxhubs.windows.EnqueuedTime` (default) or :class:`~rxhubs.windows.EventTime`.
        grace: How long after a window's end events may still come (``timedelta`` or seconds).
        emit: ``"final"``: each window once, when it closes; ``"updates"``: its value whenever a batch changed it.
        late: ``"side"``: late events listed in ``WindowBatch.late``; ``"drop"``: only counted.
        idle: :class:`rxhubs.windows.CaughtUp` to let a caught-up idle partition close its windows.
        max_state_bytes: Cap on the state of one partition (its JSON size); None for none.
        scheduler: The clock ``idle`` reads (default: the one given at subscribe time, else the loop's).

    Returns:
        An operator ``Observable[EventBatch] -> Observable[WindowBatch]``.

    Raises:
        ConfigurationError: At call time, for invalid options.

    Example:
        >>> import datetime as dt, reactivex, rxhubs
        >>> from rxhubs import operators as hops, windows as hw
        >>> ctx = rxhubs.PartitionContext("ns", "hub", "$Default", "0")
        >>> at = lambda s: dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(seconds=s)
        >>> events = [rxhubs.Event(b"", n, str(n), at(s), properties={"dev": d})
        ...           for n, (d, s) in enumerate([("d1", 10), ("d1", 50), ("d2", 55), ("d1", 65)])]
        >>> out = []
        >>> _ = reactivex.from_iterable([rxhubs.EventBatch(ctx, (e,)) for e in events]).pipe(
        ...     hops.window("counts", key=lambda e: e.properties["dev"], windows=hw.tumbling(60),
        ...                 aggregate=hw.count())).subscribe(out.append)
        >>> [(r.key, r.start.second, r.value) for b in out for r in b.results]
        [('d1', 0, 2), ('d2', 0, 1)]
    """
    name = check_name(name)
    if not callable(key):
        raise ConfigurationError(f"window(key): key must be callable, got {type(key).__name__}")
    if not isinstance(windows, Tumbling | Hopping | Session):
        raise ConfigurationError(f"windows must be rxhubs.windows.tumbling/hopping/session(...), got {windows!r}")
    if not isinstance(aggregate, Aggregate):
        raise ConfigurationError(f"aggregate must be rxhubs.windows.count/sum/min/max/fold(...), got {aggregate!r}")
    if isinstance(windows, Session) and aggregate.merge is None:
        raise ConfigurationError("session windows need an aggregate that merges: fold(init, add, merge=...)")
    if not isinstance(clock, EnqueuedTime | EventTime):
        raise ConfigurationError(f"clock must be rxhubs.windows.EnqueuedTime() or EventTime(...), got {clock!r}")
    grace_us = duration_us(grace, "grace", zero=True)
    if emit not in ("final", "updates"):
        raise ConfigurationError(f"emit must be 'final' or 'updates', got {emit!r}")
    if late not in ("side", "drop"):
        raise ConfigurationError(f"late must be 'side' or 'drop', got {late!r}")
    if idle is not None and not isinstance(idle, CaughtUp):
        raise ConfigurationError(f"idle must be None or rxhubs.windows.CaughtUp(...), got {idle!r}")
    if idle is not None and isinstance(clock, EventTime) and clock.max_delay is None:
        raise ConfigurationError("idle=CaughtUp(...) with an EventTime clock needs its max_delay")
    cap = check_cap(max_state_bytes)
    digest = fingerprint({
        "op": "window", "v": 1, "windows": windows._describe(), "aggregate": aggregate.kind, "grace": grace_us,
        **clock._describe(),
    })

    def make(context: PartitionContext) -> WindowState:
        return WindowState(name, context, key, windows, aggregate, clock, grace_us, emit == "updates",
                           late == "side", idle)

    def operator(source: Observable[EventBatch]) -> Observable[EventBatch]:
        def subscribe(observer: abc.ObserverBase[EventBatch], sched: abc.SchedulerBase | None = None) -> Any:
            now: Callable[[], float] | None = None
            if idle is not None:
                try:
                    resolved = pipeline_scheduler(scheduler or sched, f"window({name!r}, idle=...)")
                except ConfigurationError as exc:
                    observer.on_error(exc)
                    return Disposable()
                now = lambda: resolved.now.timestamp()  # noqa: E731
            runner = Runner(observer, name, digest, cap, make, now)
            runner.upstream.disposable = source.subscribe(
                runner.on_next, runner.on_error, runner.on_completed, scheduler=sched
            )
            return runner.upstream

        return reactivex.create(subscribe)

    return operator
