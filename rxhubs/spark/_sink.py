"""The Spark sink operator: micro-batches of event batches -> DataFrame -> ``writer(df)`` -> emit after the write.

How it works, per subscription:

- Each incoming batch is *held* (:meth:`~rxhubs.EventBatch.hold`) and appended to the open micro-batch.
  The micro-batch is *sealed* when it holds ``max_events`` events or more (count), or when ``max_interval``
  seconds passed since its first batch arrived and no write is running (time; if a write is running, the
  micro-batch keeps growing until it ends). Sealed micro-batches wait in a FIFO queue.
- One write runs at a time, in order: convert (Arrow -> DataFrame, whose Arrow batches Spark decodes in the
  write's tasks), ``transform``, ``writer``. Under an asyncio scheduler the whole job runs on a worker
  thread (one dedicated thread per subscription unless an ``executor`` is given) and its outcome comes back
  on the event loop, so every partition keeps receiving meanwhile, up to the sources' ``max_inflight``
  bound; the next sealed micro-batch, if any, is converted on a second thread during the write. Under other
  schedulers (``TestScheduler``) the job runs inline as a scheduled action.
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

import concurrent.futures
import functools
import logging
import math
from collections.abc import Callable, Sequence
from typing import Any

import reactivex
from reactivex import Observable, abc
from reactivex.disposable import Disposable

from rxhubs._batch import EventBatch
from rxhubs.errors import ConfigurationError
from rxhubs.spark._micro_batch import WriteRunner, _Sink

__all__ = ["write"]

log = logging.getLogger("rxhubs.spark")

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

    The DataFrame is built with ``to_dataframe(spark, batches, local=False)``: Spark decodes its Arrow batches
    into rows in the tasks of the job that reads it (one task per batch of at most
    ``spark.sql.execution.arrow.maxRecordsPerBatch`` rows, so one file each for a file writer), not in the
    driver beforehand. A ``transform`` or ``writer`` that reads the DataFrame twice gets the same rows twice
    and decodes twice (``df.persist()`` it, or pass ``convert=functools.partial(to_dataframe, spark)`` for
    Spark's local relation); a retry converts the micro-batch anew.

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
        convert: Replaces the conversion ``batches -> DataFrame`` (default:
            ``to_dataframe(spark, batches, local=False)``); the writer then receives what it returns.
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

    return to_dataframe(get_or_create_session(spark), batches, local=False)
