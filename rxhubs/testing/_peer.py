"""Peers of a marble test: other consumers of the group that join, stop, crash, pause and resume in virtual time.

A peer runs on a view of the test's scheduler (:class:`PausableScheduler`) so that pausing it stops all of its
work at once, as SIGSTOP stops a process, while the virtual clock and the other consumers go on.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

from reactivex import Observable, abc, typing
from reactivex.disposable import CompositeDisposable
from reactivex.scheduler.scheduler import Scheduler

from rxhubs._batch import EventBatch
from rxhubs._models import Checkpoint, Ownership
from rxhubs._rx import never
from rxhubs.stores._contract import CheckpointStore
from rxhubs.stores._memory import InMemoryCheckpointStore
from rxhubs.testing._memory_hub import InMemoryEventHub

if TYPE_CHECKING:
    from reactivex.testing import TestScheduler


class MarbleClock(Protocol):
    """What a peer takes from its marble test (:class:`~rxhubs.testing.MarbleTest`): the virtual clock."""

    scheduler: TestScheduler

__all__ = ["PausableScheduler", "Peer", "PeerPipeline"]

#: ``pipeline(store)`` -> the operator a peer's batches go through (its ``store`` crashes with the peer).
PeerPipeline: TypeAlias = Callable[[CheckpointStore], Callable[[Observable[EventBatch]], Observable[Any]]]


class PausableScheduler(Scheduler):
    """A view of another scheduler whose actions wait while it is paused (a stopped process's clock).

    The time is the inner scheduler's, paused or not; an action that comes due while paused runs, in order,
    when :meth:`resume` is called. Disposing a waiting action drops it.

    Example:
        >>> from reactivex.testing import TestScheduler
        >>> inner = TestScheduler()
        >>> view, ran = PausableScheduler(inner), []
        >>> _ = view.schedule_absolute(5.0, lambda *_: ran.append(inner.clock))
        >>> view.paused = True
        >>> inner.advance_to(8.0); ran
        []
        >>> view.resume(); inner.advance_to(9.0); ran
        [8.0]
    """

    def __init__(self, inner: abc.SchedulerBase) -> None:
        super().__init__()
        self.inner = inner
        self.paused = False
        self._held: list[Callable[[], None]] = []

    @property
    def now(self) -> dt.datetime:
        return self.inner.now

    def resume(self) -> None:
        """Unpause: what came due meanwhile runs now, in the order it came due."""
        self.paused = False
        held, self._held = self._held, []
        for run in held:
            self.inner.schedule(lambda *_, run=run: run())

    def _gated(
        self, place: Callable[[Callable[..., Any]], abc.DisposableBase], action: typing.ScheduledAction[Any],
        state: Any,
    ) -> abc.DisposableBase:
        handle = CompositeDisposable()

        def run() -> None:
            if handle.is_disposed:
                return
            if self.paused:
                self._held.append(run)
                return
            result = action(self, state)
            if isinstance(result, abc.DisposableBase):
                handle.add(result)

        handle.add(place(lambda *_: run()))
        return handle

    def schedule(self, action: typing.ScheduledAction[Any], state: Any = None) -> abc.DisposableBase:
        return self._gated(self.inner.schedule, action, state)

    def schedule_relative(
        self, duetime: typing.RelativeTime, action: typing.ScheduledAction[Any], state: Any = None
    ) -> abc.DisposableBase:
        return self._gated(lambda run: self.inner.schedule_relative(duetime, run), action, state)

    def schedule_absolute(
        self, duetime: typing.AbsoluteTime, action: typing.ScheduledAction[Any], state: Any = None
    ) -> abc.DisposableBase:
        return self._gated(lambda run: self.inner.schedule_absolute(duetime, run), action, state)


class _CrashableStore(CheckpointStore):
    """A store seen through a process that may crash: after :meth:`crash` its calls never complete.

    It has the fencing and state verbs of the in-memory store it wraps, so a peer's pipeline can commit state.
    """

    def __init__(self, store: InMemoryCheckpointStore) -> None:
        self._store = store
        self.crashed = False

    async def _unless_crashed(self) -> None:
        if self.crashed:
            await never()

    async def list_ownership(self, namespace: str, eventhub_name: str, consumer_group: str) -> list[Ownership]:
        await self._unless_crashed()
        return await self._store.list_ownership(namespace, eventhub_name, consumer_group)

    async def claim_ownership(self, ownerships: Iterable[Ownership]) -> list[Ownership]:
        await self._unless_crashed()
        return await self._store.claim_ownership(ownerships)

    async def update_checkpoint(self, checkpoint: Checkpoint) -> None:
        await self._unless_crashed()
        await self._store.update_checkpoint(checkpoint)

    async def list_checkpoints(self, namespace: str, eventhub_name: str, consumer_group: str) -> list[Checkpoint]:
        await self._unless_crashed()
        return await self._store.list_checkpoints(namespace, eventhub_name, consumer_group)

    async def fence(self, ownership: Ownership) -> Checkpoint | None:
        await self._unless_crashed()
        return await self._store.fence(ownership)

    async def update_checkpoint_fenced(self, checkpoint: Checkpoint, ownership: Ownership) -> None:
        await self._unless_crashed()
        await self._store.update_checkpoint_fenced(checkpoint, ownership)

    async def fence_with_state(self, ownership: Ownership) -> tuple[Checkpoint | None, bytes | None]:
        await self._unless_crashed()
        return await self._store.fence_with_state(ownership)

    async def commit_state(self, checkpoint: Checkpoint, ownership: Ownership, state: bytes) -> None:
        await self._unless_crashed()
        await self._store.commit_state(checkpoint, ownership, state)


class Peer:
    """Another consumer in a marble test (see :meth:`MarbleTest.peer`).

    Example:
        >>> import rxhubs
        >>> from rxhubs.testing import marble_test
        >>> with marble_test() as t:
        ...     hub, store = t.hub({"0": "-a", "1": "-b"}), t.store()
        ...     peer = t.peer(hub, store, "j", owner_id="peer", load_balancing_interval=1.0)
        ...     owners = t.ownership_at(hub, store, 5)
        ...     _ = t.start(rxhubs.consume(hub, "$Default", store, owner_id="me", load_balancing_interval=1.0))
        ...     sorted(owners.values())
        ['me', 'peer']
    """

    def __init__(
        self,
        test: MarbleClock,
        hub: InMemoryEventHub,
        store: InMemoryCheckpointStore,
        owner_id: str,
        consumer_group: str,
        options: Mapping[str, Any],
        pipeline: PeerPipeline | None = None,
    ) -> None:
        self.test = test
        #: The test's scheduler as this peer sees it: paused while the peer is.
        self.scheduler = PausableScheduler(test.scheduler)
        self.hub = hub
        self.store = _CrashableStore(store)
        self.owner_id = owner_id
        self.consumer_group = consumer_group
        self.options = dict(options)
        self.pipeline = pipeline
        #: What the peer emitted: its batches, or what its ``pipeline`` made of them.
        self.batches: list[Any] = []
        #: Errors its stream ended with (a partition's errors go to ``on_partition_error`` in ``options``).
        self.errors: list[Exception] = []
        self._subscription: Any = None

    def join(self) -> None:
        """Start consuming (a real balancing consumer on the test's scheduler)."""
        from rxhubs.balancing import consume

        source: Observable[Any] = consume(
            self.hub, self.consumer_group, self.store, owner_id=self.owner_id, **self.options
        )
        if self.pipeline is not None:
            source = source.pipe(self.pipeline(self.store))
        self._subscription = source.subscribe(self.batches.append, self.errors.append, scheduler=self.scheduler)

    def stop(self) -> None:
        """Stop gracefully: release every partition now (a paused peer is resumed first, then stopped)."""
        self.scheduler.resume()
        if self._subscription is not None:
            self._subscription.dispose()
            self._subscription = None

    def crash(self) -> None:
        """Die: stop reading and renewing, release nothing (its ownership records must expire)."""
        self.store.crashed = True
        self.stop()

    def pause(self) -> None:
        """Stop running, as SIGSTOP does: no reads, timers, store calls or renewals until :meth:`resume`."""
        self.scheduler.paused = True

    def resume(self) -> None:
        """Go on, as SIGCONT does: what came due while paused runs at once (e.g. its late checkpoint)."""
        self.scheduler.resume()

    @property
    def symbols(self) -> list[str]:
        """The peer's batches as symbols (each batch's event bodies joined)."""
        return ["".join(e.body.decode("utf-8", "replace") for e in b.events) for b in self.batches]
