"""``EventProcessor``: the seeds' processor form (start / stop / is_running, per-partition callbacks).

It is :func:`rxhubs.consume` with an isolated pipeline per partition, run by :func:`rxhubs.arun`:
``process(process_events, concurrency=1)`` then a checkpoint of what the processor marked with
``update_checkpoint``. Balancing, handover, failure isolation and the graceful stop are the library's own.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable
from typing import Any, Unpack

from reactivex import Observable

from rxhubs._batch import EventBatch
from rxhubs._models import CloseReason, ErrorContext, Event, PartitionContext
from rxhubs._retry import Backoff
from rxhubs._run import arun
from rxhubs._shutdown import Shutdown
from rxhubs.balancing import ConsumerOptions, consume
from rxhubs.errors import ConfigurationError
from rxhubs.operators._checkpoint import checkpoint_with
from rxhubs.operators._process import PoisonHandler, process
from rxhubs.processor._partition_processor import PartitionProcessor
from rxhubs.stores import StoreLike, as_checkpoint_store
from rxhubs.transport import Hub

__all__ = ["EventProcessor"]

log = logging.getLogger("rxhubs.processor")

ProcessorFactory = Callable[[], PartitionProcessor]
GroupErrorHandler = Callable[[ErrorContext, Exception], Any]

_HOOKS = ("on_partition_initialize", "on_partition_close", "on_partition_error")


async def _call(result: Any) -> None:
    if inspect.isawaitable(result):
        await result


class EventProcessor:
    """Consume a hub the way the Azure SDKs' event processors do: a :class:`PartitionProcessor` per partition.

    Processors of one consumer group (in one process or many) share the hub's partitions through ``store``,
    exactly as :func:`rxhubs.consume` does (the same options apply). For each partition this processor owns,
    ``processor_factory()`` makes a :class:`PartitionProcessor`; its ``initialize``, ``process_events``
    (one batch in flight per partition, in order), ``process_error`` and ``close`` are called, sync or async.

    Args:
        hub: The hub (``rxhubs.EventHub`` or ``rxhubs.testing.InMemoryEventHub``).
        consumer_group: The consumer group.
        processor_factory: A :class:`PartitionProcessor` subclass, or a callable returning a new one.
        store: The checkpoint store shared by the processors of the group.
        checkpoint_interval: Most one checkpoint write per partition per this many seconds.
        retry: How often to retry a failed ``process_events`` before the batch counts as poison.
        on_poison: Called with a poison batch and its error (a dead-letter sink); then the partition moves on.
            Without it a poison batch stops the partition, which is read again from its checkpoint later.
        on_error: Called with errors that concern the group rather than one partition (a balancing round).
        grace: Seconds :meth:`stop` waits for batches in flight and releases.
        **options: The options of :func:`rxhubs.consume` (``owner_id``, ``load_balancing_interval``,
            ``default_start``, ``max_batch_size``, ``max_wait``, ``prefetch``, ...). ``max_inflight`` defaults
            to 2 (one batch processed, the next one read).

    Raises:
        ConfigurationError: At construction, for invalid options.

    Example:
        >>> import asyncio, rxhubs
        >>> class Counter(rxhubs.PartitionProcessor):
        ...     seen = 0
        ...     async def process_events(self, events, context):
        ...         Counter.seen += len(events)
        ...         await self.update_checkpoint(events[-1])
        >>> hub = rxhubs.testing.InMemoryEventHub(partition_count=2)
        >>> _ = hub.send([b"a", b"b", b"c"])
        >>> async def main():
        ...     async with rxhubs.EventProcessor(hub, "$Default", Counter, rxhubs.stores.InMemoryCheckpointStore(),
        ...                                      load_balancing_interval=0.1, ownership_expiration=0.5):
        ...         await asyncio.sleep(0.3)
        ...     return Counter.seen
        >>> asyncio.run(main())
        3
    """

    def __init__(
        self,
        hub: Hub,
        consumer_group: str,
        processor_factory: ProcessorFactory | type[PartitionProcessor],
        store: StoreLike,
        *,
        checkpoint_interval: float = 5.0,
        retry: Backoff | None = None,
        on_poison: PoisonHandler | None = None,
        on_error: GroupErrorHandler | None = None,
        grace: float = 30.0,
        **options: Unpack[ConsumerOptions],
    ) -> None:
        if not callable(processor_factory):
            raise ConfigurationError("processor_factory must be a PartitionProcessor subclass or a callable")
        taken = [name for name in (*_HOOKS, "scheduler") if name in options]
        if taken:
            raise ConfigurationError(
                f"EventProcessor calls the PartitionProcessor's methods instead of {', '.join(taken)}"
            )
        options.setdefault("max_inflight", 2)
        self._factory = processor_factory
        self._store = as_checkpoint_store(store)
        self._on_error = on_error
        self._grace = grace
        self._processors: dict[str, PartitionProcessor] = {}
        self._stop: Shutdown | None = None
        self._task: asyncio.Task[int] | None = None
        self._process = process(self._process_batch, concurrency=1, retry=retry, on_poison=on_poison)
        self._checkpoint = checkpoint_with(self._store, max_interval=checkpoint_interval, position=self._marked)
        options["on_partition_initialize"] = self._initialize
        options["on_partition_close"] = self._close
        options["on_partition_error"] = self._error
        # validates every option now
        self._pipeline = consume(hub, consumer_group, self._store, pipeline=self._partition_pipeline, **options)

    # -- lifecycle -----------------------------------------------------------------------------------------
    @property
    def is_running(self) -> bool:
        """True between :meth:`start` and the end of :meth:`stop` (or a fatal error)."""
        return self._task is not None and not self._task.done()

    async def start(self) -> None:
        """Start claiming partitions and processing them, in the background; returns at once.

        Raises:
            ConfigurationError: If it is already running.
        """
        if self.is_running:
            raise ConfigurationError("this EventProcessor is already running")
        self._stop = Shutdown()
        self._task = asyncio.create_task(arun(self._pipeline, shutdown=self._stop, grace=self._grace, signals=()))
        self._task.add_done_callback(self._ended)

    async def stop(self) -> None:
        """Stop gracefully: finish the batches in flight, close the processors, flush checkpoints, release.

        Raises:
            Whatever error ended the processor earlier (an unknown hub, refused credentials).
        """
        task, stop = self._task, self._stop
        if task is None or stop is None:
            return
        stop.request()
        try:
            await asyncio.shield(task)
        finally:
            self._task = None

    async def __aenter__(self) -> EventProcessor:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    def _ended(self, task: asyncio.Task[int]) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.error("event processor stopped: %r", task.exception())

    # -- the partition callbacks ---------------------------------------------------------------------------
    async def _initialize(self, context: PartitionContext) -> None:
        factory = self._factory
        processor = factory()
        if not isinstance(processor, PartitionProcessor):
            raise ConfigurationError(f"processor_factory returned {type(processor).__name__}, not a PartitionProcessor")
        self._processors[context.partition_id] = processor
        await _call(processor.initialize(context))

    def _partition_pipeline(self, stream: Observable[EventBatch]) -> Observable[EventBatch]:
        return stream.pipe(self._process, self._checkpoint)

    async def _process_batch(self, batch: EventBatch) -> None:
        processor = self._processors.get(batch.partition_id)
        if processor is not None:
            await _call(processor.process_events(batch, batch.context))

    def _marked(self, batch: EventBatch) -> Event | None:
        processor = self._processors.get(batch.partition_id)
        return processor._marked if processor is not None else None

    async def _error(self, context: ErrorContext, error: Exception) -> None:
        processor = self._processors.get(context.partition_id) if context.partition_id else None
        if processor is not None:
            await _call(processor.process_error(error, context))
        elif self._on_error is not None:
            await _call(self._on_error(context, error))
        else:
            log.warning("%s failed: %r", context.operation, error)

    async def _close(self, context: PartitionContext, reason: CloseReason) -> None:
        processor = self._processors.pop(context.partition_id, None)
        if processor is not None:
            await _call(processor.close(reason, context))

