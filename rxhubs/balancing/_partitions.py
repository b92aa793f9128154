"""The balancing Observable: :func:`partitions` (one stream per partition owned) and :func:`consume` (merged).

Lifecycle of one partition stream (the session's states in brackets; see :mod:`rxhubs.balancing._session`)::

    claimed [CLAIMED] ──> emitted (on_partition_initialize) ──> subscribed: reads from its checkpoint [READING]
        │
        ├─ handover (another consumer needs it): stop reading, finish the batches in flight [DRAINING],
        │  complete (OWNERSHIP_LOST), flush checkpoints [READY], release the record [RELEASED]
        ├─ stolen / renewal lost / expired: stop reading, finish the batches in flight,
        │  complete (OWNERSHIP_LOST); nothing is written for it any more [LOST]
        ├─ reader failed (not retriable): on_partition_error, complete (OWNERSHIP_LOST),
        │  flush, release; not claimed again for a while
        └─ graceful stop (rxhubs.run interrupted) or disposal: complete (SHUTDOWN), flush, release
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Unpack

import reactivex
from reactivex import Observable, abc
from reactivex import operators as ops
from reactivex.disposable import Disposable

from rxhubs._batch import EventBatch
from rxhubs._models import Position
from rxhubs._rx import pipeline_scheduler
from rxhubs.balancing._consumer import Consumer
from rxhubs.balancing._positions import TablePositions, with_table_positions
from rxhubs.balancing._settings import (
    CloseHook,
    ConsumerOptions,
    ConsumerSettings,
    ErrorHook,
    Hooks,
    InitializeHook,
    StartInput,
    default_owner_id,
)
from rxhubs.balancing._start_check import OutOfRangePolicy, warn_keda_case
from rxhubs.balancing._stream import PartitionStream
from rxhubs.balancing._timing import DEFAULT_EXPIRATION, DEFAULT_INTERVAL, Strategy
from rxhubs.errors import ConfigurationError
from rxhubs.sources import BackfillHub, Capture
from rxhubs.sources._settings import DEFAULT_READ
from rxhubs.stores import CheckpointStore, StoreLike, as_checkpoint_store
from rxhubs.transport import Hub

__all__ = ["PartitionPipeline", "consume", "isolated", "partitions"]

#: A user's pipeline for one partition's stream (``consume(..., pipeline=...)``).
PartitionPipeline = Callable[[Observable[EventBatch]], Observable[EventBatch]]


def partitions(
    hub: Hub,
    consumer_group: str,
    store: StoreLike,
    *,
    owner_id: str | None = None,
    strategy: Strategy = "greedy",
    load_balancing_interval: float = DEFAULT_INTERVAL,
    ownership_expiration: float = DEFAULT_EXPIRATION,
    store_timeout: float | None = None,
    default_start: StartInput = Position.earliest(),  # noqa: B008 - an immutable value
    start: StartInput = None,
    start_inclusive: bool | Mapping[str, bool] = False,
    max_batch_size: int = DEFAULT_READ.max_batch_size,
    max_wait: float = DEFAULT_READ.max_wait,
    min_batch_size: int | None = None,
    prefetch: int = DEFAULT_READ.prefetch,
    max_inflight: int = DEFAULT_READ.max_inflight,
    owner_level: int | None = 0,
    emit_empty: bool = False,
    track_last_enqueued_event_properties: bool | None = None,
    scheduler: abc.SchedulerBase | None = None,
    on_partition_initialize: InitializeHook | None = None,
    on_partition_close: CloseHook | None = None,
    on_partition_error: ErrorHook | None = None,
    positions: TablePositions | None = None,
    checkpoint_out_of_range: OutOfRangePolicy | None = "earliest",
    seed_checkpoint: bool = False,
    backfill: Capture | None = None,
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
        store_timeout: Seconds a store call (list, claim, fence, checkpoint read or write) may take before it
            fails as a retriable :class:`~rxhubs.errors.StoreError` and is retried (default: one interval).
        default_start: Where to read a partition without a checkpoint (default earliest): a Position, a form
            azure-eventhub's ``starting_position`` takes (``"-1"``, ``"@latest"``, a sequence number, a
            datetime, an offset string), or a mapping of partition id to either.
        start: Read from here instead of the checkpoints stored before this consumer started (a reset);
            checkpoints written since win. The same forms as ``default_start``.
        start_inclusive: Whether a sequence-number, time or offset start includes that event (the SDK's
            ``starting_position_inclusive``): a bool, or a mapping of partition id to bool.
        max_batch_size: Most events per batch.
        max_wait: Seconds a pull waits for the first event; with ``min_batch_size``, also the longest a batch
            waits to fill, counted from its first event.
        min_batch_size: Batches users shape: a partition's batch is delivered once it holds this many events,
            or ``max_wait`` seconds after its first event, whichever comes first (the Functions extension's
            ``MinEventBatchSize``/``MaxWaitTime``); checkpointed after the work as any batch. A partial batch
            held when the partition closes is dropped undelivered and read again by the next owner from the
            checkpoint. None: what each pull finds (see ``docs/operations.md``, shaped batches).
        prefetch: Events the transport may buffer ahead.
        max_inflight: Most unacknowledged batches per partition.
        owner_level: Owner level (epoch) of the receivers; None for non-exclusive receivers.
        emit_empty: Emit an empty batch when ``max_wait`` passes with no events (time-driven pipelines).
        track_last_enqueued_event_properties: Batches carry the partition's newest event
            (:attr:`~rxhubs.EventBatch.last_enqueued`, for lag); None keeps the hub's setting.
        scheduler: Scheduler to run on (default: the one given at subscribe time, else the running loop's).
        on_partition_initialize: Called with the context when a partition is gained.
        on_partition_close: Called with the context and the reason when a partition stream ends.
        on_partition_error: Called with the context and the error when a partition's reader fails; the other
            partitions go on, and the failed one is claimed again later.
        positions: A table that keeps each partition's position with its rows (a
            :class:`~rxhubs.operators.TransactionalSink`, used with :func:`rxhubs.operators.exactly_once`): a
            partition gained is read right after the table's position, which wins over the checkpoint (the
            checkpoint is used where the table has none; ``start`` is refused with it). See ``docs/exactly-once.md``.
        checkpoint_out_of_range: A checkpoint after the partition's last event (a recreated hub) or before its
            first retained one, found beside the first reads of a partition claimed: logged at WARNING and read
            from the first retained event (``"earliest"``, the default), from the end (``"latest"``), or the
            partition stopped with :class:`~rxhubs.errors.CheckpointOutOfRangeError` (``"fail"``); None: no
            check. See ``docs/operations.md``.
        seed_checkpoint: A partition claimed without a checkpoint gets one at once, where ``default_start``
            lands, before it is read (so KEDA's scaler does not count a new group's whole retention).
        backfill: The hub's Event Hubs Capture files (:class:`rxhubs.sources.Capture`): a partition whose start
            (checkpoint, ``default_start`` or ``start``) lies before what the hub retains is read from the files
            first, then from the hub at the next sequence number; no gap, no repeat (``docs/history.md``).

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
    if not isinstance(hub, Hub):
        raise ConfigurationError(f"hub must implement rxhubs.Hub (receiver(...) and more), got {type(hub).__name__}")
    settings = ConsumerSettings(
        owner_id or default_owner_id(),
        strategy,
        load_balancing_interval,
        ownership_expiration,
        default_start,
        start,
        max_batch_size,
        max_wait,
        prefetch,
        max_inflight,
        owner_level,
        emit_empty,
        track_last_enqueued_event_properties,
        start_inclusive,
        store_timeout,
        checkpoint_out_of_range,
        seed_checkpoint,
        min_batch_size,
    )
    hooks = Hooks(on_partition_initialize, on_partition_close, on_partition_error)
    if backfill is not None:
        if not isinstance(backfill, Capture):
            raise ConfigurationError(f"backfill must be an rxhubs.sources.Capture, got {type(backfill).__name__}")
        hub = BackfillHub(hub, backfill)
    checked_store = _as_store(store)
    warn_keda_case(hub.fully_qualified_namespace, hub.eventhub_name, checked_store)
    if positions is not None:
        if start is not None:
            raise ConfigurationError("start= and positions= do not combine: the table's position decides where"
                                     " reading resumes (to read again, use a new table)")
        checked_store = with_table_positions(checked_store, positions)

    def subscribe(
        observer: abc.ObserverBase[PartitionStream], sched: abc.SchedulerBase | None = None
    ) -> abc.DisposableBase:
        try:
            resolved = pipeline_scheduler(scheduler or sched, "partitions()")
        except ConfigurationError as exc:
            observer.on_error(exc)
            return Disposable()
        consumer = Consumer(observer, resolved, hub, consumer_group, checked_store, settings, hooks)
        consumer.start()
        return Disposable(consumer.dispose)

    return reactivex.create(subscribe)


def _as_store(store: StoreLike) -> CheckpointStore:
    """Accept an rxhubs store, or one written for the Azure SDK's ``CheckpointStore`` interface."""
    if store is None:
        raise ConfigurationError("store is required: e.g. rxhubs.stores.SqliteCheckpointStore('checkpoints.db')")
    return as_checkpoint_store(store)


def consume(
    hub: Hub,
    consumer_group: str,
    store: StoreLike,
    *,
    pipeline: PartitionPipeline | None = None,
    **options: Unpack[ConsumerOptions],
) -> Observable[EventBatch]:
    """The batches of every partition this consumer owns, merged: :func:`partitions` flattened.

    Takes the same keyword options as :func:`partitions`. Batches of one partition arrive in order;
    partitions proceed concurrently. Put :func:`rxhubs.operators.checkpoint` after the work that must
    succeed first.

    **Isolated per-partition pipelines.** With ``pipeline``, each partition's stream goes through its own
    ``pipeline(stream)`` before the merge, and an error raised anywhere in it (a plain ``ops.map`` over a
    malformed event included) stops that partition only: ``on_partition_error`` is called (operation
    ``"process"``), its checkpoints flush, it is released and read again from its checkpoint after a backoff;
    the other partitions go on. Without it, an error in an operator after the merge ends the whole pipeline
    (that is Rx), after every partition flushed and was released.

    Marble diagram (partitions ``0`` and ``1`` owned)::

        partition 0:  -a---c----|
        partition 1:  --b----d--|
        consume:      -ab--c-d--|

    Args:
        hub: The hub.
        consumer_group: The consumer group.
        store: The checkpoint store shared by the consumers.
        pipeline: Applied to each partition's stream before the merge, with its failures kept to it.
        **options: Keyword options of :func:`partitions`.

    Returns:
        An Observable of :class:`~rxhubs.EventBatch` (what the pipelines emit, with ``pipeline``).

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
    streams = partitions(hub, consumer_group, store, **options)
    if pipeline is None:
        return streams.pipe(ops.merge_all())
    if not callable(pipeline):
        raise ConfigurationError(f"pipeline must be a function of a partition stream, got {type(pipeline).__name__}")
    def each(stream: PartitionStream) -> Observable[EventBatch]:
        return isolated(stream, pipeline)

    return streams.pipe(ops.map(each), ops.merge_all())


def isolated(stream: PartitionStream, pipeline: PartitionPipeline) -> Observable[EventBatch]:
    """``pipeline(stream)``, with an error stopping only this partition (it completes instead)."""

    def failed(error: Exception, _: Observable[EventBatch]) -> Observable[EventBatch]:
        stream.session.fail("process", error)
        return reactivex.empty()

    try:
        piped = pipeline(stream)
    except Exception as exc:
        return failed(exc, reactivex.empty())
    return piped.pipe(ops.catch(failed))
