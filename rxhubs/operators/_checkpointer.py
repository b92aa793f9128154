"""One subscription of the checkpoint operator: what it remembers per partition, and how it writes (private).

Upstream, each batch advances its partition's :class:`~rxhubs.operators._checkpoint_record.PartitionRecord`;
writes are coalesced per partition (``max_interval``, ``every``), one at a time, retried with backoff, refused
for a partition no longer owned, and flushed on completion and when the balancer hands a partition over.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import reactivex
from reactivex import Observable, abc
from reactivex.disposable import Disposable, SingleAssignmentDisposable

from rxhubs import _telemetry
from rxhubs._batch import EventBatch, OwnershipSession
from rxhubs._models import Checkpoint, Event, PartitionContext
from rxhubs._retry import Backoff
from rxhubs._rx import from_coroutine
from rxhubs.errors import OwnershipLostError, StoreError
from rxhubs.operators._checkpoint_record import PartitionRecord as _Partition
from rxhubs.operators._checkpoint_record import is_owned, no_state_support, store_write
from rxhubs.stores import CheckpointStore, is_fenced, is_stateful

__all__ = ["DEFAULT_TIMEOUT", "Checkpointer"]

log = logging.getLogger("rxhubs.operators")

#: Seconds a write may take when neither ``timeout`` nor the batch's session (``store_timeout``) says.
DEFAULT_TIMEOUT = 10.0


class Checkpointer:
    """One subscription of :func:`~rxhubs.operators.checkpoint`: per partition, remember, write, retry, flush."""

    def __init__(
        self,
        observer: abc.ObserverBase[EventBatch],
        store: CheckpointStore,
        scheduler: abc.SchedulerBase,
        max_interval: float | None,
        every: int | None,
        retry: Backoff,
        position: Callable[[EventBatch], Event | None] | None = None,
        timeout: float | None = None,
    ) -> None:
        self.observer = observer
        self.timeout = timeout
        self.position = position
        self.warned_reorder = False
        self.store = store
        self.scheduler = scheduler
        self.max_interval = max_interval
        self.every = every
        self.retry = retry
        self.partitions: dict[PartitionContext, _Partition] = {}
        self.upstream = SingleAssignmentDisposable()
        self.completing: Exception | bool = False
        self.failed = False
        self.disposed = False
        self.writes = 0
        self.refused = 0
        self.fenced = is_fenced(store)
        self.keeps_state = is_stateful(store)
        self.warned_unsaved = False

    # -- upstream ------------------------------------------------------------------------------------------
    def on_next(self, batch: EventBatch) -> None:
        if self.failed:
            return
        self._remember(batch)
        if not self.failed:
            self.observer.on_next(batch)

    def _remember(self, batch: EventBatch) -> None:
        session = batch._session
        if not is_owned(session):
            return  # the partition moved on: what this consumer did with it is not recorded
        if batch._state and not self._state_kept(batch):
            return
        state = self.partitions.get(batch.context)
        if state is None:
            state = self.partitions[batch.context] = _Partition(batch.context)
        if session is not state.session:
            state.begin(session)  # a new period of ownership: from the stored checkpoint (and state) afresh
            if session is not None:
                session.register(self, self._flusher)
                if getattr(session, "handed", False):
                    # handed over: the former owner's last write may still be landing, and every partition of the
                    # handover starts at once; its first write waits one interval, not the first batch
                    state.last_write_at = self._now()
        position = self.position(batch) if self.position is not None else None
        news, reordered = state.take(batch, position)
        if reordered and not self.warned_reorder:
            self.warned_reorder = True
            log.warning(
                "checkpoint: batches of partition %s arrive out of order (the pipeline reorders them, e.g. a"
                " flat_map over async work); only the contiguous prefix is checkpointed. Use hops.process"
                " to keep the order.",
                batch.partition_id,
            )
        if news:
            state.batches += 1
            self._maybe_write(state)

    def _state_kept(self, batch: EventBatch) -> bool:
        """A batch carries state deltas: False (and the stream fails, once) if the store cannot keep them."""
        if self.keeps_state:
            if batch._session is None and not self.warned_unsaved:
                self.warned_unsaved = True
                log.warning("checkpoint: batches read without balancing carry operator state, which is not saved"
                            " (no period of ownership to commit it in); use rxhubs.partitions or rxhubs.consume")
            return True
        self.failed = True
        self.upstream.dispose()
        self.observer.on_error(no_state_support(self.store, batch))
        return False

    def on_error(self, error: Exception) -> None:
        self._complete(error)

    def on_completed(self) -> None:
        self._complete(True)

    def _complete(self, how: Exception | bool) -> None:
        if self.failed or self.completing:
            return
        self.completing = how
        for state in self.partitions.values():
            state.flushing = True
            self._maybe_write(state)
        self._maybe_finish()

    def _maybe_finish(self) -> None:
        if not self.completing or self.failed or not all(s.idle for s in self.partitions.values()):
            return
        self.failed = True  # nothing more goes downstream
        for state in self.partitions.values():
            if state.session is not None:
                state.session.unregister(self)
        if isinstance(self.completing, Exception):
            self.observer.on_error(self.completing)
        else:
            self.observer.on_completed()

    def dispose(self) -> None:
        """Stop timers; writes in flight finish; flushes requested by a balancer still run."""
        self.disposed = True
        self.upstream.dispose()
        for state in self.partitions.values():
            if state.timer is not None:
                state.timer.dispose()
                state.timer = None

    # -- writing -------------------------------------------------------------------------------------------
    def _now(self) -> float:
        return self.scheduler.now.timestamp()

    def _maybe_write(self, state: _Partition, *, timer_fired: bool = False) -> None:
        if state.in_flight is not None or (self.failed and not state.waiters):
            return
        # the last position a hand carries is written even once released (the store lets that one write in)
        if state.pending is not None and not is_owned(state.session) and not _handed_last(state):
            if self.completing or state.flushing:
                lost = state.pending
                log.warning("checkpoint of partition %s at sequence number %d not written: the partition is no"
                            " longer owned (it expired or was taken over)", lost.partition_id, lost.sequence_number)
            state.pending = None
        if state.pending is None:
            self._settle(state)
            return
        if state.retrying is not None and not state.flushing:
            # a failed write is backing off: its retry writes the newest position. Batches arriving meanwhile must
            # not write at once: each write spent a retry, so a steady stream used them all up within seconds of
            # an outage shorter than the ownership expiration, and the partition was stopped for nothing
            return
        now = self._now()
        due = timer_fired or state.flushing or (self.every is not None and state.batches >= self.every)
        if not due and self.max_interval is not None:
            due = state.last_write_at is None or now >= state.last_write_at + self.max_interval
        if due:
            self._write(state, now)
        elif self.max_interval is not None and state.timer is None and not self.disposed:
            assert state.last_write_at is not None
            delay = state.last_write_at + self.max_interval - now

            def fire(*_: Any) -> None:
                state.timer = None
                self._maybe_write(state, timer_fired=True)

            state.timer = self.scheduler.schedule_relative(delay, fire)

    def _announce(self, state: _Partition, checkpoint: Checkpoint) -> None:
        """A flush's last write (``checkpoint``) is sent: tell the flushers waiting, unless it carries state."""
        if state.flushing and not state.state.stateful:
            for tell in list(state.finals):
                tell(checkpoint)
            if getattr(state.session, "final", None) is checkpoint:  # taken: a hand carries it (flush(early=True))
                state.announced = checkpoint

    def _write(self, state: _Partition, now: float) -> None:
        checkpoint = state.pending
        assert checkpoint is not None
        session = state.session
        state.pending, state.in_flight, state.batches, state.last_write_at = None, checkpoint, 0, now
        for timer in (state.timer, state.retrying):  # (a flush does not wait for the backoff)
            if timer is not None:
                timer.dispose()
        state.timer = state.retrying = None

        def done(_: Any = None) -> None:
            state.in_flight = None
            state.attempt = 0
            state.written = checkpoint
            self.writes += 1
            self._maybe_write(state)

        def failed(error: Exception) -> None:
            state.in_flight = None
            if isinstance(error, OwnershipLostError) and session is not None:
                self._fenced(state, session, checkpoint, error)
                return
            newer = state.pending is not None and state.pending.sequence_number > checkpoint.sequence_number
            if state.session is session and not newer:
                state.pending = checkpoint  # keep the position: write it (or a newer one) on the retry
            state.attempt += 1
            if self.retry.should_retry(error, state.attempt):
                delay = self.retry.delay(state.attempt)
                log.warning("checkpoint of partition %s failed (%s); retry %d in %.1f s",
                            checkpoint.partition_id, error, state.attempt, delay)
                if session is not None:
                    session.report("checkpoint", error)

                def again(*_: Any) -> None:
                    state.retrying = None
                    if state.in_flight is None and state.pending is not None and is_owned(state.session):
                        self._write(state, self._now())
                    else:
                        self._maybe_write(state)  # drops a position no longer owned, then settles

                if state.retrying is not None:
                    state.retrying.dispose()
                state.retrying = self.scheduler.schedule_relative(delay, again)
                return
            self._fail(state, checkpoint, error)

        period = session.period if session is not None and self.fenced else None
        limit = self.timeout or (session.store_timeout if session is not None else None) or DEFAULT_TIMEOUT
        store = self.store

        try:
            encoded = state.state.encoded() if state.state.stateful and period is not None else None
            write = from_coroutine(lambda: _telemetry.hooks.checkpoint(
                checkpoint, session, store_write(store, checkpoint, period, encoded, limit)))
            write.subscribe(on_error=failed, on_completed=done, scheduler=self.scheduler)
        except Exception as exc:
            failed(exc)
        if state.in_flight is checkpoint and state.pending is None:
            self._announce(state, checkpoint)

    def _fenced(
        self, state: _Partition, session: OwnershipSession, checkpoint: Checkpoint, error: OwnershipLostError
    ) -> None:
        """The store refused the write: another consumer claimed the partition. Nothing is retried or written."""
        announced = state.announced
        if (state.session is session and announced is not None
                and checkpoint.sequence_number <= announced.sequence_number):
            # the position a flush named as its last, or an older one: the hand carried the last, and once the
            # partition is handed over the store refuses this period's other writes, and the last one too once anyone
            # wrote since (the recipient, who started there): what a handover means, not a takeover to report
            log.debug("checkpoint of partition %s at sequence number %d refused after the hand: %s",
                      checkpoint.partition_id, checkpoint.sequence_number, error)
            if checkpoint.sequence_number == announced.sequence_number:
                state.pending = None
            self._maybe_write(state)  # the last position goes out still, after an older one refused
            return
        self.refused += 1
        log.warning("checkpoint of partition %s at sequence number %d refused: %s",
                    checkpoint.partition_id, checkpoint.sequence_number, error)
        if state.session is session:
            state.pending = None
        session.lost("checkpoint", error)
        # a former period's write refused (this consumer's own reclaim fenced it): the current period's position
        # waited behind it, and a flush of the current period waits for that write: send it now
        self._maybe_write(state)

    def _settle(self, state: _Partition) -> None:
        if state.idle:
            state.flushing = bool(self.completing)
            waiters, state.waiters, state.finals = state.waiters, [], []
            for wake in waiters:
                wake()
            self._maybe_finish()

    def _fail(self, state: _Partition, checkpoint: Checkpoint, error: Exception) -> None:
        message = (
            f"checkpoint of partition {checkpoint.partition_id} at sequence number {checkpoint.sequence_number}"
            f" not written after {state.attempt} attempts: {error}"
        )
        failure = StoreError(message, retriable=False)
        failure.__cause__ = error
        state.pending = None
        waiters, state.waiters, state.finals = state.waiters, [], []
        for wake in waiters:
            wake()
        session = state.session
        if session is not None and session.owned and not self.completing:
            # only this partition stops: it is released and read again from the last checkpoint written
            log.error("%s: stopping the partition", message)
            session.fail("checkpoint", failure)
            return
        if self.failed:
            log.warning("%s", message)
            return
        self.failed = True
        self.upstream.dispose()
        self.observer.on_error(failure)

    # -- flushing for the balancer (handover / release) ----------------------------------------------------
    def _flusher(self, session: OwnershipSession) -> Observable[Checkpoint]:
        def subscribe(
            observer: abc.ObserverBase[Checkpoint], _: abc.SchedulerBase | None = None
        ) -> abc.DisposableBase:
            state = self.partitions.get(session.context)
            if state is None or state.session is not session or state.idle:
                observer.on_completed()
                return Disposable()
            state.flushing = True
            state.waiters.append(observer.on_completed)
            # once the last position is on its way (without state), a handover may name it rather than wait for
            # the answer (PartitionSession.flush(early=True)); the flusher still completes on the answer
            state.finals.append(observer.on_next)
            if state.in_flight is not None:
                # sent before the flush; or, with a newer position pending, perhaps waiting its turn behind hundreds
                # (an owner handing 896 partitions over): the newest position is the last, a hand carries it, and
                # its write follows the one in flight
                self._announce(state, state.pending or state.in_flight)
            self._maybe_write(state)
            return Disposable()

        return reactivex.create(subscribe)


def _handed_last(state: _Partition) -> bool:
    """Whether the pending position is the one a handover's flush named as its last (a hand carries it)."""
    pending, announced = state.pending, state.announced
    return pending is not None and announced is not None and pending.sequence_number == announced.sequence_number
