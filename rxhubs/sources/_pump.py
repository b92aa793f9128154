"""The state machine behind one subscription of :func:`~rxhubs.partition_batches`: pull, emit, resume (private).

It pulls a batch when fewer than ``max_inflight`` of its batches are held downstream, emits it with its lease
and origin, and after a retriable error closes the receiver and reopens it right after the last event emitted.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from reactivex import abc

from rxhubs import _telemetry
from rxhubs._batch import EventBatch, Origin, _Lease
from rxhubs._models import Event, Position
from rxhubs._retry import Backoff
from rxhubs._rx import from_coroutine
from rxhubs._shutdown import current_shutdown
from rxhubs.sources._settings import ReadSettings
from rxhubs.sources._shape import Shaper
from rxhubs.transport._base import PartitionReceiver
from rxhubs.transport._liveness import already_warned

__all__ = ["Pump"]

log = logging.getLogger("rxhubs.sources")

_SYNC_BURST = 64  # batches handed out in one scheduled step before yielding to other work
# ... and no longer than this: a synchronous pipeline slow per batch (a blocking write in ``do_action``) must not
# hold the loop for 64 of its batches, or the ownership renewals behind it run late and may expire. Not much
# shorter: a 20 ms slice cost the pure-Python reader ~20% (`bench throughput`, tuned; smaller socket reads)
_SYNC_SLICE = timedelta(milliseconds=200)
#: Seconds an idle pull waits for its first event when an empty pull would only be dropped (no ``emit_empty``): an
#: idle partition then wakes once a minute, not every ``max_wait``. The first event ends the wait at once, a close or
#: a receive error too (the receiver wakes its pull), and a silent path is cut off by the connection's watchdog
#: (:mod:`rxhubs.transport._liveness`), so nothing waited on the pull's return. A consumer of 512 idle partitions on the
#: emulator spent 0.32 ms of CPU per partition per second pulling every second (a task, a timer and a step each), and
#: 0.14 ms with this (2026-11-30; what is left is each link's tick and its liveness watch, once a second each).
IDLE_PULL = 60.0


class Pump:
    """The state machine behind one subscription of :func:`partition_batches`."""

    def __init__(
        self,
        *,
        observer: abc.ObserverBase[EventBatch],
        scheduler: abc.SchedulerBase,
        open_receiver: Callable[[Position], PartitionReceiver],
        start: Position,
        settings: ReadSettings,
        retry: Backoff,
        on_closed: Callable[[PartitionReceiver], None] | None,
        on_retry: Callable[[Exception], None] | None = None,
    ) -> None:
        self.observer = observer
        self.scheduler = scheduler
        self.open_receiver = open_receiver
        self.start_position = start
        self.max_batch_size = settings.max_batch_size
        self.max_wait = settings.max_wait
        self.max_inflight = settings.max_inflight
        self.emit_empty = settings.emit_empty
        self.shaper = (
            Shaper(min_size=settings.min_batch_size or 1, max_size=settings.max_batch_size, max_wait=settings.max_wait)
            if settings.shaped else None
        )
        self.retry = retry
        self.on_closed = on_closed
        self.on_retry = on_retry
        self.receiver: PartitionReceiver | None = None
        self.last_sequence_number: int | None = None
        self.inflight = 0
        self.index = 0  # the next batch's place in this read (its Origin)
        self.attempt = 0
        self.pulling = False
        self.pull: abc.DisposableBase | None = None
        self.in_step = False
        self.again = False
        self.stopping = False
        self.done = False
        self.unwatch: abc.DisposableBase | None = None
        self.timer: abc.DisposableBase | None = None

    # -- lifecycle -----------------------------------------------------------------------------------------
    def start(self) -> None:
        shutdown = current_shutdown()
        if shutdown is not None:
            self.unwatch = shutdown.watch(self.stop)
        self.schedule_step()

    def stop(self) -> None:
        """Graceful: no more pulls; complete once the batches in flight are acknowledged."""
        if self.done or self.stopping:
            return
        self.stopping = True
        self.cancel_pull()
        self.drop_held("stops")
        self.kick()

    def dispose(self) -> None:
        if self.done:
            return
        self.done = True
        self.cancel_pull()
        self.drop_held("closes")
        if self.timer is not None:
            self.timer.dispose()
        if self.unwatch is not None:
            self.unwatch.dispose()
        self.close_receiver()

    def finish(self, error: Exception | None = None) -> None:
        if self.done:
            return
        self.dispose()
        if error is None:
            self.observer.on_completed()
        else:
            self.observer.on_error(error)

    # -- the loop ------------------------------------------------------------------------------------------
    def schedule_step(self, delay: float = 0.0) -> None:
        if self.done:
            return
        if delay > 0:
            self.timer = self.scheduler.schedule_relative(delay, lambda *_: self.step())
        else:
            self.scheduler.schedule(lambda *_: self.step())

    def kick(self) -> None:
        """Something changed (an ack, a result): run a step now, or after the current one."""
        if self.in_step:
            self.again = True
        else:
            self.step()

    def step(self) -> None:
        if self.in_step:
            self.again = True
            return
        self.in_step = True
        began = self.scheduler.now  # virtual time does not move within a step: the count alone bounds it there
        try:
            for _ in range(_SYNC_BURST):
                self.again = False
                if self.done or self.pulling:
                    return
                if self.stopping:
                    if self.inflight == 0:
                        self.finish()
                    return
                if self.inflight >= self.max_inflight:
                    return
                if not self.pull_once():
                    return
                if self.scheduler.now - began >= _SYNC_SLICE:
                    break
            self.again = True  # burst or time slice used up: yield to other work, then go on
        finally:
            self.in_step = False
            if self.again and not self.done:
                self.again = False
                self.schedule_step()

    def pull_once(self) -> bool:
        """Pull one batch. True if it completed synchronously (the loop may go on)."""
        shaper = self.shaper
        try:
            receiver = self.receiver
            if receiver is None:
                receiver = self.receiver = self.open_receiver(self.position())
            if shaper is None:
                events = receiver.receive_nowait(self.max_batch_size)
            else:
                events = shaper.offer(receiver.receive_nowait(shaper.room), self.now())
        except Exception as exc:
            self.on_failure(exc)
            return False
        if events:
            self.on_result(events)
            return True
        self.pulling = True
        idle = self.max_wait if self.emit_empty else max(self.max_wait, IDLE_PULL)
        count, wait = (self.max_batch_size, idle) if shaper is None else (shaper.room, shaper.wait(self.now(), idle))
        source = from_coroutine(lambda: receiver.receive_batch(count, wait))
        self.pull = source.subscribe(self.on_pulled, self.on_pull_error, scheduler=self.scheduler)
        return not self.pulling

    def on_pulled(self, events: list[Event]) -> None:
        if self.done or not self.pulling:
            return
        self.pulling = False
        self.pull = None
        shaper = self.shaper
        if shaper is not None:
            filling = bool(events or shaper.pending)
            events = shaper.offer(events, self.now())
            if filling and not events:  # the batch is not due yet: pull on (an empty one is no heartbeat)
                self.kick()
                return
        self.on_result(events)
        self.kick()

    def on_pull_error(self, error: Exception) -> None:
        if self.done or not self.pulling:
            return
        self.pulling = False
        self.pull = None
        self.on_failure(error)

    def cancel_pull(self) -> None:
        pull, self.pull = self.pull, None
        self.pulling = False
        if pull is not None:
            pull.dispose()

    # -- results -------------------------------------------------------------------------------------------
    def on_result(self, events: list[Event]) -> None:
        self.attempt = 0
        last = self.last_sequence_number
        if events and last is not None and events[0].sequence_number <= last:
            events = [e for e in events if e.sequence_number > last]  # a transport replayed: drop
        if not events and not self.emit_empty:
            return
        receiver = self.receiver
        assert receiver is not None
        lease = _Lease(self.on_ack)
        if events:
            self.last_sequence_number = events[-1].sequence_number
        origin = Origin(self, self.index, events[-1] if events else None)
        self.index += 1
        context, last_enqueued = receiver.context, receiver.last_enqueued_event_properties
        batch = EventBatch(context, tuple(events), last_enqueued, lease, None, origin)
        _telemetry.hooks.received(batch)
        self.inflight += 1
        lease.hold()
        try:
            self.observer.on_next(batch)
        except Exception as exc:
            self.finish(exc)
            return
        finally:
            lease.release()

    def position(self) -> Position:
        """Where to (re)open: just after the last event emitted, else the start."""
        last = self.last_sequence_number
        return self.start_position if last is None else Position.from_sequence_number(last)

    def on_ack(self) -> None:
        self.inflight -= 1
        if not self.done:
            self.kick()

    def now(self) -> float:
        return self.scheduler.now.timestamp()

    def drop_held(self, why: str) -> None:
        """Drop a partial batch: never delivered, so the next reader reads it again from the checkpoint."""
        if self.shaper is not None and (dropped := self.shaper.clear()):
            log.debug("partition stream %s with %d events of a partial batch held: dropped, read again", why, dropped)

    def on_failure(self, error: Exception) -> None:
        self.close_receiver()
        self.drop_held("reopens")  # the receiver reopens after the last event emitted and reads them again
        if self.done:
            return
        self.attempt += 1
        if not self.stopping and self.retry.should_retry(error, self.attempt):
            delay = self.retry.delay(self.attempt)
            if self.on_retry is not None:
                self.on_retry(error)
            # a stall was already said out loud (rxhubs.liveness, WARNING) where it was detected: once is enough
            log.log(
                logging.INFO if already_warned(error) else logging.WARNING,
                "partition stream: %s; retry %d in %.2f s from %r", error, self.attempt, delay, self.position(),
            )
            self.schedule_step(delay)
            return
        self.finish(error)

    def close_receiver(self) -> None:
        receiver, self.receiver = self.receiver, None
        if receiver is None:
            return
        on_closed = self.on_closed

        def closed(_: Any = None) -> None:
            if on_closed is not None:
                on_closed(receiver)

        def failed(exc: Exception) -> None:
            log.warning("closing receiver failed: %s", exc)
            closed()

        try:
            from_coroutine(receiver.close).subscribe(on_completed=closed, on_error=failed, scheduler=self.scheduler)
        except Exception as exc:
            failed(exc)
