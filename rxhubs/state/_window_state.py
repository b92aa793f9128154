"""The live state of ``hops.window`` in one partition: open windows, stream time, watermark, closing.

Semantics (per event, so results do not depend on how events were split into batches):

* stream time ``T`` = the largest event time seen (and ``enqueued_time - max_delay`` with an ``EventTime`` clock
  that has one); the watermark ``W = T - grace`` never goes back;
* a window ``[start, end)`` is closed once ``end <= W``; an event for a closed window is *late* for it (for
  session windows: an event whose time is before ``W``);
* closed windows are emitted and dropped from state when the batch ends.

Saved keys are ``json.dumps([key, start])`` (start in microseconds since the epoch); values are the aggregate,
or ``[end, aggregate]`` for session windows. Meta: ``t`` (stream time), ``wm`` (watermark), ``seq`` (last
sequence number folded in) and ``late`` (late events so far in this partition), all integers or null.
Tumbling and hopping windows fold events on a hot path of their own (``_window_fixed``).
"""

from __future__ import annotations

import datetime as dt
import heapq
import json
from collections.abc import Callable, Sequence
from json.encoder import encode_basestring_ascii
from operator import itemgetter
from typing import Any

from rxhubs._batch import EventBatch
from rxhubs._models import Event, PartitionContext
from rxhubs.errors import StateError
from rxhubs.state._codec import DELETED, OperatorState, StateDelta
from rxhubs.state._spec import Aggregate, Hopping, Session, WindowBatch, WindowResult, Windows, count_add
from rxhubs.state._stateful import PLAIN_TYPES, Keyed, dump, hashable, plain
from rxhubs.state._time import EPOCH, CaughtUp, Clock, EventTime, duration_us, from_us, to_us
from rxhubs.state._window_fixed import _MISSING, _US, FixedWindows, Win

__all__ = ["WindowState"]

_result = WindowResult._unchecked


class WindowState(FixedWindows, Keyed):
    def __init__(
        self,
        name: str,
        context: PartitionContext,
        key: Callable[[Event], Any],
        windows: Windows,
        aggregate: Aggregate,
        clock: Clock,
        grace: int,
        updates: bool,
        side: bool,
        idle: CaughtUp | None,
    ) -> None:
        super().__init__(name, context)
        self.key, self.windows, self.aggregate, self.grace = key, windows, aggregate, grace
        self.updates, self.side = updates, side
        self.get_time = clock.get if isinstance(clock, EventTime) else None
        delay = clock.max_delay if isinstance(clock, EventTime) else 0
        self.max_delay = None if delay is None else duration_us(delay, "max_delay", zero=True)
        self.idle_after = None if idle is None else duration_us(idle.after, "after", zero=True)
        self.idle_skew = 0 if idle is None else duration_us(idle.skew, "skew", zero=True)
        self.add = aggregate.add
        self.session = isinstance(windows, Session)
        self.size = 0 if isinstance(windows, Session) else windows.size
        #: What :meth:`_fixed` reads, in one tuple (it runs per batch: with small batches the lookups count).
        self.fixed = (
            self.size, windows.step if isinstance(windows, Hopping) else self.size,
            0 if isinstance(windows, Session) else windows.offset, grace, side, self.get_time, self.max_delay, key,
            aggregate.add, aggregate.init, aggregate.add is count_add,
        )
        self.values: dict[Win, Any] = {}
        self.ends: dict[Win, int] = {}  # session windows only
        self.starts: dict[Any, list[int]] = {}  # session windows only: key -> starts of its open sessions
        self.closing: dict[int, set[Win]] = {}
        self.heap: list[int] = []
        self.skeys: dict[Win, str] = {}
        self.dirty: set[Win] = set()
        self.t: int | None = None
        self.wm: int | None = None
        self.late_total = 0
        self.active_at: float | None = None  # when an event last arrived (the scheduler's clock), for idle

    # -- saved form ----------------------------------------------------------------------------------------
    def meta(self) -> dict[str, Any]:
        return {"t": self.t, "wm": self.wm, "seq": self.seq, "late": self.late_total}

    def restore(self, state: OperatorState) -> None:
        super().restore(state)
        meta = state.meta
        self.t, self.wm, self.late_total = meta.get("t"), meta.get("wm"), meta.get("late", 0)
        try:
            for skey, value in state.keys.items():
                raw_key, start = json.loads(skey)
                win = (hashable(raw_key), int(start))
                if isinstance(self.windows, Session):
                    end, value = value
                    self._open(win, end)
                    self.starts.setdefault(win[0], []).append(win[1])
                else:
                    self._open(win, win[1] + self.windows.size)
                self.values[win] = value
                self.skeys[win] = skey
        except (ValueError, TypeError) as exc:
            raise StateError(f"saved state of operator {self.name!r} is not window state: {exc}") from exc
        for starts in self.starts.values():
            starts.sort()

    def _open(self, win: Win, end: int) -> None:
        bucket = self.closing.get(end)
        if bucket is None:
            bucket = self.closing[end] = set()
            heapq.heappush(self.heap, end)
        bucket.add(win)
        if isinstance(self.windows, Session):
            self.ends[win] = end

    def _skey(self, win: Win, *, keep: bool = True) -> str:
        """The saved key of ``win`` (``json.dumps([key, start])``), remembered unless ``keep`` is False."""
        skey = self.skeys.get(win)
        if skey is None:
            key, kind = win[0], type(win[0])
            if kind is str:  # what dump([key, start]) gives, without the encoder's overhead
                skey = f"[{encode_basestring_ascii(key)},{win[1]}]"
            elif kind is int:
                skey = f"[{key},{win[1]}]"
            else:
                skey = dump([key, win[1]], f"the key {key!r}")
            if keep:
                self.skeys[win] = skey
        return skey

    # -- one batch -----------------------------------------------------------------------------------------
    def run(self, batch: EventBatch, now: float | None) -> Callable[[tuple[StateDelta, ...]], EventBatch]:
        late: list[Event] = []
        late_count = 0
        events: Sequence[Event] = batch.events
        if events and events[0].sequence_number <= self.seq:  # read again after a restore: some are folded in
            seq = self.seq
            events = [event for event in events if event.sequence_number > seq]
        if not self.session:
            late_count = self._fixed(events, late)
        else:
            for event in events:
                self.seq = event.sequence_number
                if self._add(event):
                    late_count += 1
                    if self.side:
                        late.append(event)
        if batch.events:
            self.active_at = now
        elif now is not None and self.idle_after is not None:
            self._maybe_tick(batch, now)
        self.late_total += late_count
        results = tuple(self._settle())
        return lambda state: WindowBatch(
            batch.context, batch.events, batch.last_enqueued, batch._lease, batch._session, batch._origin,
            state, results, tuple(late), late_count,
        )

    def passthrough(self, batch: EventBatch) -> EventBatch:
        return WindowBatch(batch.context, batch.events, batch.last_enqueued, batch._lease, batch._session,
                           batch._origin, batch._state)

    def _advance(self, t: int) -> None:
        if self.t is None or t > self.t:
            self.t = t
            wm = t - self.grace
            if self.wm is None or wm > self.wm:
                self.wm = wm

    def _add(self, event: Event) -> bool:
        """Fold one event in (session windows: see ``FixedWindows._fixed`` for the others); True if it was late."""
        get_time = self.get_time
        if get_time is None:
            try:
                t: int = (event.enqueued_time - EPOCH) // _US
            except TypeError:  # a naive datetime
                t = to_us(event.enqueued_time)
        else:
            t = to_us(get_time(event))
            if self.max_delay is not None:
                floor = to_us(event.enqueued_time) - self.max_delay
                if self.t is None or floor > self.t:
                    self._advance(floor)
        if self.t is None or t > self.t:
            self._advance(t)
        key = self.key(event)
        wm = self.wm
        windows = self.windows
        assert isinstance(windows, Session)
        if wm is not None and t < wm:
            return True
        try:
            hash(key)
        except TypeError as exc:
            raise StateError(f"window keys must be hashable and JSON-able, got {key!r}") from exc
        self._session(key, t, event, windows.gap)
        return False

    def _session(self, key: Any, t: int, event: Event, gap: int) -> None:
        starts = self.starts.setdefault(key, [])
        merged = [s for s in starts if s < t + gap and t < self.ends[(key, s)]]
        if not merged:
            win = (key, t)
            self.values[win] = self.aggregate.add(self.aggregate.init(), event)
            self._open(win, t + gap)
            starts.append(t)
            starts.sort()
            self.dirty.add(win)
            return
        merge = self.aggregate.merge
        if len(merged) > 1 and merge is None:
            raise StateError(f"operator {self.name!r}: session windows need an aggregate with merge (fold(merge=...))")
        start, end = min(merged[0], t), max(max(self.ends[(key, s)] for s in merged), t + gap)
        value = _MISSING
        for s in merged:  # in start order
            part = self.values.pop((key, s))
            value = part if value is _MISSING else merge(value, part)  # type: ignore[misc]
            self._forget((key, s))
            starts.remove(s)
        win = (key, start)
        self.values[win] = self.aggregate.add(value, event)
        self._open(win, end)
        starts.append(start)
        starts.sort()
        self.dirty.add(win)

    def _forget(self, win: Win) -> None:
        """Remove a window from the closing index and from saved state (its values are gone already)."""
        end = self.ends.pop(win, None)
        if end is None and not isinstance(self.windows, Session):
            end = win[1] + self.windows.size
        bucket = self.closing.get(end) if end is not None else None
        if bucket is not None:
            bucket.discard(win)
        skey = self.skeys.pop(win, None)
        if skey is not None:
            self.drop(skey)
        self.dirty.discard(win)

    def _maybe_tick(self, batch: EventBatch, now: float) -> None:
        """An empty batch of a caught-up partition silent for ``after``: stream time moves to the clock's now."""
        newest = batch.last_enqueued
        assert self.idle_after is not None
        if newest is None or newest.sequence_number > self.seq:
            self.active_at = None  # not caught up (or unknown): silence counts from when it is
            return
        if self.active_at is None:
            self.active_at = now
        if self.max_delay is None or (now - self.active_at) * 1_000_000 < self.idle_after:
            return
        self._advance(round(now * 1_000_000) - self.idle_skew - self.max_delay)

    def _settle(self) -> list[WindowResult]:
        """Close windows at or below the watermark; save what changed; the results to emit."""
        found: list[tuple[int, int, str, WindowResult]] = []
        wm = self.wm
        stamps: dict[int, dt.datetime] = {}  # windows closing together share their times

        def at(us: int) -> dt.datetime:
            stamp = stamps.get(us)
            if stamp is None:
                stamp = stamps[us] = from_us(us)
            return stamp

        session, size, starts, updates = self.session, self.size, self.starts, self.updates
        values, ends, skeys, dirty, heap = self.values, self.ends, self.skeys, self.dirty, self.heap
        closing, sizes, changes, total = self.closing, self.sizes, self.changes, self.total
        while wm is not None and heap and heap[0] <= wm:
            end = heapq.heappop(heap)
            stop = at(end)
            begin = None if session else at(end - size)  # fixed windows closing together start together
            for win in closing.pop(end, ()):
                value = values.pop(win)
                skey = skeys.pop(win, None) or self._skey(win, keep=False)
                if type(value) not in PLAIN_TYPES:  # as a restored value would be, so a re-emitted result is equal
                    value = json.loads(dump(value, f"the value of window {win!r}"))
                found.append((end, win[1], skey, _result(win[0], begin or at(win[1]), stop, value, True)))
                if session:
                    ends.pop(win, None)
                    starts[win[0]].remove(win[1])
                    if not starts[win[0]]:
                        del starts[win[0]]
                total -= sizes.pop(skey, 0)  # Keyed.drop, inline: this loop runs once per window
                changes[skey] = DELETED
                dirty.discard(win)
        for win in dirty:
            value = values[win]
            skey = skeys.get(win) or self._skey(win)
            if not session and type(value) is int:  # the common case (count): no JSON round trip needed
                n = len(skey) + len(str(value))  # self.put(skey, value, str(value)), inline: once per window
                total += n - sizes.get(skey, 0)
                sizes[skey] = n
                changes[skey] = value
                if updates:
                    end = win[1] + size
                    found.append((end, win[1], skey, _result(win[0], at(win[1]), at(end), value, False)))
                continue
            end = ends[win] if session else win[1] + size
            text = dump([end, value] if session else value, f"the value of window {win!r}")
            if not plain(value):
                value = self.values[win] = json.loads(text)[1] if session else json.loads(text)
                saved = json.loads(text)
            else:
                saved = [end, value] if session else value
            n = len(skey) + len(text)  # self.put(skey, saved, text), inline
            total += n - sizes.get(skey, 0)
            sizes[skey] = n
            changes[skey] = saved
            if updates:
                found.append((end, win[1], skey, _result(win[0], at(win[1]), at(end), value, False)))
        self.total = total
        if dirty:
            self.dirty = set()
        if not found:
            return []
        found.sort(key=itemgetter(0, 1, 2))
        return [r[3] for r in found]
