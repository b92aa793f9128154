"""A partition stream: the batches of one partition for as long as this consumer owns it.

:func:`rxhubs.partitions` emits one :class:`PartitionStream` per partition gained. Subscribing starts
:func:`rxhubs.partition_batches` with an exclusive receiver; every batch it passes on carries the partition's
:class:`~rxhubs.balancing._session.PartitionSession` and a lease of its own, so the stream knows how many
batches are still in flight when the loop revokes the partition: it stops reading, lets them finish, then
completes (the handover in ``_session``'s diagram: READING -> DRAINING -> READY).

A partition handed over while **idle** (no batch in flight) is read until its next batch, for at most a short
*linger* (:data:`~rxhubs.balancing._looks.LINGER`, passed to :meth:`PartitionStream._close`): events that
arrive meanwhile are served at once by the old owner instead of waiting out the handover, and the stream stops
right after a batch, when the next one is furthest away. In virtual time (``^``: the revoke; ``l``: the
linger's end)::

    batches   ---a---------b----c--
    revoke    -------^-------------
    stream    ---a---------(b|)----     b arrived within the linger: read, then stop
    revoke    ---^-----------------
    stream    ---a---l|------------     nothing within the linger: stop at its end
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from reactivex import Observable, abc
from reactivex.disposable import Disposable

from rxhubs._batch import EventBatch, _Lease
from rxhubs._models import CloseReason, LastEnqueuedEventProperties, PartitionContext, Position
from rxhubs.balancing._session import PartitionSession
from rxhubs.errors import ConfigurationError, OwnershipLostError

__all__ = ["PartitionStream", "drain_timeout"]

log = logging.getLogger("rxhubs.balancing")


class PartitionStream(Observable[EventBatch]):
    """The batches of one partition for as long as this consumer owns it, like RxPY's ``GroupedObservable``.

    :func:`partitions` emits one per partition gained. Subscribing opens an exclusive receiver (owner level)
    at :attr:`start`; the stream completes, never errors, when the partition is handed over, lost, or
    released on shutdown, after the batches still in flight were acknowledged; :attr:`close_reason` then
    says why, and :attr:`error` holds the reader's error if one ended it. Batches carry the partition's
    ownership session, so :func:`rxhubs.operators.checkpoint` writes nothing once it is lost.

    A partition stream is unicast: subscribe once (use ``share()`` to fan out). Disposing its subscription
    stops reading and releases the partition, which this consumer then leaves to others for a while.

    Attributes:
        context: The partition.
        start: Where reading starts (after the stored checkpoint, or the configured start).

    Example:
        >>> import rxhubs
        >>> from reactivex import operators as ops
        >>> from reactivex.testing import TestScheduler
        >>> hub = rxhubs.testing.InMemoryEventHub(partition_count=2)
        >>> store = rxhubs.stores.InMemoryCheckpointStore()
        >>> seen, scheduler = [], TestScheduler()
        >>> _ = rxhubs.partitions(hub, "$Default", store, owner_id="a").subscribe(seen.append, scheduler=scheduler)
        >>> scheduler.advance_by(1.0)
        >>> [(stream.partition_id, stream.start.kind, stream.close_reason) for stream in seen]
        [('0', 'earliest', None), ('1', 'earliest', None)]
    """

    def __init__(
        self,
        context: PartitionContext,
        *,
        start: Position,
        source: Observable[EventBatch],
        session: PartitionSession,
        scheduler: abc.SchedulerBase,
        drain_timeout: float,
        on_finished: Callable[[PartitionStream], None],
        on_reader_error: Callable[[PartitionStream, Exception], None],
    ) -> None:
        super().__init__()
        self.context = context
        self.start = start
        self._source = source
        self._session = session
        self._scheduler = scheduler
        self._drain_timeout = drain_timeout
        self._on_finished = on_finished
        self._on_reader_error = on_reader_error
        self._observer: abc.ObserverBase[EventBatch] | None = None
        self._pump: abc.DisposableBase | None = None
        self._drain_timer: abc.DisposableBase | None = None
        self._linger: tuple[CloseReason, abc.DisposableBase] | None = None
        self._inflight = 0
        self._closing: CloseReason | None = None
        self._silent = False
        self._finished = False
        self.close_reason: CloseReason | None = None
        self.error: Exception | None = None
        self.cut_off = False
        self.user_disposed = False
        self.last_enqueued: LastEnqueuedEventProperties | None = None
        #: Batches with events passed on so far.
        self.batches = 0

    # -- public --------------------------------------------------------------------------------------------
    @property
    def partition_id(self) -> str:
        """The partition id."""
        return self.context.partition_id

    @property
    def key(self) -> str:
        """The partition id (the name ``GroupedObservable`` uses)."""
        return self.context.partition_id

    @property
    def completed(self) -> bool:
        """True once the stream has ended (see :attr:`close_reason`)."""
        return self._finished

    @property
    def session(self) -> PartitionSession:
        """The ownership session the stream's batches carry (private protocol with the checkpoint operator)."""
        return self._session

    def __repr__(self) -> str:
        return (
            f"PartitionStream(partition_id={self.partition_id!r}, start={self.start!r}, "
            f"close_reason={self.close_reason})"
        )

    # -- subscription --------------------------------------------------------------------------------------
    def _subscribe_core(
        self, observer: abc.ObserverBase[EventBatch], scheduler: abc.SchedulerBase | None = None
    ) -> abc.DisposableBase:
        if self._finished:
            observer.on_completed()
            return Disposable()
        if self._observer is not None:
            observer.on_error(
                ConfigurationError(f"partition stream {self.partition_id} is already subscribed: use share()")
            )
            return Disposable()
        self._observer = observer
        if self._closing is not None:
            self._finish()
            return Disposable()
        pump = self._source.subscribe(self._on_next, self._on_error, self._on_completed, scheduler=self._scheduler)
        if self._finished:
            pump.dispose()
        else:
            self._pump = pump
        return Disposable(self._on_dispose)

    def _on_next(self, batch: EventBatch) -> None:
        observer = self._observer
        if self._finished or observer is None:
            return
        ack = batch.hold()

        def free() -> None:
            ack()
            self._inflight -= 1
            if self._closing is not None and self._inflight == 0:
                self._finish()

        lease = _Lease(free)
        wrapped = EventBatch(batch.context, batch.events, batch.last_enqueued, lease, self._session, batch._origin)
        if batch.last_enqueued is not None:
            self.last_enqueued = batch.last_enqueued
        self.batches += 1 if batch.events else 0
        self._inflight += 1
        lease.hold()
        try:
            observer.on_next(wrapped)
        finally:
            lease.release()
            if self._linger is not None:  # revoked while idle: this was the batch it waited for
                self._close(self._linger[0])

    def _on_error(self, error: Exception) -> None:
        self._pump = None
        if isinstance(error, OwnershipLostError):
            self.cut_off = True
            self._session.lose()
        else:
            self.error = error
        self._on_reader_error(self, error)
        self._close(CloseReason.OWNERSHIP_LOST)

    def _on_completed(self) -> None:
        self._pump = None
        self._close(CloseReason.SHUTDOWN)

    def _on_dispose(self) -> None:
        if self._finished:
            return
        self.user_disposed = True
        self._close(CloseReason.SHUTDOWN, silent=True)

    # -- closing -------------------------------------------------------------------------------------------
    def _close(self, reason: CloseReason, *, silent: bool = False, linger: float = 0.0) -> None:
        """Stop reading; complete once the batches in flight are acknowledged (at once when ``silent``).

        With ``linger`` (a handover) and nothing in flight, read on until the next batch has gone downstream,
        for at most ``linger`` seconds, then stop as above.
        """
        if self._finished:
            return
        if self._linger is not None:
            _, timer = self._linger
            self._linger = None
            timer.dispose()
        elif linger > 0 and not silent and self._closing is None and self._inflight == 0 and self._pump is not None:

            def lingered(*_: Any) -> None:
                if self._linger is not None:
                    self._close(reason)

            self._linger = (reason, self._scheduler.schedule_relative(linger, lingered))
            return
        if self._closing is None:
            self._closing = reason
        self._silent = self._silent or silent
        pump, self._pump = self._pump, None
        if pump is not None:
            pump.dispose()
        if silent or self._inflight == 0 or self._observer is None:
            self._finish()
        elif self._drain_timer is None:

            def timed_out(*_: Any) -> None:
                log.warning(
                    "partition %s: %d batches still in flight %.1f s after it was revoked; closing anyway",
                    self.partition_id,
                    self._inflight,
                    self._drain_timeout,
                )
                self._finish()

            self._drain_timer = self._scheduler.schedule_relative(self._drain_timeout, timed_out)

    def _finish(self) -> None:
        if self._finished:
            return
        self._finished = True
        self.close_reason = self._closing or CloseReason.SHUTDOWN
        self._session.close_reason = self.close_reason
        if self._drain_timer is not None:
            self._drain_timer.dispose()
            self._drain_timer = None
        pump, self._pump = self._pump, None
        if pump is not None:
            pump.dispose()
        observer = self._observer
        if observer is not None and not self._silent:
            observer.on_completed()
        self._on_finished(self)


def drain_timeout(ownership_expiration: float) -> float:
    """How long a revoked partition waits for its batches in flight before closing anyway.

    The loop keeps renewing a partition while it drains, so waiting costs only the newcomer's patience; a
    slow sink (a Spark job starting its JVM) must not turn a clean handover into duplicates. The bound is
    there for a sink that never acknowledges.
    """
    return max(_MIN_DRAIN, 2 * ownership_expiration)


_MIN_DRAIN = 60.0
