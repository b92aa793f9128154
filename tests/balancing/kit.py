"""A virtual-time harness for consumer groups: several consumers, one in-memory hub, one in-memory store.

Every consumer is a real :func:`rxhubs.partitions` subscription on a shared ``TestScheduler``. Its pipeline
per partition is ``stream -> work (takes `work` seconds per batch) -> hops.checkpoint(store)``, and the
ledger records, for every event, who processed it and when the processing started and finished.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import reactivex
from reactivex import Observable, abc
from reactivex import operators as ops
from reactivex.testing import TestScheduler

import rxhubs
from rxhubs import Checkpoint, CloseReason, EventBatch, Ownership, PartitionStream
from rxhubs import operators as hops
from rxhubs._rx import never, sleep
from rxhubs.stores import CheckpointStore, InMemoryCheckpointStore
from rxhubs.testing import InMemoryEventHub

GROUP = "$Default"
T = TypeVar("T")


class ProxyStore(CheckpointStore):
    """The in-memory store behind a switch: ``latency`` seconds per call, or no answer at all (``silent``).

    Fenced like the store it wraps (``fence``, ``update_checkpoint_fenced``).

    Its verbs wait on the kernel's clock, so latency and silence count in the test's virtual time.
    """

    def __init__(self, store: InMemoryCheckpointStore, scheduler: TestScheduler, latency: float = 0.0) -> None:
        self.inner = store
        self.scheduler = scheduler
        self.latency = latency
        self.silent = False
        self.calls: list[tuple[float, str]] = []
        self.writes: list[tuple[float, str, int]] = []
        #: Every ownership record sent to ``claim_ownership``: (time, partition id, owner id).
        self.claimed: list[tuple[float, str, str]] = []
        self.in_flight: dict[str, int] = {}
        self.max_in_flight: dict[str, int] = {}

    async def _wrap(self, verb: str, call: Callable[[], Awaitable[T]], key: str = "") -> T:
        self.calls.append((self.scheduler.clock, verb))
        if self.silent:
            await never()
        self.in_flight[key] = self.in_flight.get(key, 0) + 1
        self.max_in_flight[key] = max(self.max_in_flight.get(key, 0), self.in_flight[key])
        try:
            if self.latency:
                await sleep(self.latency)
        finally:
            self.in_flight[key] -= 1
        if self.silent:
            await never()
        return await call()

    async def list_ownership(self, *args: Any) -> list[Ownership]:
        return await self._wrap("list_ownership", lambda: self.inner.list_ownership(*args))

    async def claim_ownership(self, claims: Iterable[Ownership]) -> list[Ownership]:
        claims = list(claims)
        self.claimed += [(self.scheduler.clock, c.partition_id, c.owner_id) for c in claims]
        return await self._wrap("claim_ownership", lambda: self.inner.claim_ownership(claims))

    async def list_checkpoints(self, *args: Any) -> list[Checkpoint]:
        return await self._wrap("list_checkpoints", lambda: self.inner.list_checkpoints(*args))

    async def update_checkpoint(self, checkpoint: Checkpoint) -> None:
        self.writes.append((self.scheduler.clock, checkpoint.partition_id, checkpoint.sequence_number))
        await self._wrap("update_checkpoint", lambda: self.inner.update_checkpoint(checkpoint), checkpoint.partition_id)

    async def fence(self, ownership: Ownership) -> Checkpoint | None:
        return await self._wrap("fence", lambda: self.inner.fence(ownership))

    async def update_checkpoint_fenced(self, checkpoint: Checkpoint, ownership: Ownership) -> None:
        self.writes.append((self.scheduler.clock, checkpoint.partition_id, checkpoint.sequence_number))
        await self._wrap(
            "update_checkpoint",
            lambda: self.inner.update_checkpoint_fenced(checkpoint, ownership),
            checkpoint.partition_id,
        )


class UnfencedProxyStore(ProxyStore):
    """A :class:`ProxyStore` without the fencing verbs (as a store written for the SDK): not fenced."""

    fence = None  # type: ignore[assignment]
    update_checkpoint_fenced = None  # type: ignore[assignment]


@dataclass
class Processed:
    owner: str
    partition_id: str
    sequence_number: int
    started: float
    finished: float


def work(
    scheduler: TestScheduler, seconds: float, on_done: Callable[[EventBatch, float], None]
) -> Callable[[Observable[EventBatch]], Observable[EventBatch]]:
    """Operator: each batch takes ``seconds`` (held, so the source counts it in flight), then goes on."""

    def operator(source: Observable[EventBatch]) -> Observable[EventBatch]:
        if seconds == 0:
            return source.pipe(ops.do_action(lambda b: on_done(b, scheduler.clock)))

        def subscribe(
            observer: abc.ObserverBase[EventBatch], sched: abc.SchedulerBase | None = None
        ) -> abc.DisposableBase:
            pending = 0
            completed = False

            def on_next(batch: EventBatch) -> None:
                nonlocal pending
                ack = batch.hold()
                started = scheduler.clock
                pending += 1

                def done(*_: Any) -> None:
                    nonlocal pending
                    on_done(batch, started)
                    observer.on_next(batch)
                    ack()
                    pending -= 1
                    if completed and pending == 0:
                        observer.on_completed()

                scheduler.schedule_relative(seconds, done)

            def on_completed() -> None:
                nonlocal completed
                completed = True
                if pending == 0:
                    observer.on_completed()

            return source.subscribe(on_next, observer.on_error, on_completed, scheduler=sched)

        return reactivex.create(subscribe)

    return operator


@dataclass
class Consumer:
    group: Group
    name: str
    options: dict[str, Any]
    store: ProxyStore
    streams: dict[str, PartitionStream] = field(default_factory=dict)
    closed: list[tuple[float, str, CloseReason | None]] = field(default_factory=list)
    errors: list[tuple[str, Exception]] = field(default_factory=list)
    completed: bool = False
    dead: bool = False
    subscription: abc.DisposableBase | None = None

    def start(self) -> None:
        g = self.group
        options = {
            "owner_id": self.name,
            "load_balancing_interval": g.interval,
            "ownership_expiration": g.expiry,
            "max_wait": 1.0,
            "on_partition_error": lambda ctx, exc: self.errors.append((ctx.partition_id, exc)),
            **self.options,
        }
        source = rxhubs.partitions(g.hub, GROUP, self.store, **options)
        self.subscription = source.subscribe(self._on_stream, on_completed=self._on_completed, scheduler=g.scheduler)

    def _on_completed(self) -> None:
        self.completed = True

    def _on_stream(self, stream: PartitionStream) -> None:
        g = self.group
        self.streams[stream.partition_id] = stream

        def processed(batch: EventBatch, started: float) -> None:
            if self.dead:
                return
            for event in batch:
                g.ledger.append(
                    Processed(self.name, batch.partition_id, event.sequence_number, started, g.scheduler.clock)
                )

        def closed() -> None:
            self.closed.append((g.scheduler.clock, stream.partition_id, stream.close_reason))
            if self.streams.get(stream.partition_id) is stream:
                del self.streams[stream.partition_id]

        stream.pipe(
            work(g.scheduler, g.work, processed),
            hops.checkpoint(self.store, max_interval=g.checkpoint_interval),
        ).subscribe(
            on_completed=closed, on_error=lambda e: self.errors.append((stream.partition_id, e)), scheduler=g.scheduler
        )

    @property
    def owned(self) -> set[str]:
        return set(self.streams)

    def leave(self) -> None:
        assert self.subscription is not None
        self.subscription.dispose()

    def crash(self) -> None:
        """The process dies: nothing more reaches the store, nothing more is processed or released."""
        self.dead = True
        self.store.silent = True
        assert self.subscription is not None
        self.subscription.dispose()


class Group:
    """A consumer group in virtual time. Consumers are added with :meth:`add` and started at a time."""

    def __init__(
        self,
        partitions: int = 4,
        *,
        interval: float = 10.0,
        expiry: float = 30.0,
        work: float = 0.0,
        checkpoint_interval: float = 5.0,
        latency: float = 0.0,
        fenced: bool = True,
        resolution: float = 0.0,
    ) -> None:
        self.scheduler = TestScheduler()
        self.fenced, self.resolution = fenced, resolution
        self.hub = InMemoryEventHub(partitions, clock=lambda: self.scheduler.now)
        self.store = InMemoryCheckpointStore()
        self.interval, self.expiry, self.work = interval, expiry, work
        self.checkpoint_interval = checkpoint_interval
        self.latency = latency
        self.consumers: dict[str, Consumer] = {}
        self.ledger: list[Processed] = []
        self.sent: dict[str, int] = {}

    def add(self, name: str, at: float = 0.0, **options: Any) -> Consumer:
        proxy = (ProxyStore if self.fenced else UnfencedProxyStore)(self.store, self.scheduler, self.latency)
        if self.resolution:
            proxy.timestamp_resolution = self.resolution  # type: ignore[attr-defined]
        consumer = Consumer(self, name, options, proxy)
        self.consumers[name] = consumer
        self.at(at, consumer.start)
        return consumer

    def at(self, time: float, action: Callable[[], Any]) -> None:
        self.scheduler.schedule_absolute(time, lambda *_: action())

    def run(self, until: float) -> None:
        self.scheduler.advance_to(until)

    def traffic(self, start: float, end: float, every: float = 0.5, per_partition: int = 1) -> None:
        """Send ``per_partition`` events to every partition each ``every`` seconds from ``start`` to ``end``."""
        t = start
        while t < end:

            def send(*_: Any) -> None:
                for pid in self.hub.partition_ids:
                    self.hub.send([b"x"] * per_partition, partition_id=pid)
                    self.sent[pid] = self.sent.get(pid, 0) + per_partition

            self.scheduler.schedule_absolute(t, send)
            t += every

    # -- observations --------------------------------------------------------------------------------------
    def counts(self) -> dict[str, int]:
        return {name: len(c.owned) for name, c in self.consumers.items() if not c.dead}

    def store_owners(self) -> dict[str, str]:
        hub = self.hub
        records = self.store.observe_list_ownership(hub.fully_qualified_namespace, hub.eventhub_name, GROUP).run()
        return {r.partition_id: r.owner_id for r in records}

    def checkpoints(self) -> dict[str, int]:
        hub = self.hub
        records = self.store.observe_list_checkpoints(hub.fully_qualified_namespace, hub.eventhub_name, GROUP).run()
        return {c.partition_id: c.sequence_number for c in records}

    def missing(self) -> list[tuple[str, int]]:
        """Events sent but never processed by anyone."""
        seen = {(p.partition_id, p.sequence_number) for p in self.ledger}
        return [(pid, seq) for pid, n in self.sent.items() for seq in range(n) if (pid, seq) not in seen]

    def duplicates(self) -> list[tuple[str, int]]:
        """Events processed more than once."""
        counts: dict[tuple[str, int], int] = {}
        for p in self.ledger:
            counts[(p.partition_id, p.sequence_number)] = counts.get((p.partition_id, p.sequence_number), 0) + 1
        return sorted(k for k, n in counts.items() if n > 1)

    def overlaps(self) -> list[tuple[str, int]]:
        """Events processed by two owners at the same time."""
        by_event: dict[tuple[str, int], list[Processed]] = {}
        for p in self.ledger:
            by_event.setdefault((p.partition_id, p.sequence_number), []).append(p)
        found = []
        for key, runs in by_event.items():
            for i, a in enumerate(runs):
                for b in runs[i + 1 :]:
                    if a.owner != b.owner and a.started < b.finished and b.started < a.finished:
                        found.append(key)
        return found

    def readers_per_partition(self) -> dict[str, list[str]]:
        readers: dict[str, list[str]] = {}
        for name, c in self.consumers.items():
            if c.dead:
                continue
            for pid in c.owned:
                readers.setdefault(pid, []).append(name)
        return readers
