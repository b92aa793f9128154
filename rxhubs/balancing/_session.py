"""One period of ownership of one partition by this consumer: claim, read, hand over, release.

The balancing loop (:mod:`rxhubs.balancing._loop`) creates a :class:`PartitionSession` when a claim wins and
moves it through these states; the partition stream (:mod:`rxhubs.balancing._stream`) reads while it is
``READING``, and every batch carries the session, so the checkpoint operator asks :attr:`~PartitionSession.owned`
before each write and registers a *flusher* the loop runs before releasing::

                  claim won
      (none) ────────────────> CLAIMED ──── checkpoint listed, stream emitted ────> READING
                                  │                                                    │
                                  │ stopping before it read                            │ handover (another consumer
                                  │                                                    │ needs it), graceful stop,
                                  │                                                    │ reader failed, disposal
                                  ▼                                                    ▼
                                READY <─────── batches finished, flushers ran ──── DRAINING
                                  │
                                  │ owner_id "" in the loop's next claim_ownership call
                                  ▼
                               RELEASED

      any state ── renewal lost to another consumer, stolen, cut off by a higher owner level, a checkpoint
                   write refused by a fenced store, or not renewed within the ownership expiration ──> LOST

``RELEASED`` and ``LOST`` are final: :attr:`~PartitionSession.owned` is False in both, so nothing is written
for the partition any more. A handover therefore writes the last checkpoint *before* the record is released
(with a store whose hand carries a position, the release names that write and need not wait for its answer:
:meth:`PartitionSession.flush`), and the next owner starts right after it: no event is processed by two owners at
a graceful handover.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Mapping
from typing import Any

import reactivex
from reactivex import Observable, abc
from reactivex.disposable import CompositeDisposable, Disposable

from rxhubs._batch import OwnershipSession
from rxhubs._models import Checkpoint, CloseReason, Ownership, PartitionContext
from rxhubs.state._codec import OperatorState

__all__ = ["Flusher", "PartitionSession", "SessionState"]

log = logging.getLogger("rxhubs.balancing")

#: Called with the session; returns an Observable that completes once its pending checkpoint is written.
Flusher = Callable[[OwnershipSession], Observable[Any]]
#: Called with the session, the failed operation and the error.
ErrorSink = Callable[["PartitionSession", str, Exception], None]


class SessionState(enum.Enum):
    """Where a :class:`PartitionSession` stands (see the module's diagram)."""

    CLAIMED = "claimed"
    READING = "reading"
    DRAINING = "draining"
    READY = "ready"
    RELEASED = "released"
    LOST = "lost"


class PartitionSession:
    """One period of ownership of one partition by this consumer.

    Attributes:
        context: The partition.
        record: The ownership record as last claimed or renewed (its etag is the loop's next compare-and-swap).
        renewed_at: When the record was last renewed (the scheduler's clock, seconds).
        period: The record passed to the store's ``fence`` when this period began (None unless the store is
            fenced): fenced checkpoint writes carry it, and fail once another consumer claimed the partition.
        restored_state: The operator state committed with the checkpoint this period started from (None if none).
        store_timeout: Seconds a store call for this partition may take: the consumer's ``store_timeout``
            (one balancing interval unless set); the checkpoint operator bounds its writes with it.
        state: See :class:`SessionState`.
        close_reason: Why the partition stream ended, once it did.
        release_to: Who the record goes to when it is released: a recipient the planner chose for a handover
            (:attr:`Plan.release_to <rxhubs.balancing.Plan.release_to>`), or ``""`` (no owner).
        handed: True if the former owner handed the partition to this consumer (it drained it and wrote its final
            checkpoint where it stopped reading), rather than this consumer claiming it.
        final: The position of the last checkpoint write, when it was still in flight as the partition became ready
            for a handover (``flush(early=True)``): the release hands it to the recipient with the record.

    Example:
        >>> from rxhubs import Ownership, PartitionContext
        >>> record = Ownership("ns", "hub", "$Default", "0", "me", 10.0, "e1")
        >>> session = PartitionSession(PartitionContext("ns", "hub", "$Default", "0"), record, 10.0)
        >>> session.state, session.owned
        (<SessionState.CLAIMED: 'claimed'>, True)
        >>> session.lose(); session.owned
        False
    """

    __slots__ = (
        "_failer",
        "_flushers",
        "_loser",
        "_reporter",
        "close_reason",
        "context",
        "final",
        "handed",
        "period",
        "record",
        "release_to",
        "renewed_at",
        "restored_state",
        "state",
        "store_timeout",
    )

    def __init__(self, context: PartitionContext, record: Ownership | None = None, renewed_at: float = 0.0) -> None:
        self.context = context
        self.record = record or Ownership(
            context.fully_qualified_namespace, context.eventhub_name, context.consumer_group, context.partition_id, ""
        )
        self.renewed_at = renewed_at
        self.state = SessionState.CLAIMED
        self.close_reason: CloseReason | None = None
        self.period: Ownership | None = None
        self.restored_state: Mapping[str, OperatorState] | None = None
        self.store_timeout: float | None = None
        self.release_to = ""
        self.handed = False
        self.final: Checkpoint | None = None
        self._flushers: dict[object, Flusher] = {}
        self._reporter: ErrorSink | None = None
        self._failer: ErrorSink | None = None
        self._loser: ErrorSink | None = None

    @property
    def partition_id(self) -> str:
        """The partition id."""
        return self.context.partition_id

    @property
    def owned(self) -> bool:
        """True until the partition is released or lost: checkpoints are written only while it is."""
        return self.state not in (SessionState.RELEASED, SessionState.LOST)

    @property
    def ready(self) -> bool:
        """True once the partition may be released (nothing in flight, checkpoints flushed)."""
        return self.state is SessionState.READY

    # -- transitions (the loop's and the stream's) -----------------------------------------------------------
    def drain(self) -> bool:
        """READING -> DRAINING (a handover or a stop began); False if it was not reading."""
        if self.state is SessionState.READING:
            self.state = SessionState.DRAINING
            return True
        return False

    def mark_ready(self) -> None:
        """-> READY: released with the loop's next claim (no-op once released or lost)."""
        if self.owned:
            self.state = SessionState.READY

    def released(self) -> None:
        """-> RELEASED: the record now names no owner."""
        if self.owned:
            self.state = SessionState.RELEASED
        self._flushers.clear()

    def lose(self) -> None:
        """-> LOST: the partition is no longer this consumer's; nothing may be written for it any more."""
        if self.owned:
            self.state = SessionState.LOST
        self._flushers.clear()

    # -- errors (operators report them; the consumer decides) -------------------------------------------------
    def bind(self, report: ErrorSink, fail: ErrorSink, lost: ErrorSink | None = None) -> None:
        """Where :meth:`report`, :meth:`fail` and :meth:`lost` go (the consumer that reads the partition)."""
        self._reporter, self._failer, self._loser = report, fail, lost

    def report(self, operation: str, error: Exception) -> None:
        """Tell the partition's error hook about ``error``; the partition goes on."""
        if self._reporter is not None:
            self._reporter(self, operation, error)
        else:
            log.warning("partition %s: %s failed: %r", self.partition_id, operation, error)

    def fail(self, operation: str, error: Exception) -> None:
        """Stop this partition because of ``error``: the stream ends, checkpoints flush, the record is released.

        The partition is read again from its checkpoint after a backoff (by this consumer or another).
        """
        if self._failer is not None and self.owned:
            self._failer(self, operation, error)
        else:
            self.report(operation, error)

    def lost(self, operation: str, error: Exception) -> None:
        """A fenced store refused a write for this period: report it; stop the partition now, release nothing."""
        if self._loser is not None:
            self._loser(self, operation, error)
        else:
            self.report(operation, error)
            self.lose()

    # -- flushers (the checkpoint operator's) ----------------------------------------------------------------
    def register(self, key: object, flusher: Flusher) -> None:
        """Ask to be flushed (``flusher(self)``) before the partition is released."""
        self._flushers[key] = flusher

    def unregister(self, key: object) -> None:
        """Forget a flusher registered with ``key``."""
        self._flushers.pop(key, None)

    def flush(self, *, early: bool = False) -> Observable[None]:
        """An Observable that runs every flusher and completes when all have finished.

        A flusher's error is logged and does not stop the others: the partition is released anyway (the
        next owner starts from the last checkpoint that was written; events after it are read again).

        With ``early`` (a handover to a recipient, through a store whose hand carries a position), a lone flusher
        that emits a :class:`~rxhubs.Checkpoint` (the checkpoint operator: its last write is sent, without state,
        and nothing is left after it) has finished then: the position is kept as :attr:`final`, and the release
        need not wait for the write's answer.
        """

        def subscribe(
            observer: abc.ObserverBase[None], scheduler: abc.SchedulerBase | None = None
        ) -> abc.DisposableBase:
            flushers = list(self._flushers.values())
            if not self.owned or not flushers:
                observer.on_completed()
                return Disposable()
            remaining = len(flushers)
            take_final = early and remaining == 1

            def done() -> None:
                nonlocal remaining
                remaining -= 1
                if remaining == 0:
                    observer.on_completed()

            def run(flusher: Flusher) -> abc.DisposableBase:
                finished = False

                def finish(_: Any = None) -> None:
                    nonlocal finished
                    if not finished:
                        finished = True
                        done()

                def emitted(value: Any) -> None:
                    if take_final and isinstance(value, Checkpoint) and not finished:
                        self.final = value
                        finish()

                def failed(exc: Exception) -> None:
                    if finished:  # the write the release named failed: the recipient starts there anyway
                        log.warning("partition %s: the last checkpoint write failed after the handover: %s",
                                  self.partition_id, exc)
                        return
                    log.warning("partition %s: checkpoint flush before release failed: %s", self.partition_id, exc)
                    finish()

                try:
                    source = flusher(self)
                except Exception as exc:
                    failed(exc)
                    return Disposable()
                return source.subscribe(emitted, failed, finish, scheduler=scheduler)

            return CompositeDisposable(*(run(flusher) for flusher in flushers))

        return reactivex.create(subscribe)

    def __repr__(self) -> str:
        return f"PartitionSession(partition_id={self.partition_id!r}, state={self.state.value})"
