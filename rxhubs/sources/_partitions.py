"""The balancing Observable: one partition stream per partition this consumer owns, as ownership moves.

:func:`partitions` runs a :class:`~rxhubs.balancing._loop.BalancingLoop` against the checkpoint store and
emits a :class:`PartitionStream` each time this consumer gains a partition; the stream completes when the
partition is handed over, lost or released at shutdown. :func:`consume` merges them.

Lifecycle of one partition stream::

    claimed ──> emitted (on_partition_initialize) ──> subscribed: reads from its checkpoint
        │
        ├─ handover (another consumer needs it): stop reading, finish the batches in flight,
        │  complete (OWNERSHIP_LOST), flush checkpoints, release the record
        ├─ stolen / renewal lost / expired: stop reading, finish the batches in flight,
        │  complete (OWNERSHIP_LOST); nothing is written for it any more
        ├─ reader failed (not retriable): on_partition_error, complete (OWNERSHIP_LOST),
        │  flush, release; not claimed again for a while
        └─ graceful stop (rxhubs.run interrupted) or disposal: complete (SHUTDOWN), flush, release
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import socket
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import reactivex
from reactivex import Observable, abc
from reactivex import operators as ops
from reactivex.disposable import Disposable
from reactivex.scheduler.eventloop import AsyncIOScheduler

from rxhubs._models import (
    Checkpoint,
    CloseReason,
    EventBatch,
    LastEnqueuedEventProperties,
    Ownership,
    PartitionContext,
    Position,
    _Lease,
)
from rxhubs._shutdown import current_shutdown
from rxhubs.balancing._loop import BalancingLoop, RevokeReason
from rxhubs.balancing._planner import DEFAULT_EXPIRATION, DEFAULT_INTERVAL, BalancingSettings, Strategy
from rxhubs.balancing._session import PartitionSession
from rxhubs.errors import ConfigurationError, OwnershipLostError
from rxhubs.sources._partition import DEFAULTS, check_source_args, partition_batches
from rxhubs.transport._base import Hub

__all__ = ["PartitionStream", "consume", "partitions"]

log = logging.getLogger("rxhubs.sources")

StartOption = Position | Mapping[str, Position] | None
InitializeHook = Callable[[PartitionContext], Any]
CloseHook = Callable[[PartitionContext, CloseReason], Any]
ErrorHook = Callable[[PartitionContext, Exception], Any]

_OWNER_ID_CHARS = re.compile(r"[^A-Za-z0-9._-]")


def default_owner_id() -> str:
    """A readable, unique owner id: host, process id and a random suffix (``myhost-4242-1f3a9c0b``)."""
    host = _OWNER_ID_CHARS.sub("-", socket.gethostname())[:40] or "host"
    return f"{host}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


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
        self._inflight = 0
        self._closing: CloseReason | None = None
        self._silent = False
        self._finished = False
        self.close_reason: CloseReason | None = None
        self.error: Exception | None = None
        self.cut_off = False
        self.user_disposed = False
        self.last_enqueued: LastEnqueuedEventProperties | None = None

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
        wrapped = EventBatch(batch.context, batch.events, batch.last_enqueued, lease, self._session)
        if batch.last_enqueued is not None:
            self.last_enqueued = batch.last_enqueued
        self._inflight += 1
        lease.hold()
        try:
            observer.on_next(wrapped)
        finally:
            lease.release()

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
    def _close(self, reason: CloseReason, *, silent: bool = False) -> None:
        """Stop reading; complete once the batches in flight are acknowledged (at once when ``silent``)."""
        if self._finished:
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


def _pick(option: StartOption, partition_id: str) -> Position | None:
    if option is None or isinstance(option, Position):
        return option
    return option.get(partition_id)


def _check_start(name: str, option: object) -> None:
    if option is None or isinstance(option, Position):
        return
    if isinstance(option, Mapping) and all(isinstance(k, str) and isinstance(v, Position) for k, v in option.items()):
        return
    raise ConfigurationError(f"{name} must be an rxhubs.Position or a mapping of partition id to Position")


class _Consumer:
    """One subscription of :func:`partitions`: the loop's listener and the owner of the partition streams."""

    def __init__(
        self,
        observer: abc.ObserverBase[PartitionStream],
        scheduler: abc.SchedulerBase,
        hub: Hub,
        consumer_group: str,
        store: object,
        owner_id: str,
        settings: BalancingSettings,
        options: dict[str, Any],
    ) -> None:
        self.observer = observer
        self.scheduler = scheduler
        self.hub = hub
        self.consumer_group = consumer_group
        self.options = options
        self.streams: dict[str, PartitionStream] = {}
        self.disposed = False
        self.completed = False
        self.unwatch: abc.DisposableBase | None = None
        self.loop = BalancingLoop(
            store,
            namespace=hub.fully_qualified_namespace,
            eventhub_name=hub.eventhub_name,
            consumer_group=consumer_group,
            partition_ids=lambda: _partition_ids(hub),
            owner_id=owner_id,
            settings=settings,
            scheduler=scheduler,
            listener=self,
            baseline=options["start"] is not None,
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
    def _hook(self, name: str, *args: Any) -> None:
        hook = self.options[name]
        if hook is None:
            return
        try:
            hook(*args)
        except Exception as exc:
            log.warning("%s raised %r (ignored)", name, exc)

    # -- LoopListener --------------------------------------------------------------------------------------
    def on_acquired(self, record: Ownership, checkpoint: Checkpoint | None) -> None:
        pid = record.partition_id
        context = PartitionContext(self.hub.fully_qualified_namespace, self.hub.eventhub_name, self.consumer_group, pid)
        start = self._start_for(pid, checkpoint)
        o = self.options
        source = partition_batches(
            self.hub,
            pid,
            consumer_group=self.consumer_group,
            start=start,
            owner_level=o["owner_level"],
            prefetch=o["prefetch"],
            max_batch_size=o["max_batch_size"],
            max_wait=o["max_wait"],
            max_inflight=o["max_inflight"],
            scheduler=self.scheduler,
        )
        stream = PartitionStream(
            context,
            start=start,
            source=source,
            session=PartitionSession(context),
            scheduler=self.scheduler,
            drain_timeout=drain_timeout(self.loop.settings.ownership_expiration),
            on_finished=self._stream_finished,
            on_reader_error=self._reader_error,
        )
        self.streams[pid] = stream
        log.info("partition %s claimed by %s, reading from %r", pid, self.loop.owner_id, start)
        self._hook("on_partition_initialize", context)
        if not self.disposed:
            self.observer.on_next(stream)

    def on_revoke(self, partition_id: str, reason: RevokeReason) -> None:
        stream = self.streams.get(partition_id)
        if stream is None:
            self.loop.ready(partition_id)
            return
        close = CloseReason.OWNERSHIP_LOST if reason == "handover" else CloseReason.SHUTDOWN
        stream._close(close, silent=reason == "dispose")

    def on_lost(self, partition_id: str) -> None:
        stream = self.streams.get(partition_id)
        if stream is None:
            return
        stream.session.lose()
        stream._close(CloseReason.OWNERSHIP_LOST, silent=self.disposed)

    def on_released(self, partition_id: str) -> None:
        stream = self.streams.pop(partition_id, None)
        if stream is not None:
            stream.session.lose()

    def on_stopped(self) -> None:
        if self.unwatch is not None:
            self.unwatch.dispose()
        if not self.disposed and not self.completed:
            self.completed = True
            if self.loop.fatal is not None:
                self.observer.on_error(self.loop.fatal)
            else:
                self.observer.on_completed()

    # -- streams -------------------------------------------------------------------------------------------
    def _reader_error(self, stream: PartitionStream, error: Exception) -> None:
        if isinstance(error, OwnershipLostError):
            log.info("partition %s: reader cut off by another reader (%s)", stream.partition_id, error)
            self.loop.abandon(stream.partition_id)
            return
        log.warning("partition %s: reader failed: %r", stream.partition_id, error)
        self._hook("on_partition_error", stream.context, error)

    def _stream_finished(self, stream: PartitionStream) -> None:
        pid = stream.partition_id
        self._hook("on_partition_close", stream.context, stream.close_reason)
        if not stream.session.owned:
            if self.streams.get(pid) is stream:
                del self.streams[pid]
            return
        failed = stream.error is not None or stream.user_disposed

        def release(*_: Any) -> None:
            self.loop.ready(pid, failed=failed)

        stream.session.flush().subscribe(on_completed=release, on_error=release, scheduler=self.scheduler)

    def _start_for(self, partition_id: str, checkpoint: Checkpoint | None) -> Position:
        explicit = _pick(self.options["start"], partition_id)
        if explicit is not None:
            baseline = self.loop.baseline_checkpoints or {}
            if checkpoint is None or baseline.get(partition_id) == checkpoint:
                return explicit
        if checkpoint is not None:
            return checkpoint.position()
        return _pick(self.options["default_start"], partition_id) or Position.earliest()


def _partition_ids(hub: Hub) -> Observable[Any]:
    from rxhubs._rx._aio import call

    known = getattr(hub, "partition_ids", None)
    if isinstance(known, tuple) and known:
        return reactivex.of(known)
    return call(hub, "get_partition_ids")


def _resolve_scheduler(scheduler: abc.SchedulerBase | None) -> abc.SchedulerBase:
    if scheduler is not None:
        return scheduler
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        raise ConfigurationError(
            "partitions() runs on a scheduler: drive the pipeline with rxhubs.run()/arun(), or subscribe with"
            " scheduler=... (a TestScheduler with the in-memory hub and store)"
        ) from None
    return AsyncIOScheduler(loop)


def partitions(
    hub: Hub,
    consumer_group: str,
    store: object,
    *,
    owner_id: str | None = None,
    strategy: Strategy = "greedy",
    load_balancing_interval: float = DEFAULT_INTERVAL,
    ownership_expiration: float = DEFAULT_EXPIRATION,
    default_start: StartOption = Position.earliest(),  # noqa: B008 - an immutable value
    start: StartOption = None,
    max_batch_size: int = DEFAULTS["max_batch_size"],
    max_wait: float = DEFAULTS["max_wait"],
    prefetch: int = DEFAULTS["prefetch"],
    max_inflight: int = DEFAULTS["max_inflight"],
    owner_level: int | None = 0,
    scheduler: abc.SchedulerBase | None = None,
    on_partition_initialize: InitializeHook | None = None,
    on_partition_close: CloseHook | None = None,
    on_partition_error: ErrorHook | None = None,
) -> Observable[PartitionStream]:
    """An Observable of :class:`PartitionStream`: one per partition this consumer owns, balanced with its peers.

    Consumers of one consumer group (in one process or many) divide the hub's partitions through ownership
    records in ``store``. Each subscription is one consumer: every ``load_balancing_interval`` it lists
    the records, renews its own, claims its share of the unowned, released or expired ones, and hands over
    what exceeds its fair share to consumers that have less. A gained partition is emitted as a stream that
    reads right after the stored checkpoint (``default_start`` without one; ``start`` instead of checkpoints
    that existed when this consumer started, for a reset); it completes with ``OWNERSHIP_LOST`` when the
    partition moves to another consumer, or ``SHUTDOWN`` on a graceful stop or disposal, which release every
    partition at once (after the checkpoint operator flushed) so others take over without waiting for expiry.
    See ``docs/balancing.md``.

    Defaults: a 10 s interval and 30 s expiration, as in the .NET processor: a crashed consumer's
    partitions are taken over within about 40 s, each consumer makes three store calls per interval, and
    a renewal may fail twice before anything moves. Receivers are exclusive (``owner_level=0``: the newest
    reader of a partition cuts the older off), so a partition never has two readers for long.

    Marble diagram (partitions ``0`` and ``1``, interval 10; consumer ``b`` subscribes at 5; one character
    is one second; an element is the partition id of the stream emitted)::

        consumer a:           (01)-------------------
        a's stream of 1:      -----------|               handed over at 10 (OWNERSHIP_LOST): finished,
                                                         checkpointed, released
        consumer b:           -----------------1-----    b, present since 5, claims 1 at its round at 15

    Args:
        hub: The hub (``rxhubs.EventHub`` or ``rxhubs.testing.InMemoryEventHub``).
        consumer_group: The consumer group.
        store: The checkpoint store shared by the consumers (also the SDK's ``CheckpointStore``).
        owner_id: This consumer's id (default: host, process id and a random suffix).
        strategy: ``"greedy"`` (converge within two intervals) or ``"balanced"`` (one partition per interval).
        load_balancing_interval: Seconds between balancing rounds.
        ownership_expiration: Seconds without renewal after which a consumer's partitions are taken over.
        default_start: Where to read a partition without a checkpoint (default earliest); a Position or a
            mapping of partition id to Position.
        start: Read from here instead of the checkpoints stored before this consumer started (a reset);
            checkpoints written since win. A Position or a mapping of partition id to Position.
        max_batch_size: Most events per batch.
        max_wait: Seconds a pull waits for the first event.
        prefetch: Events the transport may buffer ahead.
        max_inflight: Most unacknowledged batches per partition.
        owner_level: Owner level (epoch) of the receivers; None for non-exclusive receivers.
        scheduler: Scheduler to run on (default: the one given at subscribe time, else the running loop's).
        on_partition_initialize: Called with the context when a partition is gained.
        on_partition_close: Called with the context and the reason when a partition stream ends.
        on_partition_error: Called with the context and the error when a partition's reader fails; the other
            partitions go on, and the failed one is claimed again later.

    Returns:
        An Observable of :class:`PartitionStream`; it completes after a graceful stop released everything.

    Raises:
        ConfigurationError: At call time, for invalid options.

    Example:
        >>> import rxhubs
        >>> from reactivex import operators as ops
        >>> from reactivex.testing import TestScheduler
        >>> hub = rxhubs.testing.InMemoryEventHub(partition_count=4)
        >>> store = rxhubs.stores.InMemoryCheckpointStore()
        >>> scheduler, owned = TestScheduler(), {}
        >>> def track(name):
        ...     def on_stream(stream):
        ...         owned.setdefault(name, set()).add(stream.partition_id)
        ...         stream.subscribe(on_completed=lambda: owned[name].discard(stream.partition_id),
        ...                          scheduler=scheduler)
        ...     return on_stream
        >>> _ = rxhubs.partitions(hub, "$Default", store, owner_id="a").subscribe(track("a"), scheduler=scheduler)
        >>> _ = scheduler.schedule_absolute(5.0, lambda *_: rxhubs.partitions(
        ...     hub, "$Default", store, owner_id="b").subscribe(track("b"), scheduler=scheduler))
        >>> scheduler.advance_to(30.0)
        >>> sorted(owned["a"]), sorted(owned["b"])
        (['0', '1'], ['2', '3'])
    """
    if not isinstance(consumer_group, str) or not consumer_group:
        raise ConfigurationError(f"consumer_group must be a non-empty str, got {consumer_group!r}")
    if not callable(getattr(hub, "receiver", None)):
        raise ConfigurationError(f"hub must provide receiver(...), got {type(hub).__name__}")
    if owner_id is not None and (not isinstance(owner_id, str) or not owner_id or "/" in owner_id):
        raise ConfigurationError(f"owner_id must be a non-empty str without '/', got {owner_id!r}")
    check_source_args(max_batch_size, max_wait, max_inflight, prefetch)
    _check_start("default_start", default_start)
    _check_start("start", start)
    if owner_level is not None and (
        isinstance(owner_level, bool) or not isinstance(owner_level, int) or owner_level < 0
    ):
        raise ConfigurationError(f"owner_level must be an int >= 0 or None, got {owner_level!r}")
    settings = BalancingSettings(load_balancing_interval, ownership_expiration, strategy)
    checked_store = _as_store(store)
    options: dict[str, Any] = {
        "start": start,
        "default_start": default_start,
        "max_batch_size": max_batch_size,
        "max_wait": max_wait,
        "prefetch": prefetch,
        "max_inflight": max_inflight,
        "owner_level": owner_level,
        "on_partition_initialize": on_partition_initialize,
        "on_partition_close": on_partition_close,
        "on_partition_error": on_partition_error,
    }

    def subscribe(
        observer: abc.ObserverBase[PartitionStream], sched: abc.SchedulerBase | None = None
    ) -> abc.DisposableBase:
        try:
            resolved = _resolve_scheduler(scheduler or sched)
        except ConfigurationError as exc:
            observer.on_error(exc)
            return Disposable()
        consumer = _Consumer(
            observer, resolved, hub, consumer_group, checked_store, owner_id or default_owner_id(), settings, options
        )
        consumer.start()
        return Disposable(consumer.dispose)

    return reactivex.create(subscribe)


def _as_store(store: object) -> object:
    """Accept an rxhubs store, or one written for the Azure SDK's ``CheckpointStore`` interface."""
    if store is None:
        raise ConfigurationError("store is required: e.g. rxhubs.stores.SqliteCheckpointStore('checkpoints.db')")
    try:
        from rxhubs.stores import as_checkpoint_store
    except ImportError:  # pragma: no cover - the stores package is part of rxhubs
        return store
    if any(callable(getattr(store, "observe_" + verb, None)) for verb in ("list_ownership", "claim_ownership")):
        return store
    return as_checkpoint_store(store)


def consume(
    hub: Hub,
    consumer_group: str,
    store: object,
    **options: Any,
) -> Observable[EventBatch]:
    """The batches of every partition this consumer owns, merged: :func:`partitions` flattened.

    Takes the same keyword options as :func:`partitions`. Batches of one partition arrive in order;
    partitions proceed concurrently. Put :func:`rxhubs.operators.checkpoint` after the work that must
    succeed first.

    Marble diagram (partitions ``0`` and ``1`` owned)::

        partition 0:  -a---c----|
        partition 1:  --b----d--|
        consume:      -ab--c-d--|

    Args:
        hub: The hub.
        consumer_group: The consumer group.
        store: The checkpoint store shared by the consumers.
        **options: Keyword options of :func:`partitions`.

    Returns:
        An Observable of :class:`~rxhubs.EventBatch`.

    Example:
        >>> import rxhubs
        >>> from reactivex.testing import TestScheduler
        >>> hub = rxhubs.testing.InMemoryEventHub(partition_count=2)
        >>> _ = hub.send([b"x"], partition_id="0"), hub.send([b"y", b"z"], partition_id="1")
        >>> store, scheduler, seen = rxhubs.stores.InMemoryCheckpointStore(), TestScheduler(), []
        >>> _ = rxhubs.consume(hub, "$Default", store).subscribe(
        ...     lambda b: seen.append((b.partition_id, len(b))), scheduler=scheduler)
        >>> scheduler.advance_to(1.0)
        >>> sorted(seen)
        [('0', 1), ('1', 2)]
    """
    return partitions(hub, consumer_group, store, **options).pipe(ops.merge_all())
