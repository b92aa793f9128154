"""Shared pieces of the stateful operators' tests: hand-made batches with event times, sessions, saved state."""

from __future__ import annotations

import datetime as dt
import itertools
from collections.abc import Iterable, Sequence
from typing import Any

from rxhubs import Event, EventBatch, LastEnqueuedEventProperties, PartitionContext
from rxhubs._batch import Origin
from rxhubs.balancing import PartitionSession
from rxhubs.state._codec import OperatorState, decode, encode, fold
from rxhubs.windows import EventTime

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
CTX = PartitionContext("ns", "hub", "$Default", "0")

#: The design's lookup: letter -> (device, event time in seconds after T0). e is late once d moved the watermark.
DESIGN = {"a": ("d1", 10), "b": ("d1", 50), "c": ("d2", 55), "d": ("d1", 65), "e": ("d1", 30)}

#: Event time from the event's own ``ts`` property (seconds after T0).
CLOCK = EventTime(lambda e: T0 + dt.timedelta(seconds=e.properties["ts"]))


def device(event: Event) -> Any:
    return event.properties["dev"]


def event(seq: int, dev: Any, seconds: float, enqueued: dt.datetime | None = None) -> Event:
    at = T0 + dt.timedelta(seconds=seconds)
    body = f"{dev}@{seconds}".encode()
    return Event(body, seq, str(seq * 10), enqueued or at, properties={"dev": dev, "ts": seconds})


def lookup(
    spec: dict[str, tuple[Any, float]] | None = None, session: Any = None, read: object | None = None
) -> dict[str | float, EventBatch]:
    """Letter -> a batch of one event; sequence numbers follow the letters' order in ``spec``."""
    read = read if read is not None else object()
    out: dict[str | float, EventBatch] = {}
    for seq, (letter, (dev, seconds)) in enumerate((spec or DESIGN).items()):
        ev = event(seq, dev, seconds)
        out[letter] = EventBatch(CTX, (ev,), None, None, session, Origin(read, seq, ev))
    return out


def heartbeat(newest: int, session: Any = None) -> EventBatch:
    """An empty batch whose ``last_enqueued`` says the partition's newest event is ``newest``."""
    return EventBatch(CTX, (), LastEnqueuedEventProperties(newest, str(newest * 10), None, None), None, session)


def shown(batch: Any) -> str:
    """A batch's results as ``key@start=value`` words (start in seconds after T0), ``o`` for none."""
    words = [f"{r.key}@{int((r.start - T0).total_seconds())}={r.value}" for r in batch.results]
    return " ".join(words) or "o"


def saved(batches: Iterable[EventBatch], base: dict[str, OperatorState] | None = None) -> dict[str, OperatorState]:
    """What a checkpoint after ``batches`` commits: their deltas folded, through the versioned encoding."""
    return decode(encode(fold(base or {}, [d for b in batches for d in b._state])))


def session_with(state: dict[str, OperatorState] | None, failures: list[Any] | None = None) -> PartitionSession:
    """A real ownership session that starts from ``state``; failures go to ``failures``."""
    session = PartitionSession(CTX)
    session.restored_state = state
    sink = failures if failures is not None else []
    session.bind(lambda *a: None, lambda s, op, err: sink.append((op, err)))
    return session


def batches_of(events: Sequence[Event], cuts: Sequence[int], session: Any = None) -> list[EventBatch]:
    """``events`` split at the indexes ``cuts`` into batches."""
    bounds = [0, *sorted({min(c, len(events)) for c in cuts}), len(events)]
    read = object()
    out = []
    for i, (lo, hi) in enumerate(itertools.pairwise(bounds)):
        if hi > lo:
            chunk = tuple(events[lo:hi])
            out.append(EventBatch(CTX, chunk, None, None, session, Origin(read, i, chunk[-1])))
    return out
