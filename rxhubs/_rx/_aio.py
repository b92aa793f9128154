"""One-shot Observables over I/O: a coroutine on the running asyncio loop, or an object's Rx-native verb.

Every I/O step of rxhubs (a pull from a receiver, a store call) is a one-shot Observable. Over real I/O it
wraps a coroutine as a task on the asyncio loop that drives the pipeline; disposing cancels the task. An
object may instead offer ``observe_<verb>(...)``, an Observable that runs on the subscribing scheduler:
the in-memory hub and store do, so the same pipeline runs in virtual time under ``TestScheduler``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast

import reactivex
from reactivex import Observable, abc
from reactivex.disposable import Disposable

from rxhubs.errors import ConfigurationError

T = TypeVar("T")

__all__ = ["call", "from_async", "loop_of"]


def loop_of(scheduler: abc.SchedulerBase | None) -> asyncio.AbstractEventLoop:
    """The asyncio loop that drives ``scheduler``: the running loop, else the scheduler's own."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        pass
    loop = getattr(scheduler, "_loop", None)
    if isinstance(loop, asyncio.AbstractEventLoop):
        return loop
    raise ConfigurationError(
        "this step does real I/O and needs an asyncio loop: drive the pipeline with rxhubs.run()/arun(), "
        "or use rxhubs.testing.InMemoryEventHub and InMemoryCheckpointStore under a TestScheduler"
    )


def from_async(factory: Callable[[], Awaitable[T]]) -> Observable[T]:
    """A one-shot Observable of the result of ``factory()``, awaited on the pipeline's asyncio loop.

    The coroutine starts at subscription; disposal cancels it. Its exception goes to ``on_error``.
    """

    def subscribe(observer: abc.ObserverBase[T], scheduler: abc.SchedulerBase | None = None) -> abc.DisposableBase:
        loop = loop_of(scheduler)
        done = False

        async def runner() -> None:
            nonlocal done
            try:
                value = await factory()
            except asyncio.CancelledError:
                raise
            except BaseException as exc:
                done = True
                observer.on_error(cast(Exception, exc))
                return
            done = True
            observer.on_next(value)
            observer.on_completed()

        task = loop.create_task(runner())

        def cancel() -> None:
            if not done and not task.done():
                task.cancel()

        return Disposable(cancel)

    return reactivex.create(subscribe)


def call(obj: object, verb: str, *args: Any, **kwargs: Any) -> Observable[Any]:
    """``obj.observe_<verb>(*args)`` if ``obj`` has it, else the coroutine ``obj.<verb>(*args)`` as an Observable."""
    native = getattr(obj, "observe_" + verb, None)
    if native is not None:
        return cast(Observable[Any], native(*args, **kwargs))
    method = getattr(obj, verb)
    return from_async(lambda: method(*args, **kwargs))
