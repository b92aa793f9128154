"""Graceful stop: a signal that sources watch so a pipeline can finish instead of being cut off.

:func:`rxhubs.arun` opens a :class:`Shutdown` scope while it subscribes; every rxhubs source subscribed
inside it watches it. When a stop is requested (Ctrl-C, SIGTERM, ``request()``), sources stop pulling,
let the batches in flight finish, close their receivers, release ownership and *complete*, so the
operators downstream (checkpoint, Spark) flush on completion and nothing is left half-written.
"""

from __future__ import annotations

import contextlib
import contextvars
import signal
import threading
from collections.abc import Callable, Iterator

from reactivex.disposable import Disposable

__all__ = ["Shutdown", "current_shutdown", "held_signals", "release_signals", "shutdown_scope"]

_CURRENT: contextvars.ContextVar[Shutdown | None] = contextvars.ContextVar("rxhubs_shutdown", default=None)


class Shutdown:
    """A one-way stop signal with callbacks.

    Example:
        >>> stop = Shutdown()
        >>> seen = []
        >>> _ = stop.watch(lambda: seen.append("stopping"))
        >>> stop.request(); stop.request()
        >>> seen, stop.requested
        (['stopping'], True)
    """

    def __init__(self) -> None:
        self._requested = False
        self._callbacks: dict[int, Callable[[], None]] = {}
        self._next = 0
        self._lock = threading.Lock()
        self._pending = 0
        self._on_idle: list[Callable[[], None]] = []

    @property
    def requested(self) -> bool:
        """True once a stop was requested."""
        return self._requested

    def watch(self, callback: Callable[[], None]) -> Disposable:
        """Call ``callback`` once when a stop is requested (at once if it already was)."""
        with self._lock:
            if not self._requested:
                key = self._next
                self._next += 1
                self._callbacks[key] = callback

                def forget() -> None:
                    self._callbacks.pop(key, None)

                return Disposable(forget)
        callback()
        return Disposable()

    def track(self) -> Callable[[], None]:
        """Count one clean-up as running (a consumer releasing its partitions) until the returned callable runs.

        :func:`rxhubs.arun` waits for these (up to its grace period) after the pipeline ended, also when it
        ended with an error, so partitions are released before the process exits.

        Example:
            >>> stop = Shutdown()
            >>> done = stop.track()
            >>> stop.pending
            1
            >>> done(); done(); stop.pending
            0
        """
        with self._lock:
            self._pending += 1
        finished = False

        def untrack() -> None:
            nonlocal finished
            with self._lock:
                if finished:
                    return
                finished = True
                self._pending -= 1
                callbacks = self._on_idle if self._pending == 0 else []
                if self._pending == 0:
                    self._on_idle = []
            for callback in callbacks:
                callback()

        return untrack

    @property
    def pending(self) -> int:
        """How many tracked clean-ups are still running."""
        return self._pending

    def when_idle(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once no tracked clean-up is running (at once if none is)."""
        with self._lock:
            if self._pending:
                self._on_idle.append(callback)
                return
        callback()

    def request(self) -> None:
        """Ask every watcher to stop; idempotent."""
        with self._lock:
            if self._requested:
                return
            self._requested = True
            callbacks = list(self._callbacks.values())
            self._callbacks.clear()
        for callback in callbacks:
            callback()


def current_shutdown() -> Shutdown | None:
    """The stop signal of the enclosing :func:`shutdown_scope`, if any."""
    return _CURRENT.get()


@contextlib.contextmanager
def shutdown_scope(shutdown: Shutdown | None = None) -> Iterator[Shutdown]:
    """Sources subscribed inside this block stop gracefully when the yielded signal is requested.

    Example:
        >>> with shutdown_scope() as stop:
        ...     current_shutdown() is stop
        True
    """
    shutdown = shutdown or Shutdown()
    token = _CURRENT.set(shutdown)
    try:
        yield shutdown
    finally:
        _CURRENT.reset(token)


@contextlib.contextmanager
def held_signals(*signals: signal.Signals) -> Iterator[None]:
    """Hold (block) ``signals`` in this thread while the block runs: one that arrives waits, it does not act.

    A process started inside the block starts with them held (the signal mask is inherited), so a stop signal
    sent before the process has installed its handler waits for :func:`release_signals` instead of killing it
    with the signal's default action. (No-op where the platform has no ``pthread_sigmask``.)

    Example:
        >>> with held_signals(signal.SIGTERM):
        ...     signal.SIGTERM in signal.pthread_sigmask(signal.SIG_BLOCK, [])
        True
    """
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, signals)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def release_signals(*signals: signal.Signals) -> None:
    """Unblock ``signals`` in this thread: one held meanwhile is delivered now, to the handler installed by then."""
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, signals)
