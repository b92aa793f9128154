"""What a Python worker keeps between its read tasks: one event loop, and an AMQP session opened ahead for the next.

Spark reuses a Python worker for task after task (``spark.python.worker.reuse``, the default). Each read task
opened a connection, authenticated (SASL, the CBS token) and attached its link: a handful of round trips, 40-90 ms
against the emulator on a loaded 2-core machine, more against a remote namespace. Only the attach depends on the
task's partition and start. So while a task reads, the worker opens one session (connection, session and CBS
token, :func:`rxhubs.transport._warm.open_session`) for the same hub and consumer group, and the worker's next
task attaches its link on it (:func:`~rxhubs.transport._warm.adopt`), at exactly its range's start: a range never
depends on what an earlier task read.

Rules:

- Kept per worker, keyed by the connection string, hub and consumer group; one session ready at most per key.
- Only for connection strings (SAS): an Entra ID credential is made and closed per task.
- Between tasks the worker's event loop does not run, so nothing answers the service on that connection: a
  session is used only within :data:`MAX_AGE` seconds of being opened, far inside the service's idle timeout;
  older ones are closed when the next task looks, and all are closed when the worker exits. What arrived on a
  session's connection meanwhile is read first (:func:`usable`): a session the service closed is not used, and
  the task opens its own connection, as before. (A close that arrives at the very moment of the attach fails
  that task; Spark runs a failed task again, on a new connection.)
- ``RXHUBS_SPARK_WARM=0`` in the executors' environment turns it off.

Example:
    >>> sessions = WorkerSessions()
    >>> sessions.take(("conn", "hub", "$Default")) is None, sessions.opened, sessions.taken
    (True, 0, 0)
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import select
import time
from typing import Any

from rxhubs.transport._warm import close_session, open_session

__all__ = ["MAX_AGE", "WorkerSessions", "usable", "worker_sessions"]

_log = logging.getLogger("rxhubs.spark.source")

#: Seconds a session opened ahead may wait for the next task (the loop does not run between tasks).
MAX_AGE = 20.0
#: Frames read at most from what arrived on a session between tasks before it is used.
_DRAIN_ROUNDS = 64
#: Upper bound on opening one session ahead.
_OPEN_TIMEOUT = 30.0

Key = tuple[str, str, str]


class WorkerSessions:
    """One worker's event loop (kept across tasks) and its sessions opened ahead; see the module docs."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready: dict[Key, tuple[Any, float]] = {}
        self._opening: dict[Key, asyncio.Task[None]] = {}
        self._hubs: dict[Key, Any] = {}
        #: Sessions opened ahead, taken by a task, adopted by its link, and closed unused, so far.
        self.opened = self.taken = self.adopted = self.expired = 0

    def loop(self) -> asyncio.AbstractEventLoop:
        """The worker's event loop: every task's receive runs on it, so sessions opened ahead stay usable."""
        if self._loop is None or self._loop.is_closed():
            self._loop = asyncio.new_event_loop()
        return self._loop

    @staticmethod
    def key(opts: Any) -> Key | None:
        """The key of ``opts``'s sessions, or None when they cannot be kept (Entra ID, or turned off)."""
        if opts.connection_string is None or os.environ.get("RXHUBS_SPARK_WARM", "1") == "0":
            return None
        return (opts.connection_string, opts.eventhub_name, opts.consumer_group)

    def take(self, key: Key | None) -> Any | None:
        """A session opened ahead for ``key`` within :data:`MAX_AGE` seconds, or None (older ones are closed)."""
        if key is None:
            return None
        ready = self._ready.pop(key, None)
        if ready is None:
            return None
        handler, opened = ready
        if time.monotonic() - opened > MAX_AGE or not self.loop().run_until_complete(usable(handler)):
            self.expired += 1
            self.loop().run_until_complete(close_session(handler))
            return None
        self.taken += 1
        return handler

    def used(self, handler: Any | None) -> None:
        """Count ``handler`` as adopted when its link took its connection (``adopt`` moved it away)."""
        if handler is not None and getattr(handler, "_connection", True) is None:
            self.adopted += 1

    def prepare(self, key: Key | None, opts: Any) -> None:
        """Start opening a session for ``key``'s next task on the worker's loop (it opens while this task reads)."""
        if key is None or key in self._ready or key in self._opening:
            return
        self._opening[key] = self.loop().create_task(self._open(key, opts), name="rxhubs-spark-warm-session")

    async def _open(self, key: Key, opts: Any) -> None:
        try:
            hub = self._hubs.get(key)
            if hub is None:
                hub = self._hubs[key] = opts.hub()
            async with asyncio.timeout(_OPEN_TIMEOUT):
                handler = await open_session(hub._new_consumer_client(key[2]), key[2])
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the next task opens its own connection, as without sessions ahead
            _log.debug("opening a session ahead failed: %s", opts.redact(repr(exc)))
            return
        finally:
            self._opening.pop(key, None)
        if handler is not None:
            self._ready[key] = (handler, time.monotonic())
            self.opened += 1

    def finish_opening(self) -> None:
        """Run the worker's loop until the sessions being opened ahead are open (or failed)."""
        if self._opening:
            self.loop().run_until_complete(asyncio.wait(list(self._opening.values())))

    def close(self) -> None:
        """Close every session and hub kept, and the loop; never raises (called at the worker's exit)."""
        loop, self._loop = self._loop, None
        if loop is None or loop.is_closed():
            return
        try:
            for task in list(self._opening.values()):
                task.cancel()
            ready, self._ready = list(self._ready.values()), {}
            hubs, self._hubs = list(self._hubs.values()), {}

            async def close_all() -> None:
                await asyncio.gather(*self._opening.values(), return_exceptions=True)
                await asyncio.gather(*(close_session(h) for h, _ in ready), return_exceptions=True)
                await asyncio.gather(*(hub.close() for hub in hubs), return_exceptions=True)

            loop.run_until_complete(close_all())
        except Exception as exc:  # the worker is exiting: nothing to fail
            _log.debug("closing the worker's sessions failed: %r", exc)
        finally:
            from rxhubs.spark._connection import close_loop  # (here: a worker that never closes never loads it)

            close_loop(loop)


async def usable(handler: Any) -> bool:
    """Whether ``handler``'s connection is still open once what arrived since it opened has been read.

    Between tasks nothing reads the connection: the service's frames (its close, among them) wait in the socket.
    They are read here, by the SDK's own connection, before a link is attached on it. A session whose parts are
    not where this looks (a WebSocket) is not used.
    """
    try:
        connection = handler._connection
        for _ in range(_DRAIN_ROUNDS):  # only what is there: a wait for more would cost the task its gain
            if not _pending(connection._transport):
                break
            await connection.listen(wait=0.001, batch=1)
        reader = connection._transport.reader
        return bool(connection.state.name == "OPENED" and connection._error is None and not reader.at_eof())
    except Exception as exc:  # a closed or broken connection: the task opens its own
        _log.debug("a session opened ahead is not usable: %r", exc)
        return False


def _pending(transport: Any) -> bool:
    """Whether bytes wait to be read on ``transport``: in its stream's buffer, or in the socket."""
    reader, writer = transport.reader, transport.writer
    if reader is None or writer is None or writer.is_closing():
        raise ConnectionError("the connection's socket is closed")
    if len(reader._buffer) or reader.at_eof():
        return True
    sock = writer.get_extra_info("socket")
    if sock is None:
        raise ConnectionError("no socket")
    readable, _, _ = select.select([sock], [], [], 0)
    return bool(readable)


_sessions: WorkerSessions | None = None


def worker_sessions() -> WorkerSessions:
    """The :class:`WorkerSessions` of this process (made on first use, closed at exit)."""
    global _sessions
    if _sessions is None:
        _sessions = WorkerSessions()
        atexit.register(_sessions.close)
    return _sessions
