"""Marble diagrams for Event Hubs pipelines, in virtual time.

Describe each partition's traffic with a diagram, run the pipeline under a ``TestScheduler``, and compare
what it emitted with an expected diagram. The conventions are RxPY's (``reactivex.testing.marbles``):
one character is one ``timespan``; ``-`` is silence; consecutive characters form **one element**; ``(a,b)``
puts several elements at one instant; ``#`` is an error and ``|`` completion; spaces are ignored. Time 0
of every diagram is the moment the pipeline is subscribed (virtual time 200, as in ``marbles_testing``).

In a **traffic** diagram an element is sent to the partition at its time, one event per character
(``ab`` sends events ``a`` and ``b`` together) unless ``lookup`` maps it to a body or a list of bodies;
``#`` makes the partition's next pull fail with ``error`` (default: a retriable ``TransportError``).
In an **expected** diagram, a batch is shown as its events' bodies joined: ``symbols()`` maps batches to
that form, so a batch of events ``c`` and ``d`` is the element ``cd``.

Other consumers of the group are **peers** described by a diagram too: ``j`` joins (a real balancing
consumer subscribes), ``s`` stops gracefully (flush and release), ``x`` crashes (stops renewing without
releasing: its ownership must expire), ``p`` pauses and ``r`` resumes it (a SIGSTOP and SIGCONT in virtual
time: a paused former owner). Faults are values at marked times: ``#`` in a traffic diagram (a
receiver error), :meth:`MarbleTest.outage` (the store is down where the diagram has ``#``), and
:meth:`MarbleTest.sink` (a sink whose writes fail where its diagram has ``#``).

Example:
    >>> import rxhubs
    >>> from rxhubs.testing import marble_test, symbols
    >>> with marble_test() as t:
    ...     hub = t.hub({"0": "-a--bc---d"})
    ...     results = t.start(rxhubs.partition_batches(hub, "0").pipe(symbols()))
    ...     results == t.exp("-a--bc---d")
    True
"""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import reactivex
from reactivex import Observable
from reactivex import operators as ops
from reactivex.notification import OnError, OnNext
from reactivex.observable.marbles import parse
from reactivex.testing import ReactiveTest, TestScheduler
from reactivex.testing.recorded import Recorded

from rxhubs._batch import EventBatch
from rxhubs.errors import SinkError, TransportError
from rxhubs.stores._memory import InMemoryCheckpointStore
from rxhubs.testing._memory_hub import InMemoryEventHub
from rxhubs.testing._peer import Peer, PeerPipeline

__all__ = ["MarbleSink", "MarbleTest", "Peer", "marble_test", "symbols", "to_symbols"]


def _seconds(ticks: dt.timedelta | float) -> float:
    return ticks.total_seconds() if isinstance(ticks, dt.timedelta) else float(ticks)

CREATED = 100.0
SUBSCRIBED = 200.0
DISPOSED = 1000.0


def to_symbols(batch: EventBatch) -> str:
    """A batch as the bodies of its events joined (``""`` for an empty batch).

    Example:
        >>> import datetime as dt, rxhubs
        >>> t = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
        >>> ctx = rxhubs.PartitionContext("ns", "hub", "$Default", "0")
        >>> to_symbols(rxhubs.EventBatch(ctx, (rxhubs.Event(b"c", 0, "0", t), rxhubs.Event(b"d", 1, "1", t))))
        'cd'
    """
    return "".join(e.body.decode("utf-8", "replace") for e in batch.events)


def symbols() -> Callable[[Observable[EventBatch]], Observable[str]]:
    """Operator: each batch becomes its events' bodies joined, for comparison with an expected diagram.

    Marble diagram::

        batches:  -[a]--[b,c]---[d]-|
        symbols:  -a----bc------d---|

    Example:
        >>> import rxhubs
        >>> with marble_test() as t:
        ...     hub = t.hub({"0": "--xy"})
        ...     t.start(rxhubs.partition_batches(hub, "0").pipe(symbols())) == t.exp("--xy")
        True
    """
    return ops.map(to_symbols)


class MarbleTest:
    """One virtual-time test: a scheduler, hubs fed by traffic diagrams, and diagram helpers.

    Create it with :func:`marble_test`. ``scheduler`` is a ``TestScheduler`` at virtual time 0; the
    pipeline given to :meth:`start` is created at 100, subscribed at 200 and disposed at 1000.

    Example:
        >>> import rxhubs
        >>> with marble_test() as t:
        ...     hub = t.hub({"0": "-a-b"})
        ...     t.start(rxhubs.partition_batches(hub, "0").pipe(symbols())) == t.exp("-a-b")
        True
    """

    def __init__(self, timespan: float = 1.0) -> None:
        self.timespan = timespan
        self.scheduler = TestScheduler()
        self.subscribed = SUBSCRIBED
        self._started = False
        self._peers: list[Peer] = []

    # -- time ----------------------------------------------------------------------------------------------
    def now(self) -> dt.datetime:
        """The virtual time as a UTC datetime (used as the hub's and store's clock)."""
        return self.scheduler.now

    def at(self, ticks: float, action: Callable[[], Any]) -> None:
        """Run ``action`` at ``ticks`` timespans after subscription."""
        self.scheduler.schedule_absolute(self.subscribed + ticks * self.timespan, lambda *_: action())

    # -- inputs --------------------------------------------------------------------------------------------
    def hub(
        self,
        traffic: Mapping[str, str] | None = None,
        lookup: Mapping[str, bytes | str | Sequence[bytes | str]] | None = None,
        *,
        partition_count: int | None = None,
        error: BaseException | None = None,
        **options: Any,
    ) -> InMemoryEventHub:
        """An in-memory hub whose partitions receive ``traffic`` at the diagrams' times.

        Args:
            traffic: Partition id -> traffic diagram.
            lookup: Element -> body, or list of bodies (default: one event per character).
            partition_count: Partitions (default: enough for the ids in ``traffic``, at least 1).
            error: What ``#`` injects (default: a retriable ``TransportError``).
            **options: Passed to :class:`InMemoryEventHub`.
        """
        traffic = dict(traffic or {})
        if partition_count is None:
            partition_count = max([int(p) + 1 for p in traffic] + [1])
        hub = InMemoryEventHub(partition_count, clock=self.now, **options)
        for partition_id, diagram in traffic.items():
            self._feed(hub, partition_id, diagram, lookup or {}, error)
        return hub

    def _feed(
        self,
        hub: InMemoryEventHub,
        partition_id: str,
        diagram: str,
        lookup: Mapping[str, bytes | str | Sequence[bytes | str]],
        error: BaseException | None,
    ) -> None:
        for ticks, notification in parse(diagram, timespan=self.timespan):
            time = self.subscribed + _seconds(ticks)
            if isinstance(notification, OnNext):
                element = notification.value
                value = lookup.get(str(element), str(element))
                bodies: list[bytes | str] = [value] if isinstance(value, bytes) else list(value)

                def send(*_: Any, bodies: list[bytes | str] = bodies) -> None:
                    hub.send(bodies, partition_id=partition_id)

                self.scheduler.schedule_absolute(time, send)
            elif isinstance(notification, OnError):
                fault = error or TransportError(f"injected fault on partition {partition_id}")
                self.scheduler.schedule_absolute(time, lambda *_, f=fault: hub.inject_error(partition_id, f))

    def store(self) -> InMemoryCheckpointStore:
        """An in-memory checkpoint store; its records are stamped with the virtual time."""
        return InMemoryCheckpointStore(clock=lambda: self.scheduler.now.timestamp())

    def peer(
        self,
        hub: InMemoryEventHub,
        store: InMemoryCheckpointStore,
        diagram: str,
        *,
        owner_id: str = "peer",
        consumer_group: str = "$Default",
        pipeline: PeerPipeline | None = None,
        **options: Any,
    ) -> Peer:
        """Another consumer of the group, driven by ``diagram``: ``j`` join, ``s`` stop, ``x`` crash, ``p``/``r``.

        ``s`` stops it gracefully (flush and release); ``x`` crashes it (its ownership must expire). ``p``
        pauses it as SIGSTOP does: nothing of the peer runs (reads, timers, store calls, renewals) while virtual
        time goes on; at ``r`` what came due meanwhile runs at once, as when a stopped process continues.
        The peer is a real :func:`rxhubs.consume` subscription on this test's scheduler, with ``options``
        (``load_balancing_interval``, ``ownership_expiration``, ``on_partition_error``, ...); what it emits is
        in :attr:`Peer.batches`. ``pipeline(store)`` (optional) returns the operator its batches go through,
        e.g. a window and the checkpoint: use the ``store`` it is given, which crashes with the peer.
        """
        peer = Peer(self, hub, store, owner_id, consumer_group, options, pipeline)
        self._peers.append(peer)
        verbs = {"j": peer.join, "s": peer.stop, "x": peer.crash, "p": peer.pause, "r": peer.resume}
        for index, char in enumerate(_ticks(diagram)):
            if char in verbs:
                self.at(index, verbs[char])
            elif char not in "-":
                raise ValueError(f"peer diagrams use j, s, x, p, r and -; got {char!r}")
        return peer

    def outage(self, store: InMemoryCheckpointStore, diagram: str) -> None:
        """Make ``store`` unavailable (every call raises a retriable StoreError) during the ``#`` ticks."""
        down = [c == "#" for c in _ticks(diagram)]
        for index, is_down in enumerate(down):
            was_down = index > 0 and down[index - 1]
            if is_down != was_down:

                def switch(down_now: bool = is_down) -> None:
                    store.available = not down_now

                self.at(index, switch)
        if down and down[-1]:
            self.at(len(down), lambda: setattr(store, "available", True))

    def sink(self, diagram: str = "") -> MarbleSink:
        """A sink operator that records what it wrote; a write at a ``#`` tick raises :class:`SinkError`."""
        failing = {index for index, c in enumerate(_ticks(diagram)) if c == "#"}
        return MarbleSink(self, failing)

    def checkpoints_at(
        self, hub: InMemoryEventHub, store: InMemoryCheckpointStore, ticks: float, consumer_group: str = "$Default"
    ) -> dict[str, int]:
        """A dict, filled at ``ticks``, of partition id -> checkpointed sequence number.

        It reads the store's true state (:meth:`InMemoryCheckpointStore.peek`): outages do not hide it.
        """
        result: dict[str, int] = {}

        def read() -> None:
            _, checkpoints = store.peek(hub.fully_qualified_namespace, hub.eventhub_name, consumer_group)
            result.update({c.partition_id: c.sequence_number for c in checkpoints})

        self.at(ticks, read)
        return result

    def ownership_at(
        self, hub: InMemoryEventHub, store: InMemoryCheckpointStore, ticks: float, consumer_group: str = "$Default"
    ) -> dict[str, str]:
        """A dict, filled at ``ticks``, of partition id -> owner id for the hub's partitions ("" if none)."""
        result: dict[str, str] = {}

        def read() -> None:
            records, _ = store.peek(hub.fully_qualified_namespace, hub.eventhub_name, consumer_group)
            owners = {o.partition_id: o.owner_id for o in records}
            result.update({p: owners.get(p, "") for p in hub.partition_ids})

        self.at(ticks, read)
        return result

    def cold(self, diagram: str, lookup: Mapping[str | float, Any] | None = None) -> Observable[Any]:
        """A cold observable from a diagram (RxPY's ``from_marbles``)."""
        return reactivex.from_marbles(diagram, timespan=self.timespan, lookup=dict(lookup or {}))

    def hot(self, diagram: str, lookup: Mapping[str | float, Any] | None = None) -> Observable[Any]:
        """A hot observable whose time 0 is the subscription."""
        return reactivex.hot(
            diagram, timespan=self.timespan, duetime=self.subscribed, lookup=dict(lookup or {}),
            scheduler=self.scheduler,
        )

    # -- running and expecting -----------------------------------------------------------------------------
    def start(
        self, observable: Observable[Any] | Callable[[], Observable[Any]], *, disposed: float = DISPOSED
    ) -> list[Recorded[Any]]:
        """Create at 100, subscribe at 200, dispose at ``disposed``; return the recorded notifications.

        Peers still running at ``disposed`` stop then too, so the virtual clock can run out of work.
        """
        if self._started:
            raise RuntimeError("start() runs the scheduler once per marble test")
        self._started = True
        for peer in self._peers:
            self.scheduler.schedule_absolute(disposed, lambda *_, p=peer: p.stop())
        create = observable if callable(observable) and not isinstance(observable, Observable) else None

        def factory() -> Observable[Any]:
            return create() if create is not None else observable  # type: ignore[return-value]

        return self.scheduler.start(factory, created=CREATED, subscribed=self.subscribed, disposed=disposed).messages

    def exp(
        self, diagram: str, lookup: Mapping[str | float, Any] | None = None, error: Exception | None = None
    ) -> list[Recorded[Any]]:
        """The records an expected diagram stands for, shifted to the subscription time."""
        records: list[Recorded[Any]] = []
        for ticks, notification in parse(
            diagram, timespan=self.timespan, time_shift=self.subscribed, lookup=dict(lookup or {}), error=error
        ):
            time: Any = _seconds(ticks)
            if isinstance(notification, OnNext):
                records.append(ReactiveTest.on_next(time, notification.value))
            elif isinstance(notification, OnError):
                records.append(ReactiveTest.on_error(time, notification.exception))
            else:
                records.append(ReactiveTest.on_completed(time))
        return records


def _ticks(diagram: str) -> str:
    return diagram.replace(" ", "")


class MarbleSink:
    """A sink operator for marble tests: records what it wrote, fails at the marked ticks.

    Example:
        >>> import rxhubs
        >>> with marble_test() as t:
        ...     sink = t.sink("---#")
        ...     records = t.start(rxhubs.partition_batches(t.hub({"0": "-a-b"}), "0").pipe(sink))
        ...     sink.symbols, records[-1].value.kind
        (['a'], 'E')
    """

    def __init__(self, test: MarbleTest, failing: set[int]) -> None:
        self.test = test
        self.failing = failing
        self.written: list[tuple[float, str]] = []

    def _tick(self) -> int:
        return round((float(self.test.scheduler.clock) - self.test.subscribed) / self.test.timespan)

    def __call__(self, source: Observable[EventBatch]) -> Observable[EventBatch]:
        def write(batch: EventBatch) -> EventBatch:
            tick = self._tick()
            if tick in self.failing:
                raise SinkError(f"the sink failed at tick {tick}")
            self.written.append((tick, to_symbols(batch)))
            return batch

        return source.pipe(ops.map(write))

    @property
    def symbols(self) -> list[str]:
        """What was written, as symbols."""
        return [s for _, s in self.written]


@contextlib.contextmanager
def marble_test(timespan: float = 1.0) -> Iterator[MarbleTest]:
    """A :class:`MarbleTest` for one virtual-time test.

    Example:
        >>> with marble_test() as t:
        ...     t.start(t.cold("-a-|")) == t.exp("-a-|")
        True
    """
    yield MarbleTest(timespan)
