"""One subscription of :func:`rxhubs.partitions`: the loop's listener, and the owner of the partition streams.

The loop decides (claim, hand over, lose); the consumer turns each decision into what the user sees: a
:class:`~rxhubs.balancing.PartitionStream` emitted on a claim, a stream closed on a revoke or a loss, the
user's hooks called (``async`` ones awaited: a partition is read once ``on_partition_initialize`` returned and
released once ``on_partition_close`` returned), and, once a stream has finished and its checkpoints are
flushed, ``loop.ready`` so the partition is released.

Every failure reaches ``on_partition_error`` with an :class:`~rxhubs.ErrorContext` naming the operation: a
retried receive, a failed batch (``hops.process``), a checkpoint write, a balancing round. A failure that
stops a partition (:meth:`PartitionSession.fail`, a reader that gave up) ends only that partition's stream:
it is flushed, released and avoided for a backoff, then read again from its checkpoint.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from typing import Any

import reactivex
from reactivex import Observable, abc
from reactivex import operators as ops
from reactivex.subject import AsyncSubject

from rxhubs import _telemetry
from rxhubs._batch import EventBatch
from rxhubs._models import Checkpoint, CloseReason, ErrorContext, PartitionContext, Position
from rxhubs._rx import from_coroutine
from rxhubs._shutdown import current_shutdown
from rxhubs.balancing._geo_offsets import GeoOffsets
from rxhubs.balancing._handed_start import write_start
from rxhubs.balancing._looks import LINGER, look_gap
from rxhubs.balancing._loop import BalancingLoop, RevokeReason
from rxhubs.balancing._session import PartitionSession
from rxhubs.balancing._settings import ConsumerSettings, Hooks, pick
from rxhubs.balancing._start_check import seeded_start, watch_range
from rxhubs.balancing._stream import PartitionStream, drain_timeout
from rxhubs.errors import OwnershipLostError
from rxhubs.sources import partition_batches
from rxhubs.stores import CheckpointStore
from rxhubs.stores._contract import takes_hands
from rxhubs.transport import Hub

__all__ = ["Consumer"]

log = logging.getLogger("rxhubs.balancing")


def _await_hook(result: Any) -> Observable[Any]:
    """A one-shot Observable that completes once a hook's result (a coroutine, or nothing) is done."""
    if not inspect.isawaitable(result):
        return reactivex.empty()

    async def wait() -> None:
        await result

    return from_coroutine(wait)


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
        #: The checkpoints that partitions handed to this consumer started from, until their streams end.
        self.handed_starts: dict[str, Checkpoint] = {}
        self.disposed = False
        self.completed = False
        self.unwatch: abc.DisposableBase | None = None
        self.untrack: Callable[[], None] | None = None
        self.geo_offsets = GeoOffsets(hub, store, scheduler)
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
            self.untrack = shutdown.track()  # rxhubs.run waits for the releases before it returns
        self.loop.start()

    def dispose(self) -> None:
        if self.disposed:
            return
        self.disposed = True
        if self.unwatch is not None:
            self.unwatch.dispose()
        self.loop.dispose()

    # -- hooks ---------------------------------------------------------------------------------------------
    def _call_hook(
        self,
        operation: str,
        context: PartitionContext,
        hook: Callable[..., Any] | None,
        *args: Any,
        on_failure: Callable[[Exception], None] | None = None,
    ) -> Observable[Any]:
        """Call a user hook; the Observable completes once it is done (``async`` hooks are awaited).

        A hook's error is reported to ``on_partition_error`` (unless it is that hook), then ``on_failure``.
        """
        if hook is None:
            return reactivex.empty()

        def failed(error: Exception) -> Observable[Any]:
            log.warning("%s hook raised %r", operation, error)
            if on_failure is not None:
                on_failure(error)
            elif hook is not self.hooks.on_partition_error:
                self.report(context, operation, error)
            return reactivex.empty()

        try:
            result = hook(*args)
        except Exception as exc:
            return failed(exc)
        return _await_hook(result).pipe(ops.catch(lambda error, _: failed(error)))

    def report(self, context: PartitionContext, operation: str, error: Exception) -> None:
        """Call ``on_partition_error`` with an :class:`~rxhubs.ErrorContext` naming ``operation``."""
        c = context
        where = ErrorContext(c.fully_qualified_namespace, c.eventhub_name, c.consumer_group, c.partition_id, operation)
        _telemetry.hooks.error(c, operation, error)
        self._call_hook("error", where, self.hooks.on_partition_error, where, error).subscribe(scheduler=self.scheduler)

    def _group_context(self) -> PartitionContext:
        return PartitionContext(self.hub.fully_qualified_namespace, self.hub.eventhub_name, self.consumer_group, "")

    # -- LoopListener --------------------------------------------------------------------------------------
    def on_acquired(self, session: PartitionSession, checkpoint: Checkpoint | None) -> None:
        pid = session.partition_id
        context = session.context
        start = self._start_for(pid, checkpoint)
        self.geo_offsets.claimed(session, checkpoint)  # a checkpoint a geo promotion made stale is rewritten
        reading = self.settings.reading
        session.bind(self._session_report, self._session_fail, self._session_lost)

        def read_from(start: Position) -> Observable[EventBatch]:
            return partition_batches(
                self.hub,
                pid,
                consumer_group=self.consumer_group,
                start=start,
                owner_level=reading.owner_level,
                prefetch=reading.prefetch,
                max_batch_size=reading.max_batch_size,
                max_wait=reading.max_wait,
                min_batch_size=reading.min_batch_size,
                max_inflight=reading.max_inflight,
                emit_empty=reading.emit_empty,
                track_last_enqueued_event_properties=reading.track_last_enqueued_event_properties,
                scheduler=self.scheduler,
                on_retry=lambda error: self.report(context, "receive", error),
            ).pipe(ops.do_action(self.geo_offsets.seen))

        settings, store, check = self.settings, self.loop.store, None
        batches = read_from(start)
        if checkpoint is None and settings.seed_checkpoint and pick(settings.start_positions, pid) is None:
            batches = seeded_start(self.hub, store, session, start).pipe(ops.flat_map(read_from))
        elif (checkpoint is not None and start == checkpoint.position() and settings.checkpoint_out_of_range
              and not session.handed):  # a handed partition's checkpoint is where its former owner stopped reading
            check = watch_range(self.hub, store, session, checkpoint, settings.checkpoint_out_of_range,
                                self._session_fail, self.geo_offsets.observed)
        initialized: AsyncSubject[None] = AsyncSubject()
        source: Observable[EventBatch] = batches
        if self.hooks.on_partition_initialize is not None:  # read once the hook returned
            source = initialized.pipe(ops.flat_map(lambda _: batches))
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
        if session.handed and checkpoint is not None and start == checkpoint.position():
            self.handed_starts[pid] = checkpoint  # written if given up before a batch (_handed_start)
        log.info("partition %s claimed by %s, reading from %r", pid, self.loop.owner_id, start)

        def ready(*_: Any) -> None:
            initialized.on_next(None)
            initialized.on_completed()

        def not_initialized(error: Exception) -> None:  # the partition is not read: it is released
            session.fail("initialize", error)

        self._call_hook(
            "initialize", context, self.hooks.on_partition_initialize, context, on_failure=not_initialized
        ).subscribe(on_completed=ready, scheduler=self.scheduler)
        if not self.disposed:
            self.observer.on_next(stream)
        if check is not None:  # beside the first reads (_start_check)
            check.subscribe(on_error=lambda e: log.debug("partition %s: range check failed: %r", pid, e),
                            scheduler=self.scheduler)

    def on_revoke(self, session: PartitionSession, reason: RevokeReason) -> None:
        stream = self.streams.get(session.partition_id)
        if stream is None or stream.session is not session:
            self.loop.ready(session.partition_id)
            return
        if reason == "handover":  # an idle partition is read until its next batch, for at most LINGER seconds
            linger = min(LINGER, look_gap(self.settings.balancing.load_balancing_interval))
            stream._close(CloseReason.OWNERSHIP_LOST, linger=linger)
        else:
            stream._close(CloseReason.SHUTDOWN, silent=reason == "dispose")

    def on_lost(self, session: PartitionSession) -> None:
        stream = self.streams.get(session.partition_id)
        if stream is None or stream.session is not session:
            return
        stream._close(CloseReason.OWNERSHIP_LOST, silent=self.disposed)

    def on_released(self, session: PartitionSession) -> None:
        stream = self.streams.get(session.partition_id)
        if stream is not None and stream.session is session:
            del self.streams[session.partition_id]

    def on_unreadable(self, session: PartitionSession, operation: str, error: Exception) -> None:
        self.report(session.context, operation, error)

    def on_awaiting(self, count: int) -> None:
        # a hub that can open its links' sessions ahead (rxhubs.EventHub: rxhubs/transport/_warm.py) does so now,
        # for two intervals: the owner hands over at its next round
        warm = getattr(self.hub, "_warm", None)
        if warm is not None:
            warm.prepare(self.consumer_group, count, ttl=2 * self.settings.balancing.load_balancing_interval)

    def on_error(self, operation: str, error: Exception) -> None:
        self.report(self._group_context(), operation, error)

    def on_stopped(self, error: Exception | None) -> None:
        if self.unwatch is not None:
            self.unwatch.dispose()
        if self.untrack is not None:
            self.untrack()
        if not self.disposed and not self.completed:
            self.completed = True
            if error is not None:
                self.observer.on_error(error)
            else:
                self.observer.on_completed()

    # -- errors of one partition ---------------------------------------------------------------------------
    def _session_report(self, session: PartitionSession, operation: str, error: Exception) -> None:
        self.report(session.context, operation, error)

    def _session_fail(self, session: PartitionSession, operation: str, error: Exception) -> None:
        """Stop one partition: report, end its stream (then flush, release, avoid for a while)."""
        self.report(session.context, operation, error)
        stream = self.streams.get(session.partition_id)
        if stream is None or stream.session is not session:
            return
        stream.error = stream.error or error
        stream._close(CloseReason.OWNERSHIP_LOST)

    def _session_lost(self, session: PartitionSession, operation: str, error: Exception) -> None:
        """A fenced store refused a write: report it once; the loop gives the partition up (nothing released)."""
        self.report(session.context, operation, error)
        self.loop.fenced(session)

    def _reader_error(self, stream: PartitionStream, error: Exception) -> None:
        if isinstance(error, OwnershipLostError):
            log.info("partition %s: reader cut off by another reader (%s)", stream.partition_id, error)
            self.loop.abandon(stream.partition_id)
            return
        log.warning("partition %s: reader failed: %r", stream.partition_id, error)
        self.report(stream.context, "receive", error)

    def _stream_finished(self, stream: PartitionStream) -> None:
        pid = stream.partition_id
        session = stream.session
        failed = stream.error is not None or stream.user_disposed

        handed_start = self.handed_starts.pop(pid, None)

        def release(*_: Any) -> None:
            if not session.owned:
                if self.streams.get(pid) is stream:
                    del self.streams[pid]
                return
            # a handover through a store whose hand carries the position: released once the last write is sent
            early = bool(session.release_to) and takes_hands(self.loop.store)
            flushed = session.flush(early=early)
            if handed_start is not None and not stream.batches:  # handed, given up unread: its start written first
                flushed = write_start(self.loop.store, session, handed_start).pipe(ops.concat(flushed))
            flushed.subscribe(
                on_completed=lambda: self.loop.ready(pid, failed=failed),
                on_error=lambda _: self.loop.ready(pid, failed=failed),
                scheduler=self.scheduler,
            )

        self._call_hook(
            "close", stream.context, self.hooks.on_partition_close, stream.context, stream.close_reason
        ).subscribe(on_completed=release, scheduler=self.scheduler)

    def _start_for(self, partition_id: str, checkpoint: Checkpoint | None) -> Position:
        explicit = pick(self.settings.start_positions, partition_id)
        if explicit is not None:
            baseline = self.loop.baseline_checkpoints or {}
            if checkpoint is None or baseline.get(partition_id) == checkpoint:
                return explicit
        if checkpoint is not None:
            return checkpoint.position()
        return pick(self.settings.default_positions, partition_id) or Position.earliest()
