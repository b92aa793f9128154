"""One partition as an Observable of event batches, pulled from a receiver with backpressure.

The source pulls a batch, emits it, and pulls the next only when fewer than ``max_inflight`` of its
batches are still held downstream. A batch is held from ``on_next`` until every operator that called
:meth:`EventBatch.hold` acknowledged it; a synchronous pipeline holds nothing, so the next pull starts
only once ``on_next`` returned: the batch before it has been handled. Memory therefore stays bounded by
``max_inflight x max_batch_size`` events per partition, whatever the pipeline does (plus, with
``min_batch_size``, the at most ``max_batch_size`` events of the batch being filled: ``_shape``).

Resuming: after a retriable error the receiver is closed and reopened exactly after the last event
emitted (exclusive sequence-number position), so there is no gap and no duplicate; events at or below
that sequence number are dropped should a transport replay them. This module is the Observable and its
options; the state machine behind one subscription is :class:`~rxhubs.sources._pump.Pump`.
"""

from __future__ import annotations

from collections.abc import Callable

import reactivex
from reactivex import Observable, abc
from reactivex.disposable import Disposable

from rxhubs._batch import EventBatch
from rxhubs._models import Position
from rxhubs._retry import Backoff
from rxhubs.errors import ConfigurationError
from rxhubs.sources._pump import Pump
from rxhubs.sources._settings import DEFAULT_READ, ReadSettings
from rxhubs.transport._base import DEFAULT_CONSUMER_GROUP, Hub, PartitionReceiver

__all__ = ["partition_batches"]


def partition_batches(
    hub: Hub,
    partition_id: str,
    *,
    consumer_group: str = DEFAULT_CONSUMER_GROUP,
    start: Position | None = None,
    owner_level: int | None = None,
    prefetch: int = DEFAULT_READ.prefetch,
    max_batch_size: int = DEFAULT_READ.max_batch_size,
    max_wait: float = DEFAULT_READ.max_wait,
    max_inflight: int = DEFAULT_READ.max_inflight,
    emit_empty: bool = False,
    track_last_enqueued_event_properties: bool | None = None,
    min_batch_size: int | None = None,
    retry: Backoff | None = None,
    scheduler: abc.SchedulerBase | None = None,
    on_closed: Callable[[PartitionReceiver], None] | None = None,
    on_retry: Callable[[Exception], None] | None = None,
) -> Observable[EventBatch]:
    """An Observable of the batches of one partition, read from ``start``, in order, with backpressure.

    Each subscription opens its own receiver on its first pull and closes it when the stream ends or is
    disposed. It completes when a graceful stop is requested (:func:`rxhubs.run` on Ctrl-C), after the
    batches in flight were acknowledged; it errors with a typed error when a non-retriable error occurs
    (:class:`~rxhubs.errors.OwnershipLostError` when a reader with a higher owner level takes over) or
    retries run out.

    Marble diagram (``max_inflight=1``; ``a``, ``b`` batches; the source waits for each to be handled)::

        partition:  --1-2-3----4--|
        batches:    --a----b----c--
                      a = [1]   b = [2, 3]   c = [4]

    Args:
        hub: The hub (``rxhubs.EventHub`` or ``rxhubs.testing.InMemoryEventHub``).
        partition_id: The partition to read.
        consumer_group: The consumer group.
        start: Where to start (default: earliest).
        owner_level: Owner level (epoch) for an exclusive receiver.
        prefetch: Events the transport may buffer ahead.
        max_batch_size: Most events per batch.
        max_wait: Seconds a pull waits for the first event before returning (an empty batch, if wanted); with
            ``min_batch_size``, also the longest a batch waits to fill, counted from its first event.
        max_inflight: Most batches emitted but not yet acknowledged.
        emit_empty: Emit empty batches after ``max_wait`` with no events (heartbeats).
        track_last_enqueued_event_properties: Batches carry the partition's newest event (``last_enqueued``);
            None keeps the hub's setting.
        min_batch_size: Deliver a batch once it holds this many events, or ``max_wait`` seconds after its first
            event arrived, whichever comes first (the Functions extension's ``MinEventBatchSize`` and
            ``MaxWaitTime``). A partial batch held when the stream ends is dropped undelivered: the next reader
            reads it from the checkpoint. None (or 1): each pull hands out what is there.
        retry: Backoff for retriable errors (default :class:`Backoff()`).
        scheduler: Scheduler to run on (default: the one given at subscribe time).
        on_closed: Called with the receiver after it was closed.
        on_retry: Called with every error that is retried (the stream goes on after a backoff).

    Returns:
        An Observable of :class:`~rxhubs.EventBatch`.

    Raises:
        ConfigurationError: At call time, for invalid options.

    Example:
        >>> from rxhubs.testing import InMemoryEventHub
        >>> from reactivex.testing import TestScheduler
        >>> hub = InMemoryEventHub(partition_count=1)
        >>> _ = hub.send([b"a", b"b", b"c"], partition_id="0")
        >>> seen = []
        >>> scheduler = TestScheduler()
        >>> _ = partition_batches(hub, "0", max_batch_size=2).subscribe(
        ...     lambda b: seen.append([e.body for e in b]), scheduler=scheduler)
        >>> scheduler.advance_by(1.0)
        >>> seen
        [[b'a', b'b'], [b'c']]

        Shaped batches: three events, or five seconds after the first of a batch:

        >>> hub, seen, scheduler = InMemoryEventHub(partition_count=1), [], TestScheduler()
        >>> _ = partition_batches(hub, "0", min_batch_size=3, max_wait=5.0).subscribe(
        ...     lambda b: seen.append((scheduler.clock, [e.body for e in b])), scheduler=scheduler)
        >>> for at, body in [(1.0, b"a"), (2.0, b"b"), (3.0, b"c"), (4.0, b"d")]:
        ...     _ = scheduler.schedule_absolute(at, lambda *_, body=body: hub.send([body], partition_id="0"))
        >>> scheduler.advance_to(20.0)
        >>> seen
        [(3.0, [b'a', b'b', b'c']), (9.0, [b'd'])]
    """
    settings = ReadSettings(
        max_batch_size, max_wait, max_inflight, prefetch, owner_level, emit_empty, track_last_enqueued_event_properties,
        min_batch_size,
    )
    if not isinstance(partition_id, str) or not partition_id:
        raise ConfigurationError(f"partition_id must be a non-empty str, got {partition_id!r}")
    if start is not None and not isinstance(start, Position):
        raise ConfigurationError(f"start must be an rxhubs.Position, got {type(start).__name__}")
    if not isinstance(hub, Hub):
        raise ConfigurationError(f"hub must implement rxhubs.Hub (receiver(...) and more), got {type(hub).__name__}")

    def subscribe(observer: abc.ObserverBase[EventBatch], sched: abc.SchedulerBase | None = None) -> abc.DisposableBase:
        pump = Pump(
            observer=observer,
            scheduler=scheduler or sched or reactivex.scheduler.CurrentThreadScheduler.singleton(),
            open_receiver=lambda position: _open(hub, partition_id, consumer_group, position, settings),
            start=start or Position.earliest(),
            settings=settings,
            retry=retry or Backoff(),
            on_closed=on_closed,
            on_retry=on_retry,
        )
        pump.start()
        return Disposable(pump.dispose)

    return reactivex.create(subscribe)


def _open(
    hub: Hub, partition_id: str, consumer_group: str, start: Position, settings: ReadSettings
) -> PartitionReceiver:
    track = settings.track_last_enqueued_event_properties
    if track is None:  # a hub written before the option existed keeps working
        return hub.receiver(
            partition_id, consumer_group, start=start, owner_level=settings.owner_level, prefetch=settings.prefetch
        )
    return hub.receiver(
        partition_id,
        consumer_group,
        start=start,
        owner_level=settings.owner_level,
        prefetch=settings.prefetch,
        track_last_enqueued_event_properties=track,
    )
