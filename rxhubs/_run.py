"""Drive a pipeline: :func:`run` and :func:`arun`, with a graceful stop on Ctrl-C / SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
from collections.abc import Iterator, Sequence
from typing import Any

from reactivex import Observable
from reactivex.scheduler.eventloop import AsyncIOScheduler

from rxhubs._shutdown import Shutdown, shutdown_scope
from rxhubs.errors import ConfigurationError

__all__ = ["arun", "run"]

log = logging.getLogger("rxhubs")

_SIGNALS = (signal.SIGINT, signal.SIGTERM)


async def arun(
    observable: Observable[Any],
    *,
    shutdown: Shutdown | None = None,
    grace: float = 30.0,
    signals: Sequence[signal.Signals] = _SIGNALS,
    gc_thresholds: tuple[int, int, int] | None = None,
) -> int:
    """Subscribe to ``observable`` on the running loop and wait until it completes; return items seen.

    A first SIGINT/SIGTERM (or ``shutdown.request()``) stops gracefully: sources stop reading, batches in
    flight finish, checkpoints flush, receivers close and ownership is released, then the pipeline
    completes. If it has not completed ``grace`` seconds later, or on a second signal, it is disposed.

    When the pipeline ends with an error (an exception in an operator after the merge), the consumers still
    flush and release their partitions before the error is raised here (within ``grace`` seconds).

    Args:
        observable: The pipeline.
        shutdown: A stop signal to use instead of a fresh one (to stop from code).
        grace: Seconds to wait for a graceful stop before cutting the pipeline off.
        signals: Signals that request the stop (installed only in the main thread).
        gc_thresholds: The cyclic garbage collector's thresholds while the pipeline runs (``gc.set_threshold``;
            the interpreter's are put back after); None leaves them alone. A consumer of hundreds of partitions
            keeps a large heap and makes many objects that live a few seconds (requests, timers, batches): with
            the interpreter's (700, 10, 10) they reach the oldest generation and full collections of the whole
            heap follow every few seconds (a third of the CPU of one consumer of 1,024 partitions, measured);
            ``(50_000, 20, 100)`` lets them die young. See docs/operations.md, "Large hubs".

    Returns:
        How many items the pipeline emitted.

    Raises:
        Whatever error ends the pipeline (an :class:`~rxhubs.errors.RxHubsError` for rxhubs failures).

    Example:
        >>> import asyncio, reactivex
        >>> asyncio.run(arun(reactivex.of(1, 2, 3)))
        3
        >>> asyncio.run(arun(reactivex.of(1, 2), gc_thresholds=(50_000, 20, 100)))
        2
    """
    with _collector(gc_thresholds):
        return await _arun(observable, shutdown, grace, signals)


@contextlib.contextmanager
def _collector(thresholds: tuple[int, int, int] | None) -> Iterator[None]:
    """``gc.set_threshold(*thresholds)`` for the block (checked first), the interpreter's put back after."""
    if thresholds is None:
        yield
        return
    if (not isinstance(thresholds, tuple) or len(thresholds) != 3
            or any(isinstance(t, bool) or not isinstance(t, int) or t < 0 for t in thresholds)):
        raise ConfigurationError(
            f"gc_thresholds must be three whole numbers >= 0 (as gc.set_threshold takes), got {thresholds!r}"
        )
    before = gc.get_threshold()
    gc.set_threshold(*thresholds)
    try:
        yield
    finally:
        gc.set_threshold(*before)


async def _arun(observable: Observable[Any], shutdown: Shutdown | None, grace: float,
                signals: Sequence[signal.Signals]) -> int:
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()
    count = 0

    def on_next(_: Any) -> None:
        nonlocal count
        count += 1

    def on_error(exc: Exception) -> None:
        if not done.done():
            done.set_exception(exc)

    def on_completed() -> None:
        if not done.done():
            done.set_result(None)

    stop = shutdown or Shutdown()
    installed: list[signal.Signals] = []
    hard_stop = asyncio.Event()

    def on_signal() -> None:
        if stop.requested:
            log.warning("second stop signal: cutting the pipeline off")
            hard_stop.set()
        else:
            log.info("stopping gracefully (again to cut off)")
            stop.request()

    try:
        for sig in signals:
            try:
                loop.add_signal_handler(sig, on_signal)
                installed.append(sig)
            except (ValueError, RuntimeError, NotImplementedError):
                pass  # not the main thread, or no signal support
        with shutdown_scope(stop):
            subscription = observable.subscribe(
                on_next, on_error, on_completed, scheduler=AsyncIOScheduler(loop)
            )
        try:
            await _wait(done, stop, hard_stop, grace)
        finally:
            subscription.dispose()
            await _cleaned_up(stop, grace)
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)
    return count


async def _wait(done: asyncio.Future[None], stop: Shutdown, hard_stop: asyncio.Event, grace: float) -> None:
    stopping = asyncio.Event()
    stop.watch(stopping.set)
    hard = asyncio.ensure_future(hard_stop.wait())
    try:
        while True:
            waiters: set[asyncio.Future[Any]] = {done, hard}
            if not stopping.is_set():
                waiters.add(asyncio.ensure_future(stopping.wait()))
            finished, pending = await asyncio.wait(
                waiters, timeout=grace if stopping.is_set() else None, return_when=asyncio.FIRST_COMPLETED
            )
            for fut in pending:
                if fut is not done and fut is not hard:
                    fut.cancel()
            if done in finished:
                done.result()
                return
            if hard in finished or (stopping.is_set() and not finished):
                log.warning("pipeline did not stop within %.1f s: disposed", grace)
                return
    finally:
        hard.cancel()


async def _cleaned_up(stop: Shutdown, grace: float) -> None:
    """Wait (at most ``grace`` seconds) until the consumers have released their partitions."""
    if stop.pending == 0:
        return
    loop = asyncio.get_running_loop()
    idle: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        loop.call_soon_threadsafe(lambda: None if idle.done() else idle.set_result(None))

    stop.when_idle(wake)
    try:
        await asyncio.wait_for(idle, grace)
    except TimeoutError:
        log.warning("partitions not released within %.1f s: they will expire instead", grace)


def run(observable: Observable[Any], **kwargs: Any) -> int:
    """Blocking form of :func:`arun`: drive ``observable`` on a new event loop until it completes.

    Example:
        >>> import reactivex
        >>> run(reactivex.of("a", "b"))
        2
    """
    return asyncio.run(arun(observable, **kwargs))
