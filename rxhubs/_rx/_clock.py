"""Time and waiting for rxhubs coroutines, the same code in asyncio and in virtual time.

A coroutine run by :func:`rxhubs._rx.from_coroutine` awaits these instead of ``asyncio.sleep`` or
``asyncio.Event``. Under asyncio they are exactly those; under a virtual-time scheduler they are timers
and wake-ups on the scheduler's clock. That is what lets the in-memory hub wait for events, a test store
answer late, and the balancing loop sleep between rounds, in ``TestScheduler`` time as in real time.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Generator
from contextlib import asynccontextmanager
from typing import Any, TypeVar

from reactivex import abc

from rxhubs._rx._driver import Stepper, Suspension, current_stepper

__all__ = ["Signal", "deadline", "never", "now", "sleep", "to_thread"]


T = TypeVar("T")


async def to_thread(function: Callable[..., T], *args: Any) -> T:
    """Call a blocking ``function`` in a worker thread under asyncio; inline in virtual time (deterministic).

    Example:
        >>> import asyncio
        >>> asyncio.run(to_thread(sum, [1, 2, 3]))
        6
    """
    if current_stepper() is None:
        return await asyncio.to_thread(function, *args)
    return function(*args)


def now() -> float:
    """Seconds since the epoch: the driving scheduler's clock in virtual time, else the wall clock.

    Example:
        >>> now() > 1.7e9
        True
    """
    stepper = current_stepper()
    return stepper.now() if stepper is not None else time.time()


class _Timer(Suspension):
    """A virtual-time suspension: resumes after ``seconds``, or never when ``seconds`` is None."""

    def __init__(self, seconds: float | None) -> None:
        self._seconds = seconds
        self._handle: abc.DisposableBase | None = None

    def arm(self, stepper: Stepper) -> None:
        if self._seconds is not None:
            self._handle = stepper.scheduler.schedule_relative(
                max(0.0, self._seconds), lambda *_: stepper.resume(self, None)
            )

    def disarm(self) -> None:
        if self._handle is not None:
            self._handle.dispose()
            self._handle = None

    def __await__(self) -> Generator[Any, Any, Any]:
        return (yield self)


async def sleep(seconds: float) -> None:
    """Wait ``seconds`` on the driving clock.

    Example:
        >>> import asyncio
        >>> asyncio.run(sleep(0))
    """
    if current_stepper() is None:
        await asyncio.sleep(seconds)
    else:
        await _Timer(seconds)


async def never() -> None:
    """Wait until cancelled (a store that never answers, in tests)."""
    if current_stepper() is None:
        await asyncio.get_running_loop().create_future()
    else:
        await _Timer(None)


class _Wake(Suspension):
    """One coroutine waiting on a :class:`Signal`, in either world."""

    def __init__(self, signal: Signal, timeout: float | None) -> None:
        self._signal = signal
        self._timeout = timeout
        self._stepper: Stepper | None = None
        self._timer: abc.DisposableBase | None = None
        self._future: asyncio.Future[bool] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    # -- virtual time ------------------------------------------------------------------------------------------
    def arm(self, stepper: Stepper) -> None:
        self._stepper = stepper
        self._signal._waiters.append(self)
        if self._timeout is not None:
            self._timer = stepper.scheduler.schedule_relative(max(0.0, self._timeout), lambda *_: self._fire(False))

    def disarm(self) -> None:
        if self._timer is not None:
            self._timer.dispose()
            self._timer = None
        if self in self._signal._waiters:
            self._signal._waiters.remove(self)

    def _fire(self, value: bool) -> None:
        stepper = self._stepper
        if stepper is None:
            return
        self.disarm()
        stepper.resume(self, value)

    def __await__(self) -> Generator[Any, Any, bool]:
        result = yield self
        return bool(result)

    # -- both -------------------------------------------------------------------------------------------------
    def wake(self) -> None:
        """The signal was set: resume the waiter (from any thread in the asyncio world)."""
        if self._stepper is not None:
            self._stepper.scheduler.schedule(lambda *_: self._fire(True))
            return
        future, loop = self._future, self._loop
        if future is None or loop is None:
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            if not future.done():
                future.set_result(True)
        else:
            loop.call_soon_threadsafe(lambda: None if future.done() else future.set_result(True))

    async def wait_asyncio(self) -> bool:
        loop = self._loop = asyncio.get_running_loop()
        future = self._future = loop.create_future()
        self._signal._waiters.append(self)
        timer = None
        if self._timeout is not None:

            def expire() -> None:
                if not future.done():
                    future.set_result(False)

            timer = loop.call_later(max(0.0, self._timeout), expire)
        try:
            return bool(await future)
        finally:
            if timer is not None:
                timer.cancel()
            if self in self._signal._waiters:
                self._signal._waiters.remove(self)


class Signal:
    """A flag that coroutines wait for, with an optional timeout; set it from any callback.

    Like ``asyncio.Event``, but it also works in virtual time, and ``set()`` may be called from another
    thread in the asyncio world.

    Example:
        >>> import asyncio
        >>> async def demo():
        ...     signal = Signal()
        ...     asyncio.get_running_loop().call_later(0.01, signal.set)
        ...     return await signal.wait(timeout=5.0), await Signal().wait(timeout=0.01)
        >>> asyncio.run(demo())
        (True, False)
    """

    __slots__ = ("_set", "_waiters")

    def __init__(self) -> None:
        self._set = False
        self._waiters: list[_Wake] = []

    def is_set(self) -> bool:
        """Whether the flag is up."""
        return self._set

    def set(self) -> None:
        """Raise the flag and wake every waiter."""
        self._set = True
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            waiter.wake()

    def clear(self) -> None:
        """Lower the flag."""
        self._set = False

    async def wait(self, timeout: float | None = None) -> bool:
        """Wait until the flag is up (True) or ``timeout`` seconds passed (False)."""
        if self._set:
            return True
        waiter = _Wake(self, timeout)
        if current_stepper() is None:
            return await waiter.wait_asyncio()
        return await waiter


class _ExpiredError(Exception):
    """Thrown into a coroutine whose :func:`deadline` passed in virtual time."""


@asynccontextmanager
async def deadline(seconds: float) -> AsyncIterator[None]:
    """Raise ``TimeoutError`` in the block if it has not finished after ``seconds``.

    Example:
        >>> import asyncio
        >>> async def slow():
        ...     async with deadline(0.01):
        ...         await sleep(10)
        >>> try:
        ...     asyncio.run(slow())
        ... except TimeoutError:
        ...     print("timed out")
        timed out
    """
    stepper = current_stepper()
    if stepper is None:
        async with asyncio.timeout(seconds):
            yield
        return
    expired = _ExpiredError()
    handle = stepper.scheduler.schedule_relative(max(0.0, seconds), lambda *_: stepper.throw(expired))
    try:
        yield
    except _ExpiredError as exc:
        if exc is expired:
            raise TimeoutError(f"deadline of {seconds:g} s passed") from None
        raise
    finally:
        handle.dispose()
