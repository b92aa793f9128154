"""``hops.publish``: events to another hub, each batch passed on once all it made was acknowledged."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from reactivex import Observable, abc

from rxhubs._batch import EventBatch
from rxhubs._models import Event
from rxhubs._retry import Backoff, is_retriable
from rxhubs._rx._driver import current_stepper
from rxhubs.errors import ConfigurationError, PublishError
from rxhubs.operators._base import stateful_operator
from rxhubs.operators._processor import PoisonHandler, Processor, sequence_span
from rxhubs.operators._publish_columns import ColumnGroups, add_columns, as_columns, outgoing
from rxhubs.transport._publisher import OutgoingEvent, Publisher, check_routing

__all__ = ["OutgoingEvent", "Publisher", "as_publisher", "publish", "send_grouped"]

#: Most sends of one batch in flight at once (one per distinct partition key or id).
MAX_SENDS = 32

#: Seconds a send through an Azure target waits before it takes its lane's queued batches (more per send).
LINGER = 0.02

Route = tuple[str | None, str | None]  # (partition_id, partition_key)
Groups = dict[Route, list[OutgoingEvent]]  # events by routing, each list in source order
SendGroups = Mapping[Route, Sequence[OutgoingEvent]]  # the same, or columns (an rxhubs.EventHub target)


def as_publisher(target: Any) -> Publisher:
    """The :class:`Publisher` for a target: itself, or an azure-eventhub aio producer wrapped.

    Raises:
        ConfigurationError: Anything else (a sync producer, a hub name, None).

    Example:
        >>> import rxhubs
        >>> hub = rxhubs.testing.InMemoryEventHub(partition_count=2)
        >>> as_publisher(hub) is hub
        True
    """
    module = type(target).__module__
    if module.startswith("azure.eventhub"):
        if module.startswith("azure.eventhub.aio") and type(target).__name__ == "EventHubProducerClient":
            from rxhubs.transport._producer import ProducerPublisher

            return ProducerPublisher(target)
        raise ConfigurationError(
            f"publish needs an async producer (azure.eventhub.aio.EventHubProducerClient), got {module}."
            f"{type(target).__name__}"
        )
    method = getattr(target, "publish", None)
    if method is None or not inspect.iscoroutinefunction(method):
        raise ConfigurationError(
            f"the publish target must be an rxhubs.EventHub, an InMemoryEventHub, an azure.eventhub.aio"
            f" EventHubProducerClient or have an async publish(events, *, partition_id, partition_key) method;"
            f" got {type(target).__name__}"
        )
    return target  # type: ignore[no-any-return]


def target_name(target: Any) -> str:
    """The target's hub name for messages (its repr if it has none)."""
    return str(getattr(target, "eventhub_name", None) or repr(target))


async def send_grouped(target: Publisher, groups: SendGroups) -> None:
    """Send each group with its routing, each in order; groups concurrently under asyncio, in turn in virtual time.

    Every group is finished (sent or failed) before this returns or raises the first failure.
    """
    if current_stepper() is not None or len(groups) == 1:  # virtual time is deterministic: one after another
        for (pid, key), events in groups.items():
            await target.publish(events, partition_id=pid, partition_key=key)
        return
    limit = asyncio.Semaphore(MAX_SENDS)

    async def one(route: Route, events: Sequence[OutgoingEvent]) -> None:
        async with limit:
            await target.publish(events, partition_id=route[0], partition_key=route[1])

    results = await asyncio.gather(*(one(r, e) for r, e in groups.items()), return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result


def _option(value: Any, name: str, kinds: tuple[type, ...]) -> Callable[[Event], Any] | None:
    if value is None or callable(value):
        return value  # type: ignore[no-any-return]
    if not isinstance(value, kinds):
        raise ConfigurationError(f"{name} must be a {' or '.join(k.__name__ for k in kinds)}, a function or None")
    return lambda _event: value


class _Publish:
    """Builds each batch's outgoing events and sends them: the work ``hops.process``'s machinery runs."""

    def __init__(
        self,
        target: Publisher,
        body: Callable[[Event], Any] | None,
        partition_key: Callable[[Event], Any] | None,
        partition_id: Callable[[Event], Any] | None,
        properties: Callable[[Event], Any] | None,
    ) -> None:
        self.target = target
        self.name = target_name(target)
        self.body = body
        self.properties = properties
        self.partition_id = partition_id
        if partition_key is None and partition_id is None:
            self.partition_key: Callable[[Event], Any] | None = _own_key
        else:
            self.partition_key = partition_key
        # azure-eventhub's producer sends one batch at a time unless a partition id is given (a lock held for
        # the whole send): a lane lingers a moment, waits its turn, then takes every batch queued by then. The
        # native send path has several sends in flight on a link: once it sends, the lanes no longer wait.
        native = type(target).__module__.startswith("rxhubs.transport")
        self.gate: _Gate | None = _Gate(target) if native and partition_id is None else None
        # an rxhubs.EventHub's sends take columns (its native path encodes them without an object per event)
        self.columns = native and getattr(target, "_senders", None) is not None

    def groups(self, batch: EventBatch, groups: Groups) -> Groups:
        """Add ``batch``'s outgoing events to ``groups``, by routing."""
        for route, body, props in outgoing(batch, self.body, self.partition_key, self.partition_id, self.properties):
            groups.setdefault(route, []).append(OutgoingEvent(body, props or {}))  # (a mapping of its own)
        return groups

    async def __call__(self, batch: EventBatch) -> None:
        await self.send([batch])

    def column_groups(self, batches: list[EventBatch]) -> SendGroups:
        columns: ColumnGroups = {}
        for batch in batches:
            add_columns(batch, columns, self.body, self.partition_key, self.partition_id, self.properties, _own_key)
        return {route: as_columns(*group) for route, group in columns.items()}

    async def send(self, batches: list[EventBatch]) -> None:
        """Publish the events of ``batches`` (consecutive, of one partition), routing by routing, in order."""
        groups: SendGroups
        if self.columns:
            groups = self.column_groups(batches)
        else:
            lists: Groups = {}
            for batch in batches:
                self.groups(batch, lists)
            groups = lists
        if not groups:
            return
        try:
            await send_grouped(self.target, groups)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            count = sum(len(g) for g in groups.values())
            first, last = batches[0], batches[-1]
            span = (
                sequence_span(first) if len(batches) == 1
                else f"{first.first_sequence_number}..{last.last_sequence_number}"
            )
            raise PublishError(
                f"partition {first.partition_id}: publishing {count} events (source events {span}) to"
                f" {self.name!r} failed: {exc}",
                partition_id=first.partition_id,
                target=self.name,
                retriable=is_retriable(exc),
            ) from exc


class _Gate:
    """One send at a time, each after a short linger (its lane gathers more batches meanwhile).

    Open (no linger, no turn) once the target sends natively (``rxhubs.EventHub``'s native send path, several
    sends in flight per link): each lane then sends what queued behind its previous send as soon as that was
    acknowledged, all lanes at once. A lane still has one send in flight, so its order and its failures are
    as before. The lanes that queued for the turn behind the first send (the one that finds out) go in together
    once it found the native path, not one after another.
    """

    def __init__(self, target: Any = None) -> None:
        self.lock = asyncio.Lock()
        self.senders = getattr(target, "_senders", None)
        self.holder: object = None  # the task that holds the turn

    def open(self) -> bool:
        """True while the target's sends are native (its first send finds out; until then, the gate holds)."""
        return bool(getattr(self.senders, "native", False)) and getattr(self.senders, "_off", 1) is None

    async def __aenter__(self) -> None:
        if self.open():
            return
        await asyncio.sleep(LINGER)
        await self.lock.acquire()
        if self.open():  # the send ahead found the native path: the lanes queued behind it go together, not in turn
            self.lock.release()
            return
        self.holder = asyncio.current_task()

    async def __aexit__(self, *_: object) -> None:
        if self.holder is not None and self.holder is asyncio.current_task():  # (a lane that found it open holds none)
            self.holder = None
            self.lock.release()


def _own_key(event: Event) -> str | None:
    return event.partition_key


def publish(
    target: Any,
    *,
    body: Callable[[Event], bytes | str | None] | None = None,
    partition_key: str | Callable[[Event], str | None] | None = None,
    partition_id: str | Callable[[Event], str | None] | None = None,
    properties: Mapping[str, Any] | Callable[[Event], Mapping[str, Any]] | None = None,
    retry: Backoff | None = None,
    on_poison: PoisonHandler | None = None,
    scheduler: abc.SchedulerBase | None = None,
) -> Callable[[Observable[EventBatch]], Observable[EventBatch]]:
    """Publish every batch's events to another hub; pass each batch on once the target acknowledged them all.

    The consume-transform-publish shape (Alpakka Kafka's ``Producer.flexiFlow``): put :func:`checkpoint`
    after it and a checkpoint never covers an event before what was made of it was stored by the target, so
    the pipeline is at-least-once end to end (a replay after a crash publishes again: duplicates, never loss).

    **What is sent.** For each source event, ``body(event)`` (default: its body; ``None`` drops the event) with
    ``properties`` (default: the source event's application properties), routed by ``partition_id`` or
    ``partition_key`` (a value, or a function of the source event). By default an event keeps its source
    partition key, so keyed events land in the key's partition; events without a key go where the service
    puts them (round robin per send). Events of one batch with the same routing go in one send, in as few
    service batches as fit the target's maximum message size; sends of different routings are issued together.

    **Order, backpressure.** Batches of one source partition are published one send at a time, in order (those
    that queued behind a send go out together in the next), so events with the same key (or partition id)
    reach the target in their source order. Partitions send at once on ``rxhubs.EventHub``'s native send path;
    where its link sends one batch at a time (``send_batch``: no compiled encoder) a partition's send without
    ``partition_id`` waits 20 ms and its turn, then takes all that queued by then.
    Each batch is held (its lease) until its events were acknowledged: a slow target slows the source, and
    ``max_inflight`` bounds memory.

    **Failures.** The target retries as it is configured to (``rxhubs.EventHub``'s ``retry_total``, the SDK
    producer's own); then, after ``retry`` (default: none), the batch is poison: with ``on_poison``
    (e.g. :func:`dead_letter`) it is handed over and moves on; without, a
    :class:`~rxhubs.errors.PublishError` naming the source partition stops that partition only (reported to
    ``on_partition_error`` with the operation ``"publish"``; it is read again from its checkpoint later, the
    other partitions go on), or, for a source without balancing, errors the stream. An error raised by
    ``body``, ``properties`` or a routing function takes the same path, unwrapped.

    Marble diagram (``a``..``c`` batches of one partition; the target acknowledges a send 3 s after it)::

        batches:   -a-b-c-----
        sent:      -a--b--c---     (b waits until a was acknowledged, c until b was)
        publish:   ----a--b--c     (each batch once its events are stored)

    Args:
        target: An ``rxhubs.EventHub``, an ``rxhubs.testing.InMemoryEventHub``, an ``azure.eventhub.aio``
            ``EventHubProducerClient`` (it stays yours to close), or any :class:`Publisher`.
        body: Makes the outgoing body (bytes or str) from a source event; None drops the event.
        partition_key: A key, or a function of the source event (default: the source event's own key).
        partition_id: A target partition, or a function of the source event (default: none; see above).
        properties: Application properties, or a function of the source event (default: the source's).
        retry: Retries of a failed batch on top of the target's own (default: none).
        on_poison: Called with a batch that could not be published and the error; then the batch moves on.
        scheduler: Scheduler for the sends (default: the one given at subscribe time).

    Returns:
        An operator ``Observable[EventBatch] -> Observable[EventBatch]``.

    Raises:
        ConfigurationError: At call time, for an unusable target or invalid options.

    Example:
        >>> import rxhubs
        >>> from rxhubs import operators as hops
        >>> from reactivex.testing import TestScheduler
        >>> source, target = rxhubs.testing.InMemoryEventHub(2), rxhubs.testing.InMemoryEventHub(2)
        >>> _ = source.send([b"a", b"b"], partition_key="device-7")
        >>> store, scheduler = rxhubs.stores.InMemoryCheckpointStore(), TestScheduler()
        >>> _ = rxhubs.consume(source, "$Default", store).pipe(
        ...     hops.publish(target, body=lambda e: e.body.upper()), hops.checkpoint(store)
        ... ).subscribe(scheduler=scheduler)
        >>> scheduler.advance_to(1.0)
        >>> [(e.body, e.partition_key) for p in target.partition_ids for e in target.events(p)]
        [(b'A', 'device-7'), (b'B', 'device-7')]
    """
    publisher = as_publisher(target)
    if body is not None and not callable(body):
        raise ConfigurationError(f"body must be a function of the source event or None, got {type(body).__name__}")
    make_body = body
    make_key = _option(partition_key, "partition_key", (str,))
    make_id = _option(partition_id, "partition_id", (str,))
    make_props = _option(properties, "properties", (Mapping,))
    if isinstance(partition_key, str) or isinstance(partition_id, str):
        check_routing(partition_id if isinstance(partition_id, str) else None,
                      partition_key if isinstance(partition_key, str) else None)
    if retry is not None and not isinstance(retry, Backoff):
        raise ConfigurationError(f"retry must be an rxhubs.Backoff, got {type(retry).__name__}")
    if on_poison is not None and not callable(on_poison):
        raise ConfigurationError(f"on_poison must be callable, got {type(on_poison).__name__}")
    work = _Publish(publisher, make_body, make_key, make_id, make_props)
    backoff = retry or Backoff(max_retries=0)

    return stateful_operator("publish()", scheduler, lambda observer, resolved: Processor(
        observer, resolved, work, 1, backoff, on_poison, False, operation="publish", group=work.send,
        gate=work.gate,
    ))
