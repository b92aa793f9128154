"""One subscription of ``hops.process``: a lane per partition, the work in it, retries, poison and order (private).

A batch enters its partition's lane, runs (``concurrency`` at once per lane), is retried with backoff, and
leaves in arrival order once done; a batch whose retries ran out goes to ``on_poison`` or stops its partition.
:func:`~rxhubs.operators.publish` runs its sends through the same lanes.
"""

from __future__ import annotations

import inspect
import itertools
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from reactivex import abc
from reactivex.disposable import SingleAssignmentDisposable

from rxhubs import _telemetry
from rxhubs._batch import Ack, EventBatch
from rxhubs._retry import Backoff
from rxhubs._rx import from_coroutine, to_thread

__all__ = ["PoisonHandler", "Processor", "Work", "sequence_span"]

log = logging.getLogger("rxhubs.operators")

#: Work per batch: ``fn(batch)``, a plain function (run in a worker thread) or a coroutine function.
Work = Callable[[EventBatch], Any]
#: Called with a batch that kept failing and the last error, before the batch moves on (a dead-letter sink).
PoisonHandler = Callable[[EventBatch, Exception], Any]


async def _run(fn: Callable[[EventBatch], Any], batch: EventBatch, blocking: bool) -> None:
    if inspect.iscoroutinefunction(fn):
        await fn(batch)
        return
    result = await to_thread(fn, batch) if blocking else fn(batch)
    if inspect.isawaitable(result):
        await result


async def _run_group(fn: Callable[[list[EventBatch]], Any], batches: list[EventBatch]) -> None:
    result = fn(batches)
    if inspect.isawaitable(result):
        await result


async def _run_poison(handler: PoisonHandler, batch: EventBatch, error: Exception) -> None:
    result = handler(batch, error)
    if inspect.isawaitable(result):
        await result


@dataclass(eq=False, slots=True)
class _Entry:
    """One batch in a lane: held until it is emitted (or dropped with its failed partition)."""

    batch: EventBatch
    ack: Ack
    attempts: int = 0
    solo: bool = False  # its group failed: it is tried on its own from now on
    running: bool = False
    done: bool = False
    task: abc.DisposableBase | None = None
    timer: abc.DisposableBase | None = None


@dataclass(eq=False, slots=True)
class _Lane:
    """The batches of one read of one partition, in arrival order."""

    entries: deque[_Entry]
    running: int = 0
    failed: bool = False


class Processor:
    """One subscription of the operator."""

    def __init__(
        self,
        observer: abc.ObserverBase[EventBatch],
        scheduler: abc.SchedulerBase,
        fn: Work,
        concurrency: int,
        retry: Backoff,
        on_poison: PoisonHandler | None,
        blocking: bool,
        operation: str = "process",
        group: Callable[[list[EventBatch]], Any] | None = None,
        gate: Any = None,
    ) -> None:
        self.operation = operation
        self.group = group
        self.gate = gate  # an async lock a lane's group attempt takes before it picks its batches, or None
        self.observer = observer
        self.scheduler = scheduler
        self.fn = fn
        self.concurrency = concurrency
        self.retry = retry
        self.on_poison = on_poison
        self.blocking = blocking
        self.lanes: dict[object, _Lane] = {}
        self.upstream = SingleAssignmentDisposable()
        self.completed = False
        self.terminated = False

    # -- upstream ------------------------------------------------------------------------------------------
    def on_next(self, batch: EventBatch) -> None:
        if self.terminated:
            return
        key = batch._origin.read if batch._origin is not None else batch.context
        lane = self.lanes.get(key)
        if lane is None:
            lane = self.lanes[key] = _Lane(deque())
        entry = _Entry(batch, batch.hold())
        if lane.failed:
            entry.ack()  # its partition failed: the batch is dropped, it will be read again
            return
        lane.entries.append(entry)
        self._start(lane)

    def on_error(self, error: Exception) -> None:
        if self.terminated:
            return
        self._terminate()
        self.observer.on_error(error)

    def on_completed(self) -> None:
        self.completed = True
        self._maybe_complete()

    def dispose(self) -> None:
        self.upstream.dispose()
        self._terminate()

    # -- the work ------------------------------------------------------------------------------------------
    def _start(self, lane: _Lane) -> None:
        if self.group is not None and lane.running == 0 and not (lane.failed or self.terminated):
            waiting = self._waiting(lane)  # with a group function, what queued behind a busy lane goes together
            if waiting and self.gate is not None:
                return self._attempt_gated(lane, self.gate, waiting[0])
            if len(waiting) > 1:
                return self._attempt_group(lane, waiting)
        for entry in list(lane.entries):  # work that completes at once emits (and pops) while this runs
            if lane.running >= self.concurrency or lane.failed or self.terminated:
                return
            if entry.running or entry.done or entry.timer is not None:
                continue
            self._attempt(lane, entry)

    def _attempt(self, lane: _Lane, entry: _Entry) -> None:
        entry.running = True
        entry.attempts += 1
        lane.running += 1
        fn, batch, attempt = self.fn, entry.batch, entry.attempts
        work = from_coroutine(lambda: _telemetry.hooks.process(batch, attempt, _run(fn, batch, self.blocking)))
        entry.task = work.subscribe(
            on_completed=lambda: self._succeeded(lane, entry),
            on_error=lambda error: self._failed(lane, entry, error),
            scheduler=self.scheduler,
        )

    @staticmethod
    def _waiting(lane: _Lane) -> list[_Entry]:
        fresh = lambda e: not (e.done or e.running or e.timer is not None or e.attempts or e.solo)  # noqa: E731
        # (past the batches done but not emitted yet: those queued behind them went one by one, and past the gate)
        return list(itertools.takewhile(fresh, itertools.dropwhile(lambda e: e.done, lane.entries)))

    def _attempt_group(self, lane: _Lane, entries: list[_Entry]) -> None:
        """One attempt at several batches (one slot); if it fails, each is tried again on its own."""
        group = self.group
        assert group is not None
        for entry in entries:
            entry.running = True
        lane.running += 1
        batches = [entry.batch for entry in entries]
        work = from_coroutine(lambda: _telemetry.hooks.process(batches[-1], 1, _run_group(group, batches)))
        entries[0].task = work.subscribe(
            on_completed=lambda: self._group_done(lane, entries),
            on_error=lambda error: self._group_failed(lane, entries, error),
            scheduler=self.scheduler,
        )

    def _attempt_gated(self, lane: _Lane, gate: Any, first: _Entry) -> None:
        """Take the gate, then every batch queued by then, in one attempt (one batch: an ordinary attempt)."""
        group, taken = self.group, []
        assert group is not None
        lane.running += 1

        async def run() -> None:
            async with gate:
                if self.terminated or lane.failed:
                    return
                taken.extend(self._waiting(lane))
                for entry in taken:
                    entry.running = True
                if len(taken) == 1:
                    taken[0].attempts += 1
                batches = [entry.batch for entry in taken]
                await _telemetry.hooks.process(batches[-1], taken[0].attempts or 1, _run_group(group, batches))

        def done() -> None:
            self._succeeded(lane, taken[0]) if len(taken) == 1 else self._group_done(lane, taken)

        def failed(error: Exception) -> None:
            self._failed(lane, taken[0], error) if len(taken) == 1 else self._group_failed(lane, taken, error)

        first.task = from_coroutine(run).subscribe(on_completed=done, on_error=failed, scheduler=self.scheduler)

    def _group_done(self, lane: _Lane, entries: list[_Entry]) -> None:
        lane.running -= 1
        for entry in entries:
            entry.running, entry.done = False, True
        self._emit_ready(lane)
        self._start(lane)

    def _group_failed(self, lane: _Lane, entries: list[_Entry], error: Exception) -> None:
        lane.running -= 1
        for entry in entries:
            entry.running, entry.solo = False, True
        if entries and not (self.terminated or lane.failed):
            log.info("partition %s: %s of %d batches failed (%r); each is tried on its own",
                     entries[0].batch.partition_id, self.operation, len(entries), error)
            self._start(lane)

    def _succeeded(self, lane: _Lane, entry: _Entry) -> None:
        if not entry.running:
            return
        entry.running, entry.done, entry.task = False, True, None
        lane.running -= 1
        self._emit_ready(lane)
        self._start(lane)

    def _failed(self, lane: _Lane, entry: _Entry, error: Exception) -> None:
        if not entry.running:
            return
        entry.running, entry.task = False, None
        lane.running -= 1
        if self.terminated or lane.failed:
            return
        batch = entry.batch
        if self.retry.should_retry(error, entry.attempts):
            delay = self.retry.delay(entry.attempts)
            log.warning(
                "partition %s: %s of batch %s failed (%r); retry %d in %.1f s",
                batch.partition_id,
                self.operation,
                sequence_span(batch),
                error,
                entry.attempts,
                delay,
            )
            if batch._session is not None:
                batch._session.report(self.operation, error)

            def again(*_: Any) -> None:  # the batch kept its slot while it waited: nothing overtook it
                entry.timer = None
                if not (self.terminated or lane.failed):
                    lane.running -= 1
                    self._attempt(lane, entry)

            lane.running += 1
            entry.timer = self.scheduler.schedule_relative(delay, again)
            return
        if self.on_poison is not None:
            self._dead_letter(lane, entry, error)
        else:
            self._fail(lane, entry, error)

    def _dead_letter(self, lane: _Lane, entry: _Entry, error: Exception) -> None:
        """Hand a poison batch to ``on_poison``; once it returned, the batch moves on (and may be checkpointed)."""
        handler, batch = self.on_poison, entry.batch
        assert handler is not None
        log.error("partition %s: batch %s failed %d times (%r): handed to on_poison",
                  batch.partition_id, sequence_span(batch), entry.attempts, error)
        entry.running = True
        lane.running += 1

        def moved_on() -> None:
            self._succeeded(lane, entry)

        def not_taken(poison_error: Exception) -> None:
            entry.running, entry.task = False, None
            lane.running -= 1
            log.error("partition %s: on_poison failed (%r)", batch.partition_id, poison_error)
            self._fail(lane, entry, poison_error)

        entry.task = from_coroutine(lambda: _run_poison(handler, batch, error)).subscribe(
            on_completed=moved_on, on_error=not_taken, scheduler=self.scheduler
        )

    def _fail(self, lane: _Lane, entry: _Entry, error: Exception) -> None:
        """The batch cannot be processed: stop its partition (or, without balancing, the stream)."""
        batch = entry.batch
        log.error(
            "partition %s: %s of batch %s failed %d times (%r): stopping the partition",
            batch.partition_id,
            self.operation,
            sequence_span(batch),
            entry.attempts,
            error,
        )
        lane.failed = True
        for other in lane.entries:
            for handle in (other.task, other.timer):
                if handle is not None:
                    handle.dispose()
            other.ack()
        lane.running = 0
        lane.entries.clear()
        session = batch._session
        if session is not None:
            session.fail(self.operation, error)
            self._maybe_complete()
            return
        self._terminate()
        self.observer.on_error(error)

    def _emit_ready(self, lane: _Lane) -> None:
        entries = lane.entries
        while entries and entries[0].done and not self.terminated:
            entry = entries.popleft()
            try:
                self.observer.on_next(entry.batch)
            finally:
                entry.ack()
        self._maybe_complete()

    def _maybe_complete(self) -> None:
        if self.completed and not self.terminated and all(not lane.entries for lane in self.lanes.values()):
            self.terminated = True
            self.observer.on_completed()

    def _terminate(self) -> None:
        self.terminated = True
        for lane in self.lanes.values():
            for entry in lane.entries:
                for handle in (entry.task, entry.timer):
                    if handle is not None:
                        handle.dispose()
            lane.entries.clear()


def sequence_span(batch: EventBatch) -> str:
    first, last = batch.first_sequence_number, batch.last_sequence_number
    return "(empty)" if first is None else f"{first}..{last}"
