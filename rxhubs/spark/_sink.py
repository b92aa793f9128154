"""The Spark sink operator: micro-batches of event batches -> DataFrame -> ``writer(df)`` -> emit after the write.

How it works, per subscription:

- Each incoming batch is *held* (:meth:`~rxhubs.EventBatch.hold`) and appended to the open micro-batch.
  The micro-batch is *sealed* when it holds ``max_events`` events or more (count), or when ``max_interval``
  seconds passed since its first batch arrived and no write is running (time; if a write is running, the
  micro-batch keeps growing until it ends). Sealed micro-batches wait in a FIFO queue.
- One write runs at a time, in order: convert (Arrow -> DataFrame), ``transform``, ``writer``. Under an
  asyncio scheduler the whole job runs on a worker thread (one dedicated thread per subscription unless an
  ``executor`` is given) and its outcome comes back on the event loop, so every partition keeps receiving
  meanwhile, up to the sources' ``max_inflight`` bound; the next sealed micro-batch, if any, is converted
  on a second thread during the write. Under other schedulers (``TestScheduler``) the job runs inline as a
  scheduled action.
- After the write returned, the micro-batch's batches are emitted downstream in arrival order (so in order
  per partition), then acknowledged, which lets their sources pull more.
- A failed write is retried ``retries`` times with backoff (on the pipeline's scheduler), then the stream
  ends with :class:`~rxhubs.errors.SinkError` chained to the last failure. Nothing of the failed
  micro-batch, nor anything after it, is emitted, so a checkpoint placed after the sink never covers it.
- On completion of the source the open micro-batch is written, then the sink completes.
- An empty batch (heartbeat) of a partition that has nothing waiting in the sink passes straight through;
  otherwise it waits behind that partition's batches, to keep their order.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
import math
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, TypeAlias

import reactivex
from reactivex import Observable, abc
from reactivex.disposable import Disposable, SingleAssignmentDisposable

from rxhubs._batch import Ack, EventBatch
from rxhubs._models import PartitionContext
from rxhubs.errors import ConfigurationError, RxHubsError, SinkError

__all__ = ["write"]

log = logging.getLogger("rxhubs.spark")

#: Runs a blocking job and delivers its result as a one-shot Observable.
WriteRunner: TypeAlias = Callable[[Callable[[], Any]], Observable[Any]]

_Entry: TypeAlias = tuple[EventBatch, Ack]

_MAX_BACKOFF = 30.0


def write(
    writer: Callable[[Any], object],
    *,
    spark: Any = None,
    max_events: int = 10_000,
    max_interval: float = 1.0,
    transform: Callable[[Any], Any] | None = None,
    retries: int = 3,
    backoff: float | Callable[[int], float] = 1.0,
    convert: Callable[[Sequence[EventBatch]], Any] | None = None,
    executor: concurrent.futures.Executor | WriteRunner | None = None,
) -> Callable[[Observable[EventBatch]], Observable[EventBatch]]:
    """Write event batches through Spark in micro-batches; emit each batch only after its write returned.

    Batches from all partitions are gathered into a micro-batch until it holds ``max_events`` events or
    ``max_interval`` seconds passed since its first batch. The micro-batch becomes a DataFrame with
    :data:`~rxhubs.spark.SCHEMA` (through Arrow, :func:`~rxhubs.spark.to_dataframe`), ``transform(df)`` is
    applied if given, and ``writer(df)`` is called off the event loop. Once it returned, the batches are
    emitted, in order per partition, and acknowledged. Place :func:`rxhubs.operators.checkpoint` after this
    operator for at-least-once delivery: it only ever sees what the writer committed.

    Marble diagram (``max_events=4``, ``max_interval=3``; each letter a batch of 2 events; writes take no
    time here; ``X``, ``Y``, ``Z`` stand for several batches emitted at one instant)::

        source:  -a-b----c---d-e-f-|
        writes:  ---W-------W--W---W
        result:  ---X-------c--Y---Z
                 X = a, b (4 events: sealed by count)   c (alone: sealed 3 s after it arrived)
                 Y = d, e (count)                       Z = f, then completion (the source completed)

    The source's backpressure bounds what the sink can gather: at most partitions x ``max_inflight`` x
    ``max_batch_size`` events are held at once (16 x 300 per partition by default). Keep ``max_events``
    at or below that, or micro-batches are only ever sealed by time.

    Args:
        writer: Called with the DataFrame of each micro-batch, on a worker thread; any DataFrameWriter use
            (``df.write.mode("append").parquet(path)``, ``saveAsTable``, JDBC, ``foreachBatch``-style
            code). Its return value is ignored; it fails by raising.
        spark: The SparkSession to build DataFrames with (a cluster's or a Spark Connect one). Default:
            the session already running, else a local one (:func:`~rxhubs.spark.local_session`), created
            on the worker thread at the first write.
        max_events: Seal a micro-batch once it holds this many events or more.
        max_interval: Seal a micro-batch this many seconds after its first batch arrived (on the pipeline's
            scheduler clock; while a write runs, the next micro-batch keeps growing until it ends).
        transform: ``transform(df) -> df`` applied before the write (a projection, parsing the body ...).
            Batch-level transforms are plain Rx operators placed before this one (``ops.map``).
        retries: How many times a failed write (conversion, transform or writer) is retried.
        backoff: Seconds before the first retry, doubling each time (capped at 30 s); or a function of the
            retry number (from 1) giving the seconds, e.g. ``rxhubs.Backoff(...).delay``. Raising
            an :class:`~rxhubs.errors.RxHubsError` that is not ``retriable`` from the writer skips retries.
        convert: Replaces the conversion ``batches -> DataFrame``; the writer then receives what it returns.
            ``rxhubs.spark.to_arrow`` gives a ``pyarrow.Table`` (no Spark needed; tests use it), ``list``
            the batches themselves. Under asyncio it may run on a second thread while the previous
            micro-batch is written.
        executor: Where the blocking job runs under an asyncio scheduler: a
            ``concurrent.futures.Executor`` (default: one dedicated thread per subscription). Or a function
            ``job -> Observable`` that runs ``job()`` and emits its result once, subscribed on the
            pipeline's scheduler, under any scheduler (tests give writes a duration in virtual time with
            ``lambda job: reactivex.timer(2.0).pipe(ops.map(lambda _: job()))``). Under a scheduler that is
            not an asyncio one, an ``Executor`` is not used: the job runs inline as a scheduled action.

    Returns:
        An operator ``Observable[EventBatch] -> Observable[EventBatch]`` that errors with
        :class:`~rxhubs.errors.SinkError` when a write still fails after its retries.

    Raises:
        ConfigurationError: At call time, for invalid options.

    Example:
        >>> import rxhubs, rxhubs.spark
        >>> from rxhubs import operators as hops
        >>> pipeline = rxhubs.consume(hub, "$Default", store).pipe(  # doctest: +SKIP
        ...     rxhubs.spark.write(lambda df: df.write.mode("append").parquet("out/"), max_interval=5.0),
        ...     hops.checkpoint(store),
        ... )
        >>> rxhubs.run(pipeline)  # doctest: +SKIP
    """
    if not callable(writer):
        raise ConfigurationError(f"writer must be callable (df -> None), got {type(writer).__name__}")
    if isinstance(max_events, bool) or not isinstance(max_events, int) or max_events < 1:
        raise ConfigurationError(f"max_events must be an int >= 1, got {max_events!r}")
    if isinstance(max_interval, bool) or not isinstance(max_interval, int | float) or not 0 < max_interval < math.inf:
        raise ConfigurationError(f"max_interval must be a finite number of seconds > 0, got {max_interval!r}")
    if transform is not None and not callable(transform):
        raise ConfigurationError(f"transform must be callable (df -> df), got {type(transform).__name__}")
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise ConfigurationError(f"retries must be an int >= 0, got {retries!r}")
    delay: Callable[[int], float]
    if callable(backoff):
        delay = backoff
    elif isinstance(backoff, int | float) and not isinstance(backoff, bool) and 0 <= backoff < math.inf:
        first = float(backoff)
        delay = functools.partial(_doubling, first)
    else:
        raise ConfigurationError(f"backoff must be seconds >= 0 or a function of the attempt, got {backoff!r}")
    if convert is not None and not callable(convert):
        raise ConfigurationError(f"convert must be callable (batches -> data), got {type(convert).__name__}")
    if executor is not None and not isinstance(executor, concurrent.futures.Executor) and not callable(executor):
        raise ConfigurationError(
            f"executor must be a concurrent.futures.Executor or a function job -> Observable, got {executor!r}"
        )

    to_data = convert or functools.partial(_default_convert, spark)

    def operator(source: Observable[EventBatch]) -> Observable[EventBatch]:
        def subscribe(
            observer: abc.ObserverBase[EventBatch], scheduler: abc.SchedulerBase | None = None
        ) -> abc.DisposableBase:
            sink = _Sink(
                observer=observer,
                scheduler=scheduler or reactivex.scheduler.CurrentThreadScheduler.singleton(),
                convert=to_data,
                transform=transform,
                writer=writer,
                max_events=max_events,
                max_interval=float(max_interval),
                retries=retries,
                delay=delay,
                executor=executor,
            )
            sink.upstream.disposable = source.subscribe(
                sink.on_next, sink.on_error, sink.on_completed, scheduler=scheduler
            )
            return Disposable(sink.dispose)

        return reactivex.create(subscribe)

    return operator


def _doubling(first: float, attempt: int) -> float:
    return min(_MAX_BACKOFF, first * 2.0 ** (attempt - 1))


def _default_convert(spark: Any, batches: Sequence[EventBatch]) -> Any:
    from rxhubs.spark._arrow import to_dataframe
    from rxhubs.spark._session import get_or_create_session

    return to_dataframe(get_or_create_session(spark), batches)


def _asyncio_loop(scheduler: abc.SchedulerBase) -> asyncio.AbstractEventLoop | None:
    loop = getattr(scheduler, "_loop", None)
    return loop if isinstance(loop, asyncio.AbstractEventLoop) else None


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
