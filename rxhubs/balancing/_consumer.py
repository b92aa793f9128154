"""One subscription of :func:`rxhubs.partitions`: the loop's listener, and the owner of the partition streams.

The loop decides (claim, hand over, lose); the consumer turns each decision into what the user sees: a
:class:`~rxhubs.balancing.PartitionStream` emitted on a claim, a stream closed on a revoke or a loss, the
user's hooks called, and, once a stream has finished and its checkpoints are flushed, ``loop.ready`` so the
partition is released.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from typing import Any

from reactivex import abc

from rxhubs._models import Checkpoint, CloseReason, Position
from rxhubs._rx import from_coroutine
from rxhubs._shutdown import current_shutdown
from rxhubs.balancing._loop import BalancingLoop, RevokeReason
from rxhubs.balancing._session import PartitionSession
from rxhubs.balancing._settings import ConsumerSettings, Hooks, pick
from rxhubs.balancing._stream import PartitionStream, drain_timeout
from rxhubs.errors import OwnershipLostError
from rxhubs.sources import partition_batches
from rxhubs.stores import CheckpointStore
from rxhubs.transport import Hub

__all__ = ["Consumer"]

log = logging.getLogger("rxhubs.balancing")


class Consumer:
    """Runs a :class:`BalancingLoop` and keeps one :class:`PartitionStream` per partition it reads."""

    def __init__(
        self,
        observer: abc.ObserverBase[PartitionStream],
        scheduler: abc.SchedulerBase,
        hub: Hub,
        consumer_group: str,
        store: CheckpointStore,
        settings: ConsumerSettings,
        hooks: Hooks,
    ) -> None:
        self.observer = observer
        self.scheduler = scheduler
        self.hub = hub
        self.consumer_group = consumer_group
        self.settings = settings
        self.hooks = hooks
        self.streams: dict[str, PartitionStream] = {}
        self.disposed = False
        self.completed = False
        self.unwatch: abc.DisposableBase | None = None
        self.loop = BalancingLoop(
            store,
            namespace=hub.fully_qualified_namespace,
            eventhub_name=hub.eventhub_name,
            consumer_group=consumer_group,
            partition_ids=hub.get_partition_ids,
            owner_id=settings.owner_id,
            settings=settings.balancing,
            scheduler=scheduler,
            listener=self,
            baseline=settings.start is not None,
        )

    def start(self) -> None:
        shutdown = current_shutdown()
        if shutdown is not None:
            self.unwatch = shutdown.watch(lambda: self.loop.stop("shutdown"))
        self.loop.start()

    def dispose(self) -> None:
        if self.disposed:
            return
        self.disposed = True
        if self.unwatch is not None:
            self.unwatch.dispose()
        self.loop.dispose()

    # -- hooks ---------------------------------------------------------------------------------------------
    def _hook(self, name: str, hook: Callable[..., Any] | None, *args: Any) -> None:
        """Call a user hook; an ``async def`` hook is awaited on the pipeline's scheduler. Errors are logged."""
        if hook is None:
            return
        try:
            result = hook(*args)
        except Exception as exc:
            log.warning("%s raised %r (ignored)", name, exc)
            return
        if inspect.isawaitable(result):

            async def wait() -> None:
                await result

            from_coroutine(wait).subscribe(
                on_error=lambda exc: log.warning("%s raised %r (ignored)", name, exc), scheduler=self.scheduler
            )

    # -- LoopListener --------------------------------------------------------------------------------------
    def on_acquired(self, session: PartitionSession, checkpoint: Checkpoint | None) -> None:
        pid = session.partition_id
        context = session.context
        start = self._start_for(pid, checkpoint)
        reading = self.settings.reading
        source = partition_batches(
            self.hub,
            pid,
            consumer_group=self.consumer_group,
            start=start,
            owner_level=reading.owner_level,
            prefetch=reading.prefetch,
            max_batch_size=reading.max_batch_size,
            max_wait=reading.max_wait,
            max_inflight=reading.max_inflight,
            scheduler=self.scheduler,
        )
        stream = PartitionStream(
            context,
            start=start,
            source=source,
            session=session,
            scheduler=self.scheduler,
            drain_timeout=drain_timeout(self.settings.balancing.ownership_expiration),
            on_finished=self._stream_finished,
            on_reader_error=self._reader_error,
        )
        self.streams[pid] = stream
        log.info("partition %s claimed by %s, reading from %r", pid, self.loop.owner_id, start)
        self._hook("on_partition_initialize", self.hooks.on_partition_initialize, context)
        if not self.disposed:
            self.observer.on_next(stream)

    def on_revoke(self, session: PartitionSession, reason: RevokeReason) -> None:
        stream = self.streams.get(session.partition_id)
        if stream is None or stream.session is not session:
            self.loop.ready(session.partition_id)
            return
        close = CloseReason.OWNERSHIP_LOST if reason == "handover" else CloseReason.SHUTDOWN
        stream._close(close, silent=reason == "dispose")

    def on_lost(self, session: PartitionSession) -> None:
        stream = self.streams.get(session.partition_id)
        if stream is None or stream.session is not session:
            return
        stream._close(CloseReason.OWNERSHIP_LOST, silent=self.disposed)

    def on_released(self, session: PartitionSession) -> None:
        stream = self.streams.get(session.partition_id)
        if stream is not None and stream.session is session:
            del self.streams[session.partition_id]

    def on_stopped(self, error: Exception | None) -> None:
        if self.unwatch is not None:
            self.unwatch.dispose()
        if not self.disposed and not self.completed:
            self.completed = True
            if error is not None:
                self.observer.on_error(error)
            else:
                self.observer.on_completed()

    # -- streams -------------------------------------------------------------------------------------------
    def _reader_error(self, stream: PartitionStream, error: Exception) -> None:
        if isinstance(error, OwnershipLostError):
            log.info("partition %s: reader cut off by another reader (%s)", stream.partition_id, error)
            self.loop.abandon(stream.partition_id)
            return
        log.warning("partition %s: reader failed: %r", stream.partition_id, error)
        self._hook("on_partition_error", self.hooks.on_partition_error, stream.context, error)

    def _stream_finished(self, stream: PartitionStream) -> None:
        pid = stream.partition_id
        self._hook("on_partition_close", self.hooks.on_partition_close, stream.context, stream.close_reason)
        session = stream.session
        if not session.owned:
            if self.streams.get(pid) is stream:
                del self.streams[pid]
            return
        failed = stream.error is not None or stream.user_disposed

        def release(*_: Any) -> None:
            self.loop.ready(pid, failed=failed)

        session.flush().subscribe(on_completed=release, on_error=release, scheduler=self.scheduler)

    def _start_for(self, partition_id: str, checkpoint: Checkpoint | None) -> Position:
        explicit = pick(self.settings.start, partition_id)
        if explicit is not None:
            baseline = self.loop.baseline_checkpoints or {}
            if checkpoint is None or baseline.get(partition_id) == checkpoint:
                return explicit
        if checkpoint is not None:
            return checkpoint.position()
        return pick(self.settings.default_start, partition_id) or Position.earliest()

