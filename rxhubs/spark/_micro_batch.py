"""The Spark sink's state machine: gather batches into micro-batches, write one at a time off the loop, emit after.

See :mod:`rxhubs.spark._sink` for the contract; this module is how :func:`rxhubs.spark.write` keeps it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, TypeAlias

import reactivex
from reactivex import Observable, abc
from reactivex.disposable import Disposable, SingleAssignmentDisposable
from reactivex.scheduler.eventloop import AsyncIOScheduler

from rxhubs._batch import Ack, EventBatch
from rxhubs._models import PartitionContext
from rxhubs.errors import ConfigurationError, RxHubsError, SinkError

__all__ = ["WriteRunner", "_Sink"]

log = logging.getLogger("rxhubs.spark")

#: Runs a blocking job and delivers its result as a one-shot Observable.
WriteRunner: TypeAlias = Callable[[Callable[[], Any]], Observable[Any]]

_Entry: TypeAlias = tuple[EventBatch, Ack]


def _asyncio_loop(scheduler: abc.SchedulerBase) -> asyncio.AbstractEventLoop | None:
    """The running loop when the pipeline runs on asyncio (jobs go to threads), else None (jobs run inline)."""
    if not isinstance(scheduler, AsyncIOScheduler):
        return None
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _inline(job: Callable[[], Any]) -> Observable[Any]:
    """The job run as an action on the subscribing scheduler (virtual time: takes no time)."""

    def subscribe(observer: abc.ObserverBase[Any], scheduler: abc.SchedulerBase | None = None) -> abc.DisposableBase:
        def action(_: abc.SchedulerBase, __: Any = None) -> None:
            try:
                result = job()
            except Exception as exc:  # every failure of the job goes to on_error
                observer.on_error(exc)
                return
            observer.on_next(result)
            observer.on_completed()

        return (scheduler or reactivex.scheduler.CurrentThreadScheduler.singleton()).schedule(action)

    return reactivex.create(subscribe)


def _in_executor(loop: asyncio.AbstractEventLoop, executor: concurrent.futures.Executor) -> WriteRunner:
    """Runs the job on ``executor``; its outcome is delivered on ``loop`` (futures call back through it)."""

    def run(job: Callable[[], Any]) -> Observable[Any]:
        def subscribe(
            observer: abc.ObserverBase[Any], scheduler: abc.SchedulerBase | None = None
        ) -> abc.DisposableBase:
            future = loop.run_in_executor(executor, job)
            cancelled = False

            def done(fut: asyncio.Future[Any]) -> None:
                if cancelled or fut.cancelled():
                    return
                exc = fut.exception()
                if exc is None:
                    observer.on_next(fut.result())
                    observer.on_completed()
                elif isinstance(exc, Exception):
                    observer.on_error(exc)
                else:  # KeyboardInterrupt, SystemExit in the worker: report, do not swallow silently
                    observer.on_error(RuntimeError(f"write interrupted: {exc!r}"))

            def cancel() -> None:
                nonlocal cancelled
                cancelled = True  # a running thread cannot be stopped: its outcome is ignored

            future.add_done_callback(done)
            return Disposable(cancel)

        return reactivex.create(subscribe)

    return run


class _Sink:
    """State of one subscription of :func:`write` (all methods run on the pipeline's scheduler)."""

    def __init__(
        self,
        *,
        observer: abc.ObserverBase[EventBatch],
        scheduler: abc.SchedulerBase,
        convert: Callable[[Sequence[EventBatch]], Any],
        transform: Callable[[Any], Any] | None,
        writer: Callable[[Any], object],
        max_events: int,
        max_interval: float,
        retries: int,
        delay: Callable[[int], float],
        executor: concurrent.futures.Executor | WriteRunner | None,
    ) -> None:
        self.observer = observer
        self.scheduler = scheduler
        self.convert = convert
        self.transform = transform
        self.writer = writer
        self.max_events = max_events
        self.max_interval = max_interval
        self.retries = retries
        self.delay = delay
        self.executor = executor
        self.own_executor: concurrent.futures.ThreadPoolExecutor | None = None
        self.runner: WriteRunner | None = None
        self.threaded = False  # jobs run on a worker thread: the next micro-batch may be converted meanwhile
        self.converter: concurrent.futures.ThreadPoolExecutor | None = None
        self.ahead: tuple[list[_Entry], concurrent.futures.Future[Any]] | None = None
        self.upstream = SingleAssignmentDisposable()
        self.buffer: list[_Entry] = []
        self.buffered_events = 0
        self.queue: deque[list[_Entry]] = deque()
        self.writing: list[_Entry] | None = None
        self.write_subscription: abc.DisposableBase | None = None
        self.attempt = 0
        self.timer: abc.DisposableBase | None = None
        self.retry_timer: abc.DisposableBase | None = None
        self.due = False
        self.waiting: dict[PartitionContext, int] = {}  # batches per partition in buffer, queue or write
        self.upstream_done = False
        self.in_pump = False
        self.done = False

    # -- input ---------------------------------------------------------------------------------------------
    def on_next(self, batch: EventBatch) -> None:
        if self.done:
            return
        if not isinstance(batch, EventBatch):
            self.fail(ConfigurationError(f"rxhubs.spark.write takes EventBatch items, got {type(batch).__name__}"))
            return
        context = batch.context
        if not batch.events and not self.waiting.get(context):
            self.observer.on_next(batch)  # a heartbeat with nothing ahead of it: pass through
            return
        self.buffer.append((batch, batch.hold()))
        self.waiting[context] = self.waiting.get(context, 0) + 1
        self.buffered_events += len(batch.events)
        if self.timer is None and len(self.buffer) == 1:
            self.timer = self.scheduler.schedule_relative(self.max_interval, self.on_timer)
        if self.buffered_events >= self.max_events:
            self.seal()
            self.prepare()
        self.pump()

    def on_error(self, error: Exception) -> None:
        self.fail(error)

    def on_completed(self) -> None:
        if self.done:
            return
        self.upstream_done = True
        self.pump()

    def on_timer(self, _: abc.SchedulerBase, __: Any = None) -> None:
        self.timer = None
        if self.done or not self.buffer:
            return
        self.due = True
        self.pump()

    # -- micro-batches -------------------------------------------------------------------------------------
    def seal(self) -> None:
        if self.timer is not None:
            self.timer.dispose()
            self.timer = None
        self.due = False
        if self.buffer:
            self.queue.append(self.buffer)
            self.buffer = []
            self.buffered_events = 0

    def pump(self) -> None:
        """Start the next write if none runs; complete when the source did and everything was written."""
        if self.in_pump:
            return
        self.in_pump = True
        try:
            while not self.done and self.writing is None:
                if not self.queue and self.buffer and (self.due or self.upstream_done):
                    self.seal()
                if self.queue:
                    self.start(self.queue.popleft())
                    continue  # a write that finished at once (no events, or inline) lets the loop go on
                if self.upstream_done and not self.buffer:
                    self.complete()
                return
        finally:
            self.in_pump = False

    def start(self, micro_batch: list[_Entry]) -> None:
        self.writing = micro_batch
        self.attempt += 1
        batches = [batch for batch, _ in micro_batch]
        if not any(batch.events for batch in batches):
            self.written()  # only heartbeats: nothing to write
            return
        settled = False

        def on_completed() -> None:
            nonlocal settled
            if not settled:
                settled = True
                self.written()

        def on_error(error: Exception) -> None:
            nonlocal settled
            if not settled:
                settled = True
                self.failed(error)

        prepared = None
        if self.ahead is not None and self.ahead[0] is micro_batch:
            prepared, self.ahead = self.ahead[1], None
        subscription = SingleAssignmentDisposable()
        self.write_subscription = subscription
        subscription.disposable = self.run_job(functools.partial(self.job, batches, prepared)).subscribe(
            on_completed=on_completed, on_error=on_error, scheduler=self.scheduler
        )
        self.prepare()

    def job(self, batches: Sequence[EventBatch], prepared: concurrent.futures.Future[Any] | None) -> None:
        """One write (on the worker thread, or inline): convert (or take the prepared data), transform, write."""
        data = prepared.result() if prepared is not None else self.convert(batches)
        if self.transform is not None:
            data = self.transform(data)
        self.writer(data)

    def prepare(self) -> None:
        """While a write runs on a worker thread, convert the next sealed micro-batch on a second thread.

        Building a DataFrame costs about a fifth of a 10k-event write; doing it meanwhile takes it off the
        critical path. Only the conversion runs ahead: ``transform`` and ``writer`` stay in order.
        """
        if self.done or not self.threaded or self.writing is None or self.ahead is not None or not self.queue:
            return
        micro_batch = self.queue[0]
        batches = [batch for batch, _ in micro_batch]
        if not any(batch.events for batch in batches):
            return
        if self.converter is None:
            self.converter = concurrent.futures.ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="rxhubs-spark-convert"
            )
        self.ahead = (micro_batch, self.converter.submit(self.convert, batches))

    def run_job(self, job: Callable[[], Any]) -> Observable[Any]:
        if self.runner is None:
            executor = self.executor
            loop = _asyncio_loop(self.scheduler)
            if executor is not None and not isinstance(executor, concurrent.futures.Executor):
                self.runner = executor
            elif loop is None:
                self.runner = _inline
            else:
                if executor is None:
                    executor = self.own_executor = concurrent.futures.ThreadPoolExecutor(
                        max_workers=1, thread_name_prefix="rxhubs-spark-write"
                    )
                self.runner = _in_executor(loop, executor)
                self.threaded = True
        return self.runner(job)

    def written(self) -> None:
        micro_batch = self.writing
        if self.done or micro_batch is None:
            return
        self.writing = None
        self.write_subscription = None
        self.attempt = 0
        for batch, _ in micro_batch:
            left = self.waiting[batch.context] - 1
            if left:
                self.waiting[batch.context] = left
            else:
                del self.waiting[batch.context]
        # Hold the next write back while emitting and acknowledging: batches the acks let sources pull at once
        # still join the open micro-batch (a due one is sealed after them, a full one by count).
        nested, self.in_pump = self.in_pump, True
        try:
            for batch, _ in micro_batch:
                self.observer.on_next(batch)
        except Exception as exc:  # a downstream observer raised: end the stream with it
            for _, ack in micro_batch:
                ack()
            self.in_pump = nested
            self.fail(exc)
            return
        try:
            for _, ack in micro_batch:
                ack()
        finally:
            self.in_pump = nested
        self.pump()

    def failed(self, error: Exception) -> None:
        micro_batch = self.writing
        self.write_subscription = None
        if self.done or micro_batch is None:
            return
        final = isinstance(error, RxHubsError) and not error.retriable
        if self.attempt <= self.retries and not final:
            seconds = max(0.0, float(self.delay(self.attempt)))
            log.warning(
                "spark write of %d events failed (attempt %d of %d), retrying in %.2f s: %s: %s",
                _count(micro_batch),
                self.attempt,
                self.retries + 1,
                seconds,
                type(error).__name__,
                _first_line(error),
            )
            self.retry_timer = self.scheduler.schedule_relative(seconds, self.retry)
            return
        partitions = sorted({batch.partition_id for batch, _ in micro_batch}, key=_partition_order)
        sink_error = SinkError(
            f"spark write of a micro-batch of {_count(micro_batch)} events (partitions {', '.join(partitions)})"
            f" failed after {self.attempt} attempt(s): {type(error).__name__}: {_first_line(error)}"
        )
        sink_error.__cause__ = error
        self.fail(sink_error)

    def retry(self, _: abc.SchedulerBase, __: Any = None) -> None:
        self.retry_timer = None
        micro_batch = self.writing
        if self.done or micro_batch is None:
            return
        self.start(micro_batch)

    # -- ending --------------------------------------------------------------------------------------------
    def complete(self) -> None:
        self.stop()
        self.observer.on_completed()

    def fail(self, error: Exception) -> None:
        if self.done:
            return
        self.stop()
        self.observer.on_error(error)

    def dispose(self) -> None:
        if not self.done:
            self.stop()

    def stop(self) -> None:
        """Stop receiving, cancel timers, release every held batch (their sources are disposed first)."""
        self.done = True
        self.upstream.dispose()
        for disposable in (self.timer, self.retry_timer, self.write_subscription):
            if disposable is not None:
                disposable.dispose()
        self.timer = self.retry_timer = self.write_subscription = None
        held = [*(self.writing or ()), *(entry for micro_batch in self.queue for entry in micro_batch), *self.buffer]
        self.writing = None
        self.queue.clear()
        self.buffer = []
        for _, ack in held:
            ack()
        if self.ahead is not None:
            self.ahead[1].cancel()
            self.ahead = None
        for pool in (self.own_executor, self.converter):
            if pool is not None:
                pool.shutdown(wait=False)
        self.own_executor = self.converter = None


def _count(micro_batch: list[_Entry]) -> int:
    return sum(len(batch.events) for batch, _ in micro_batch)


def _partition_order(partition_id: str) -> tuple[int, str]:
    return (int(partition_id), "") if partition_id.isdigit() else (1 << 62, partition_id)


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else ""
