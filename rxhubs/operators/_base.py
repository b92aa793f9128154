"""What every stateful rxhubs operator does on subscribe: resolve its scheduler, start its state machine."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import reactivex
from reactivex import Observable, abc
from reactivex.disposable import Disposable, SingleAssignmentDisposable

from rxhubs._batch import EventBatch
from rxhubs._rx import pipeline_scheduler
from rxhubs.errors import ConfigurationError

__all__ = ["OperatorState", "stateful_operator"]


class OperatorState(Protocol):
    """One subscription of an operator: an observer of the upstream, holding its upstream subscription."""

    upstream: SingleAssignmentDisposable

    def on_next(self, batch: EventBatch) -> None: ...

    def on_error(self, error: Exception) -> None: ...

    def on_completed(self) -> None: ...

    def dispose(self) -> None: ...


def stateful_operator(
    what: str,
    scheduler: abc.SchedulerBase | None,
    make: Callable[[abc.ObserverBase[EventBatch], abc.SchedulerBase], OperatorState],
) -> Callable[[Observable[EventBatch]], Observable[EventBatch]]:
    """An operator whose subscriptions are ``make(observer, scheduler)``, on ``scheduler`` or the pipeline's.

    A subscription with neither a scheduler nor a running asyncio loop errors with a
    :class:`~rxhubs.errors.ConfigurationError` naming ``what``.

    Example:
        >>> from reactivex.testing import TestScheduler
        >>> class Pass:
        ...     def __init__(self, observer, scheduler):
        ...         self.upstream, self.observer = SingleAssignmentDisposable(), observer
        ...         self.on_next, self.on_error = observer.on_next, observer.on_error
        ...         self.on_completed = observer.on_completed
        ...     def dispose(self):
        ...         self.upstream.dispose()
        >>> seen, scheduler = [], TestScheduler()
        >>> _ = reactivex.of(1, 2).pipe(stateful_operator("pass()", None, Pass)).subscribe(
        ...     seen.append, scheduler=scheduler)
        >>> scheduler.advance_to(1.0); seen
        [1, 2]
    """

    def operator(source: Observable[EventBatch]) -> Observable[EventBatch]:
        def subscribe(
            observer: abc.ObserverBase[EventBatch], sched: abc.SchedulerBase | None = None
        ) -> abc.DisposableBase:
            try:
                resolved = pipeline_scheduler(scheduler or sched, what)
            except ConfigurationError as exc:
                observer.on_error(exc)
                return Disposable()
            state = make(observer, resolved)
            state.upstream.disposable = source.subscribe(
                state.on_next, state.on_error, state.on_completed, scheduler=sched
            )
            return Disposable(state.dispose)

        return reactivex.create(subscribe)

    return operator
