"""Run a coroutine on the scheduler that subscribes: as an asyncio task, or step by step in virtual time.

Every I/O step of rxhubs (a pull from a receiver, a store call) and the balancing loop are coroutines. They
become Observables through :func:`from_coroutine`, which picks the *world* from the subscribing scheduler:

* **asyncio** (an ``AsyncIOScheduler``, or no scheduler while an event loop runs): an asyncio task on that
  loop. (Partition streams ask a receiver for what it already holds first, so a busy partition costs no task.)
* **virtual** (``reactivex.testing.TestScheduler``, or any other scheduler with no event loop): a stepper
  drives the coroutine, each resumption a scheduled action. A coroutine may then await only the
  primitives of :mod:`rxhubs._rx._clock` (``sleep``, ``Signal.wait``, ``deadline``), which count in the
  scheduler's time, so a pipeline over the in-memory hub and store runs in virtual time. Awaiting real
  I/O there is a :class:`~rxhubs.errors.ConfigurationError` raised inside the coroutine.

The same code path therefore serves the Azure transport and the in-memory fakes; only the world differs.
"""

from __future__ import annotations

import abc as abc_
import asyncio
import contextvars
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import reactivex
from reactivex import Observable, abc
from reactivex.disposable import Disposable
from reactivex.scheduler import CurrentThreadScheduler
from reactivex.scheduler.eventloop import AsyncIOScheduler

from rxhubs.errors import ConfigurationError

__all__ = ["Stepper", "Suspension", "current_stepper", "from_coroutine", "pipeline_scheduler"]

T = TypeVar("T")

CoroutineFactory = Callable[[], Coroutine[Any, Any, T]]

_STEPPER: contextvars.ContextVar[Stepper | None] = contextvars.ContextVar("rxhubs_stepper", default=None)

_NEEDS_ASYNCIO = (
    "this step awaits real I/O ({what}) but runs on a virtual-time scheduler: drive the pipeline with "
    "rxhubs.run()/arun(), or use rxhubs.testing.InMemoryEventHub and InMemoryCheckpointStore under a TestScheduler"
)


def current_stepper() -> Stepper | None:
    """The stepper driving the running coroutine in virtual time, or None in the asyncio world."""
    return _STEPPER.get()


class Suspension(abc_.ABC):
    """What a clock primitive yields to a :class:`Stepper`: it resumes the stepper later, exactly once."""

    @abc_.abstractmethod
    def arm(self, stepper: Stepper) -> None:
        """Start waiting; call ``stepper.resume(self, value)`` when done."""

    @abc_.abstractmethod
    def disarm(self) -> None:
        """Stop waiting (the coroutine was resumed another way, or cancelled)."""


class Stepper:
    """Drives one coroutine on a scheduler: each resumption runs as an action scheduled on it.

    Args:
        coro: The coroutine.
        scheduler: Its clock and its executor.
        on_done: Called with the coroutine's result.
        on_error: Called with the exception it raised (not for a cancellation).
    """

    def __init__(
        self,
        coro: Coroutine[Any, Any, T],
        scheduler: abc.SchedulerBase,
        on_done: Callable[[T], None],
        on_error: Callable[[Exception], None],
    ) -> None:
        self.scheduler = scheduler
        self._coro = coro
        self._on_done = on_done
        self._on_error = on_error
        self._context = contextvars.copy_context()
        self._context.run(_STEPPER.set, self)
        self._waiting: Suspension | None = None
        self._finished = False
        self._cancelled = False

    @property
    def finished(self) -> bool:
        """True once the coroutine returned, raised or was cancelled."""
        return self._finished

    def now(self) -> float:
        """The scheduler's time, in seconds since the epoch."""
        return self.scheduler.now.timestamp()

    def start(self) -> None:
        """Run the first step now."""
        self._step(None, None)

    def resume(self, token: Suspension, value: Any = None) -> None:
        """Continue after ``token`` (ignored unless the coroutine is still waiting on it)."""
        if self._waiting is not token or self._finished:
            return
        self._waiting = None
        self._step(value, None)

    def throw(self, error: BaseException) -> None:
        """Raise ``error`` in the coroutine where it waits."""
        if self._finished:
            return
        waiting, self._waiting = self._waiting, None
        if waiting is not None:
            waiting.disarm()
        self._step(None, error)

    def cancel(self) -> None:
        """Raise ``CancelledError`` where it waits; it may still await in ``finally`` blocks."""
        if self._finished or self._cancelled:
            return
        self._cancelled = True
        self.throw(asyncio.CancelledError())

    def _step(self, value: Any, error: BaseException | None) -> None:
        coro = self._coro
        try:
            run = self._context.run
            yielded = run(coro.send, value) if error is None else run(coro.throw, error)
        except StopIteration as stop:
            self._finished = True
            self._on_done(stop.value)
            return
        except asyncio.CancelledError:
            self._finished = True
            if not self._cancelled:
                self._on_error(ConfigurationError("a coroutine was cancelled from inside"))
            return
        except Exception as exc:
            self._finished = True
            if isinstance(exc, RuntimeError) and "event loop" in str(exc):  # asyncio asked for its loop
                error = ConfigurationError(_NEEDS_ASYNCIO.format(what=str(exc)))
                error.__cause__ = exc
                exc = error
            self._on_error(exc)
            return
        if not isinstance(yielded, Suspension):  # an asyncio future or the like: real I/O on a virtual clock
            self._step(None, ConfigurationError(_NEEDS_ASYNCIO.format(what=type(yielded).__name__)))
            return
        self._waiting = yielded
        yielded.arm(self)


def _asyncio_world(scheduler: abc.SchedulerBase | None) -> bool:
    if isinstance(scheduler, AsyncIOScheduler):
        return True
    if scheduler is not None and not isinstance(scheduler, CurrentThreadScheduler):
        return False
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _run_in_asyncio(
    coro: Coroutine[Any, Any, T],
    scheduler: abc.SchedulerBase | None,
    on_done: Callable[[T], None],
    on_error: Callable[[Exception], None],
) -> Callable[[], None]:
    """Run ``coro`` as an asyncio task; return a function that cancels it."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # an AsyncIOScheduler used from outside its loop: start inside it
        assert scheduler is not None
        started: list[asyncio.Task[Any]] = []
        handle = scheduler.schedule(lambda *_: started.append(_start_task(coro, on_done, on_error)))

        def cancel_later() -> None:
            handle.dispose()
            for task in started:
                task.cancel()
            if not started:
                coro.close()

        return cancel_later
    task = _start_task(coro, on_done, on_error, loop)

    def cancel() -> None:
        task.cancel()

    return cancel


def _start_task(
    coro: Coroutine[Any, Any, T],
    on_done: Callable[[T], None],
    on_error: Callable[[Exception], None],
    loop: asyncio.AbstractEventLoop | None = None,
) -> asyncio.Task[T]:
    context = contextvars.copy_context()
    context.run(_STEPPER.set, None)
    task = (loop or asyncio.get_running_loop()).create_task(coro, context=context)

    def finished(t: asyncio.Task[T]) -> None:
        if t.cancelled():
            return
        error = t.exception()
        if error is None:
            on_done(t.result())
        elif isinstance(error, Exception):
            on_error(error)

    task.add_done_callback(finished)
    return task


def from_coroutine(factory: CoroutineFactory[T]) -> Observable[T]:
    """A one-shot Observable of ``await factory()``, run in the subscribing scheduler's world.

    The coroutine is created at subscription; disposal cancels it. Its exception goes to ``on_error``.

    Example:
        >>> async def answer():
        ...     return 42
        >>> from_coroutine(answer).run()
        42
    """

    def subscribe(observer: abc.ObserverBase[T], scheduler: abc.SchedulerBase | None = None) -> abc.DisposableBase:
        done = False

        def on_done(value: T) -> None:
            nonlocal done
            done = True
            observer.on_next(value)
            observer.on_completed()

        def on_error(error: Exception) -> None:
            nonlocal done
            done = True
            observer.on_error(error)

        try:
            coro = factory()
        except Exception as exc:
            observer.on_error(exc)
            return Disposable()
        if _asyncio_world(scheduler):
            cancel = _run_in_asyncio(coro, scheduler, on_done, on_error)
            return Disposable(lambda: None if done else cancel())
        stepper = Stepper(coro, scheduler or CurrentThreadScheduler.singleton(), on_done, on_error)
        stepper.start()
        return Disposable(stepper.cancel)

    return reactivex.create(subscribe)


def pipeline_scheduler(scheduler: abc.SchedulerBase | None, what: str) -> abc.SchedulerBase:
    """The scheduler a stateful rxhubs step runs its timers on: the one given, else the running loop's.

    Raises:
        ConfigurationError: Neither a scheduler nor a running asyncio loop (``what`` names the step).

    Example:
        >>> from reactivex.testing import TestScheduler
        >>> scheduler = TestScheduler()
        >>> pipeline_scheduler(scheduler, "checkpoint()") is scheduler
        True
    """
    if scheduler is not None:
        return scheduler
    try:
        return AsyncIOScheduler(asyncio.get_running_loop())
    except RuntimeError:
        raise ConfigurationError(
            f"{what} runs on a scheduler: drive the pipeline with rxhubs.run()/arun(), or subscribe with"
            " scheduler=... (a TestScheduler with the in-memory hub and store)"
        ) from None
