"""Tumbling and hopping windows: the hot path that folds a batch's events into them (private).

:class:`FixedWindows` is the part of :class:`~rxhubs.state._window_state.WindowState` that folds events into
fixed windows, one loop with the lookups hoisted out of it; session windows fold one event at a time in
``_window_state``. The state it works on is set by ``WindowState.__init__``.
"""

from __future__ import annotations

import datetime as dt
import heapq
from collections import Counter
from collections.abc import Sequence
from typing import Any

from rxhubs._models import Event
from rxhubs.errors import StateError
from rxhubs.state._spec import Aggregate
from rxhubs.state._stateful import hashes
from rxhubs.state._time import EPOCH, to_us

__all__ = ["FixedWindows", "Win"]

_MISSING: Any = object()
_US = dt.timedelta(microseconds=1)
Win = tuple[Any, int]  # (key, start)


class FixedWindows:
    """Folding events into tumbling and hopping windows, for :class:`~rxhubs.state._window_state.WindowState`."""

    fixed: tuple[Any, ...]
    values: dict[Win, Any]
    dirty: set[Win]
    closing: dict[int, set[Win]]
    heap: list[int]
    t: int | None
    wm: int | None
    seq: int
    aggregate: Aggregate
    size: int

    def _fixed(self, events: Sequence[Event], late: list[Event]) -> int:
        """Fold ``events`` (none folded in yet) into tumbling or hopping windows; how many were late.

        The hot path: one loop with the lookups hoisted out of it (session windows go through :meth:`_add`).
        A count (the common case) only lists the windows each event falls in; :meth:`_count` adds them up per
        window after the loop, in C, so an event costs an append instead of three lookups.
        """
        size, step, offset, grace, side, get_time, max_delay, key_of, add, init, counting = self.fixed
        values, dirty, closing, heap = self.values, self.dirty, self.closing, self.heap
        stream, wm = self.t, self.wm
        late_count = 0
        hits: list[Win] = []
        hit = hits.append
        tumbling_count = counting and step == size
        try:
            for event in events:
                if get_time is None:
                    try:
                        t: int = (event.enqueued_time - EPOCH) // _US
                    except TypeError:  # a naive datetime
                        t = to_us(event.enqueued_time)
                else:
                    raw = get_time(event)
                    kind = type(raw)
                    t = round(raw * 1_000_000) if kind is float or kind is int else to_us(raw)
                    if max_delay is not None:
                        floor = to_us(event.enqueued_time) - max_delay
                        if stream is None or floor > stream:
                            stream = floor
                            if wm is None or floor - grace > wm:
                                wm = floor - grace
                if stream is None or t > stream:
                    stream = t
                    if wm is None or t - grace > wm:
                        wm = t - grace
                key = key_of(event)
                start = (t - offset) // step * step + offset  # the latest window holding t; then earlier ones
                if tumbling_count:  # one window per event, counted later: the loop below, unrolled
                    if wm is None or start + size > wm:
                        hit((key, start))
                        continue
                    late_count += 1
                    if side:
                        late.append(event)
                    continue
                was_late = False
                while start > t - size:
                    if wm is not None and start + size <= wm:
                        was_late = True
                    elif counting:
                        hit((key, start))
                    else:
                        win = (key, start)
                        try:
                            value = values.get(win, _MISSING)
                        except TypeError as exc:
                            raise StateError(f"window keys must be hashable and JSON-able, got {key!r}") from exc
                        if value is _MISSING:  # a new window: self._open(win, start + size), inline
                            value = init()
                            bucket = closing.get(start + size)
                            if bucket is None:
                                bucket = closing[start + size] = set()
                                heapq.heappush(heap, start + size)
                            bucket.add(win)
                        values[win] = add(value, event)
                        dirty.add(win)
                    start -= step
                if was_late:
                    late_count += 1
                    if side:
                        late.append(event)
        finally:
            self.t, self.wm = stream, wm
        if events:  # (a batch's events are in sequence-number order; after a failure the state is dropped)
            self.seq = events[-1].sequence_number
        if hits:  # (after a failure the partition's state is dropped: nothing to count)
            self._count(hits)
        return late_count

    def _count(self, hits: list[Win]) -> None:
        """Add one to each window of ``hits`` (a window once per event in it), opening the new ones.

        A window is counted here, after the batch's loop, rather than at its event: nothing in the loop reads a
        count (lateness depends on the watermark only), and windows are settled after the loop anyway.
        """
        try:
            counted = Counter(hits)
        except TypeError:
            key = next(k for k, _ in hits if not hashes(k))
            raise StateError(f"window keys must be hashable and JSON-able, got {key!r}") from None
        values, closing, heap, init, size = self.values, self.closing, self.heap, self.aggregate.init, self.size
        for win, n in counted.items():
            value = values.get(win, _MISSING)
            if value is _MISSING:  # a new window: self._open(win, start + size), inline
                value = init()
                end = win[1] + size
                bucket = closing.get(end)
                if bucket is None:
                    bucket = closing[end] = set()
                    heapq.heappush(heap, end)
                bucket.add(win)
            values[win] = value + n
        self.dirty.update(counted)
