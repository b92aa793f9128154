"""A private per-partition ownership session that travels with batches (``EventBatch._session``).

The balancing Observable creates one :class:`PartitionSession` each time this consumer gains a partition,
and attaches it to every batch of that partition. The checkpoint operator reads it to know whether the
partition is still owned (it never writes a checkpoint for a partition that is not), and registers a
*flusher* with it, which the balancing Observable calls before releasing the partition: the handover is
"finish the batches in flight, write the checkpoint, then release".

Batches from :func:`rxhubs.partition_batches` without balancing carry no session: they count as owned.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import reactivex
from reactivex import Observable, abc
from reactivex.disposable import CompositeDisposable, Disposable

from rxhubs._models import CloseReason, PartitionContext

__all__ = ["Flusher", "PartitionSession", "is_owned"]

log = logging.getLogger("rxhubs.balancing")

#: Called with the session; returns an Observable that completes once its pending checkpoint is written.
Flusher = Callable[["PartitionSession"], Observable[Any]]


class PartitionSession:
    """One period of ownership of one partition by this consumer.

    Attributes:
        context: The partition.
        owned: True while this consumer owns the partition; False from the moment it was released, lost
            to another consumer, or expired. Checkpoints are written only while it is True.
        close_reason: Why the period ended, once it did.
    """

    __slots__ = ("_flushers", "close_reason", "context", "owned")

    def __init__(self, context: PartitionContext) -> None:
        self.context = context
        self.owned = True
        self.close_reason: CloseReason | None = None
        self._flushers: dict[object, Flusher] = {}

    def register(self, key: object, flusher: Flusher) -> None:
        """Ask to be flushed (``flusher(self)``) before the partition is released."""
        self._flushers[key] = flusher

    def unregister(self, key: object) -> None:
        """Forget a flusher registered with ``key``."""
        self._flushers.pop(key, None)

    def lose(self) -> None:
        """The partition is no longer this consumer's: nothing may be written for it any more."""
        self.owned = False
        self._flushers.clear()

    def flush(self) -> Observable[None]:
        """An Observable that runs every flusher and completes when all have finished.

        A flusher's error is logged and does not stop the others: the partition is released anyway (the
        next owner starts from the last checkpoint that was written; events after it are read again).
        """

        def subscribe(
            observer: abc.ObserverBase[None], scheduler: abc.SchedulerBase | None = None
        ) -> abc.DisposableBase:
            flushers = list(self._flushers.values())
            if not self.owned or not flushers:
                observer.on_completed()
                return Disposable()
            remaining = len(flushers)

            def done(_: Any = None) -> None:
                nonlocal remaining
                remaining -= 1
                if remaining == 0:
                    observer.on_completed()

            def failed(exc: Exception) -> None:
                log.warning("partition %s: checkpoint flush before release failed: %s", self.context.partition_id, exc)
                done()

            disposables = CompositeDisposable()
            for flusher in flushers:
                try:
                    source = flusher(self)
                except Exception as exc:
                    failed(exc)
                    continue
                disposables.add(source.subscribe(on_error=failed, on_completed=done, scheduler=scheduler))
            return disposables

        return reactivex.create(subscribe)

    def __repr__(self) -> str:
        return f"PartitionSession(partition_id={self.context.partition_id!r}, owned={self.owned})"


def is_owned(session: object) -> bool:
    """Whether a batch's session still owns its partition (True for batches without one)."""
    return session is None or bool(getattr(session, "owned", True))
