"""``hops.exactly_once``: hold batches until a commit into a :class:`~rxhubs.operators.TransactionalSink` covers them.

Commits are coalesced across partitions, one at a time, bounded by a timeout and retried with backoff; a
partition's batches go on, in order, once committed. The seam itself (``CommitResult``, ``TransactionalSink``,
``read_position``) is ``rxhubs/operators/_transactional.py``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import reactivex
from reactivex import Observable, abc
from reactivex.disposable import Disposable, SingleAssignmentDisposable

from rxhubs._batch import Ack, EventBatch, OwnershipSession
from rxhubs._models import PartitionContext
from rxhubs._retry import Backoff
from rxhubs._rx import deadline, from_coroutine
from rxhubs.errors import ConfigurationError, SinkError
from rxhubs.operators._base import stateful_operator
from rxhubs.operators._transactional import CommitResult, TransactionalSink, read_position

__all__ = ["DEFAULT_COMMIT_TIMEOUT", "exactly_once"]

log = logging.getLogger("rxhubs.operators")

#: Seconds one commit may take when ``timeout`` is not given.
DEFAULT_COMMIT_TIMEOUT = 60.0


@dataclass(eq=False, slots=True)
class _Held:
    batch: EventBatch
    ack: Ack
    session: OwnershipSession | None


@dataclass(eq=False, slots=True)
class _Waiter:
    session: OwnershipSession
    done: Callable[[], None]


@dataclass(eq=False)
class _Committer:
    """One subscription of the operator."""

    observer: abc.ObserverBase[EventBatch]
    sink: TransactionalSink
    scheduler: abc.SchedulerBase
    max_interval: float
    max_batches: int | None
    timeout: float
    retry: Backoff
    pending: list[_Held] = field(default_factory=list)
    in_flight: list[_Held] | None = None
    last_commit_at: float | None = None
    timer: abc.DisposableBase | None = None
    attempt: int = 0
    completing: Exception | bool = False
    finished: bool = False
    disposed: bool = False
    emitting: bool = False
    backing_off: bool = False
    commits: int = 0
    dead: dict[int, OwnershipSession] = field(default_factory=dict)
    registered: dict[int, OwnershipSession] = field(default_factory=dict)
    waiters: list[_Waiter] = field(default_factory=list)
    upstream: SingleAssignmentDisposable = field(default_factory=SingleAssignmentDisposable)

    # -- upstream ------------------------------------------------------------------------------------------
    def on_next(self, batch: EventBatch) -> None:
        if self.finished:
            return
        session = batch._session
        if session is not None:
            if not self._alive(session):
                return  # the partition moved on (or failed here): not held, so acknowledged at once
            if id(session) not in self.registered:
                self.registered[id(session)] = session
                session.register(self, self._flusher)
        self.pending.append(_Held(batch, batch.hold(), session))
        self._maybe_commit()

    def on_error(self, error: Exception) -> None:
        self._complete(error)

    def on_completed(self) -> None:
        self._complete(True)

    def _complete(self, how: Exception | bool) -> None:
        if self.finished or self.completing:
            return
        self.completing = how
        self._maybe_commit()

    def dispose(self) -> None:
        """Stop timers; a commit in flight finishes; flushes requested by a balancer still commit."""
        self.disposed = True
        self.upstream.dispose()
        if self.timer is not None:
            self.timer.dispose()
            self.timer = None

    # -- committing ----------------------------------------------------------------------------------------
    def _alive(self, session: OwnershipSession | None) -> bool:
        return session is None or (session.owned and id(session) not in self.dead)

    def _now(self) -> float:
        return self.scheduler.now.timestamp()

    def _maybe_commit(self, *, timer_fired: bool = False) -> None:
        if self.in_flight is not None or self.emitting or self.finished or self.backing_off:
            return
        kept = [h for h in self.pending if self._alive(h.session)]
        if len(kept) != len(self.pending):
            for held in self.pending:
                if not self._alive(held.session):
                    held.ack()  # never written by this consumer: the next owner reads it again
            self.pending = kept
        if not self.pending:
            self._settle()
            return
        now = self._now()
        due = timer_fired or bool(self.completing) or bool(self.waiters)
        due = due or (self.max_batches is not None and len(self.pending) >= self.max_batches)
        if not due:
            due = self.last_commit_at is None or now >= self.last_commit_at + self.max_interval
        if due:
            self._commit(now)
        elif self.timer is None and not self.disposed:
            assert self.last_commit_at is not None

            def fire(*_: Any) -> None:
                self.timer = None
                self._maybe_commit(timer_fired=True)

            self.timer = self.scheduler.schedule_relative(self.last_commit_at + self.max_interval - now, fire)

    def _commit(self, now: float) -> None:
        held, self.pending = self.pending, []
        self.in_flight, self.last_commit_at = held, now
        if self.timer is not None:
            self.timer.dispose()
            self.timer = None
        sessions: dict[PartitionContext, list[OwnershipSession | None]] = {}
        for h in held:
            sessions.setdefault(h.batch.context, []).append(h.session)

        def owned(context: PartitionContext) -> bool:
            return all(self._alive(s) for s in sessions.get(context, [None]))

        limit, sink, batches = self.timeout, self.sink, [h.batch for h in held]
        if all(read_position(b) is None for b in batches):  # heartbeats only: nothing to commit
            self._committed(held, CommitResult({}, {}, {}))
            return

        async def bounded() -> CommitResult:
            try:
                async with deadline(limit):
                    return await sink.commit(batches, owned=owned)
            except TimeoutError:
                raise SinkError(f"a commit of {len(batches)} batches did not answer within {limit:.1f} s",
                                retriable=True) from None

        try:
            from_coroutine(bounded).subscribe(
                lambda result: self._committed(held, result),
                lambda error: self._failed(held, error),
                scheduler=self.scheduler,
            )
        except Exception as exc:
            self._failed(held, exc)

    def _committed(self, held: list[_Held], result: CommitResult) -> None:
        self.in_flight, self.attempt = None, 0
        self.commits += 1
        if any(result.skipped.values()):
            log.debug("exactly_once: commit skipped %s events already in the table or no longer owned",
                      dict(result.skipped))
        self.emitting = True
        try:
            for h in held:
                if self._alive(h.session) and not self.finished:
                    self.observer.on_next(h.batch)
                h.ack()
        finally:
            self.emitting = False
        self._maybe_commit()

    def _failed(self, held: list[_Held], error: Exception) -> None:
        self.in_flight = None
        self.pending = held + self.pending  # everything again, in order: the sink filters what is in already
        self.attempt += 1
        if self.retry.should_retry(error, self.attempt):
            delay = self.retry.delay(self.attempt)
            log.warning("exactly_once: commit failed (%s); retry %d in %.1f s", error, self.attempt, delay)
            reported = {id(h.session): h.session for h in held if h.session is not None}
            for session in reported.values():
                session.report("checkpoint", error)

            def again(*_: Any) -> None:
                self.backing_off = False
                self._maybe_commit(timer_fired=True)

            self.backing_off = True  # nothing else starts before the retry
            self.scheduler.schedule_relative(delay, again)
            return
        self._give_up(error)

    def _give_up(self, error: Exception) -> None:
        failure = SinkError(f"exactly-once commit failed after {self.attempt} attempts: {error}", retriable=False)
        failure.__cause__ = error
        self.attempt = 0
        held, self.pending = self.pending, []
        sessionless = [h for h in held if h.session is None]
        for h in held:
            if h.session is not None and id(h.session) not in self.dead:
                self.dead[id(h.session)] = h.session  # later batches of it would leave a gap: never commit them
                log.error("%s: stopping partition %s", failure, h.batch.partition_id)
                h.session.fail("checkpoint", failure)
            h.ack()
        if sessionless and not self.finished:
            self.finished = True
            self.upstream.dispose()
            self._wake_all()
            self.observer.on_error(failure)
            return
        self._settle()

    # -- completion and flushes ------------------------------------------------------------------------------
    def _busy(self, session: OwnershipSession | None = None) -> bool:
        held = self.pending + (self.in_flight or [])
        return any(session is None or h.session is session for h in held)

    def _settle(self) -> None:
        if self.waiters:
            waiting, self.waiters = self.waiters, []
            for waiter in waiting:
                if self._busy(waiter.session) and self._alive(waiter.session) and not self.finished:
                    self.waiters.append(waiter)
                else:
                    waiter.done()
        if self.completing and not self.finished and not self._busy():
            self.finished = True
            self._wake_all()
            for session in self.registered.values():
                session.unregister(self)
            if isinstance(self.completing, Exception):
                self.observer.on_error(self.completing)
            else:
                self.observer.on_completed()

    def _wake_all(self) -> None:
        waiting, self.waiters = self.waiters, []
        for waiter in waiting:
            waiter.done()

    def _flusher(self, session: OwnershipSession) -> Observable[None]:
        def subscribe(observer: abc.ObserverBase[None], _: abc.SchedulerBase | None = None) -> abc.DisposableBase:
            if self.finished or not self._busy(session):
                observer.on_completed()
                return Disposable()
            self.waiters.append(_Waiter(session, observer.on_completed))
            self._maybe_commit()
            return Disposable()

        return reactivex.create(subscribe)


def exactly_once(
    sink: TransactionalSink,
    *,
    max_interval: float = 1.0,
    max_batches: int | None = None,
    timeout: float | None = None,
    retry: Backoff | None = None,
    scheduler: abc.SchedulerBase | None = None,
) -> Callable[[Observable[EventBatch]], Observable[EventBatch]]:
    """Write every batch into a transactional table exactly once, then pass it on.

    Each batch is held (it counts as in flight for backpressure) until a commit covers it. Commits are coalesced
    across partitions: at most one per ``max_interval`` seconds (the first at once, then what arrived meanwhile
    when the interval is up), or when ``max_batches`` batches wait; one commit at a time. After the commit the
    batches go on, in order per partition, and are acknowledged. The sink writes each partition's rows and its
    new position in one atomic commit, dropping events at or below the table's position, so a batch read twice
    is written once. Read with ``rxhubs.consume(..., positions=sink)`` so a new owner resumes right after the
    table's position. A ``hops.checkpoint`` after it is optional: it only keeps ``rxhubs checkpoints`` and lag
    current (the table's position is the one that counts).

    Batches of a partition no longer owned (handed over, lost, expired) are not written: they are acknowledged
    and dropped (the next owner reads them again). A partition handed over or released at shutdown is committed
    first (the balancer's flush). A failed commit is retried with backoff (reported to ``on_partition_error``,
    operation ``"checkpoint"``), including the batches that arrived meanwhile; when retries run out, each
    partition in it stops (a :class:`~rxhubs.errors.SinkError` through its session: released, and read again
    from the table's position later, nothing after the failed batches written); batches read without balancing
    have no partition to stop, so the stream errors. The source's completion or error waits for a last commit.

    Marble diagram (``max_interval=5``; ``a``, ``c`` of partition 0, ``b``, ``d`` of partition 1)::

        batches:   -a-b-c---d----|
        commits:   -a----(bc)-d        (a at once; b and c 5 s after a, at 6; d 5 s later, at 11)
        output:    -a----(b,c)d--|     (each batch after the commit that covered it; a group spans its width)

    Args:
        sink: The table (:class:`rxhubs.tables.SqlSink`, ``rxhubs.tables.sqlite(path)``, your own).
        max_interval: Most one commit per this many seconds. Held batches count as in flight (``max_inflight``
            per partition), so the interval is what keeps them moving: it cannot be None.
        max_batches: Also commit once this many batches wait.
        timeout: Seconds a commit may take before it counts as failed (retriable) and is retried; the sink
            filters again, so a commit that did land meanwhile is not written twice (default 60).
        retry: Backoff for failed commits (default: 0.2 s doubling to 10 s, 10 retries).
        scheduler: Scheduler for timers and commits (default: the one given at subscribe time).

    Returns:
        An operator ``Observable[EventBatch] -> Observable[EventBatch]``.

    Raises:
        ConfigurationError: At call time, for invalid options.

    Example:
        >>> import rxhubs
        >>> from rxhubs import operators as hops
        >>> from reactivex.testing import TestScheduler
        >>> hub = rxhubs.testing.InMemoryEventHub(partition_count=1)
        >>> _ = hub.send([b"a", b"b", b"c"], partition_id="0")
        >>> table, scheduler = rxhubs.tables.InMemoryTable(), TestScheduler()
        >>> store = rxhubs.stores.InMemoryCheckpointStore()
        >>> _ = rxhubs.consume(hub, "$Default", store, positions=table).pipe(
        ...     hops.exactly_once(table)).subscribe(scheduler=scheduler)
        >>> scheduler.advance_to(1.0)
        >>> [row["sequenceNumber"] for row in table.rows]
        [0, 1, 2]
    """
    if not isinstance(sink, TransactionalSink):
        raise ConfigurationError(
            f"sink must be a TransactionalSink (async positions() and commit()), got {type(sink).__name__}"
        )
    for name, value in (("max_interval", max_interval), ("timeout", timeout)):
        if (value is not None or name == "max_interval") and (
                isinstance(value, bool) or not isinstance(value, int | float) or value < 0):
            raise ConfigurationError(f"{name} must be a number of seconds >= 0, got {value!r}")
    if timeout == 0:
        raise ConfigurationError("timeout must be > 0")
    if max_batches is not None and (isinstance(max_batches, bool) or not isinstance(max_batches, int)
                                    or max_batches < 1):
        raise ConfigurationError(f"max_batches must be an int >= 1 or None, got {max_batches!r}")
    backoff = retry or Backoff()
    limit = float(timeout or DEFAULT_COMMIT_TIMEOUT)

    return stateful_operator("exactly_once()", scheduler, lambda observer, resolved: _Committer(
        observer, sink, resolved, max_interval, max_batches, limit, backoff
    ))
