"""Warm sessions: AMQP connections opened and authenticated ahead of a handover, for the links it will bring.

Opening a receiver's link is about a dozen AMQP frames (connection, SASL, session, the CBS token, attach), about
2.5 ms of this process's CPU each time: a consumer handed 16 partitions at once had them all open 33-58 ms after
the first began. Only the attach needs the partition and the position (known once the checkpoint is read); the
connection, its session and the CBS token, whose audience is the hub, do not. So while the balancing loop awaits a
handover of N partitions, the hub opens N such sessions in the background (:meth:`WarmSessions.prepare`), and each
receiver that opens meanwhile takes one (:meth:`WarmSessions.take`) and only attaches its link on it
(:func:`adopt`): 16 links in 8-17 ms on this machine. The sessions nobody took are closed ``ttl`` seconds after the
last round that awaited, and when the hub closes; a steady consumer group prepares none.

It uses private parts of azure-eventhub's pyamqp, like :mod:`rxhubs.transport._direct`, and is guarded the same
way: a part missing, a session that failed to open or whose connection is not open any more, and the receiver
opens its own connection as before.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections import deque
from collections.abc import Coroutine
from typing import Any

from rxhubs.transport._liveness import own_the_decision

__all__ = ["WarmSessions", "adopt", "close_session", "open_session"]

_log = logging.getLogger("rxhubs.transport.azure")

#: The parts of a pyamqp receive client that hold its connection, session and authentication.
_SESSION_PARTS = ("_connection", "_session", "_cbs_authenticator", "_external_connection", "_shutdown")
#: Upper bound on closing one warm session.
_CLOSE_BOUND = 5.0


class WarmSessions:
    """Receive sessions opened ahead, per consumer group, for the receivers of one hub.

    Args:
        clients: Makes a new SDK consumer client for a consumer group (``SdkClients.consumer``).
        open_timeout: Seconds opening one session may take (the liveness ``open_timeout``).

    Example:
        >>> sessions = WarmSessions(lambda group: None, open_timeout=10.0)
        >>> sessions.take("$Default") is None, sessions.ready("$Default")
        (True, 0)
    """

    def __init__(self, clients: Any, open_timeout: float) -> None:
        self._clients = clients
        self._open_timeout = open_timeout
        self._ready: dict[str, deque[Any]] = {}
        self._until: dict[str, float] = {}
        self._opening: dict[str, int] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False
        #: Sessions opened, taken by a receiver, and closed unused, so far.
        self.opened = self.taken = self.expired = 0

    def ready(self, consumer_group: str) -> int:
        """Sessions ready to be taken for ``consumer_group``."""
        return len(self._ready.get(consumer_group, ()))

    def prepare(self, consumer_group: str, count: int, ttl: float) -> None:
        """Have ``count`` sessions ready or opening for ``consumer_group`` (more are not closed).

        The group's sessions are kept until ``ttl`` seconds after the last call (each balancing round that awaits a
        handover calls it again), then closed. Called from the event loop; without a running loop, or once closed,
        it does nothing.
        """
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        if self._closed:
            return
        self._until[consumer_group] = loop.time() + ttl
        loop.call_later(ttl, self._expire, consumer_group)
        missing = count - self.ready(consumer_group) - self._opening.get(consumer_group, 0)
        for _ in range(max(0, missing)):
            self._opening[consumer_group] = self._opening.get(consumer_group, 0) + 1
            self._spawn(self._open(consumer_group))

    def take(self, consumer_group: str) -> Any | None:
        """A ready session's pyamqp receive client (its link not attached), or None."""
        ready = self._ready.get(consumer_group)
        while ready:
            handler = ready.popleft()
            if _open(handler):
                self.taken += 1
                return handler
            self._spawn(close_session(handler))
        return None

    async def close(self) -> None:
        """Close every session not taken and stop opening more; idempotent."""
        self._closed = True
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        handlers = [h for ready in self._ready.values() for h in ready]
        self._ready.clear()
        await asyncio.gather(*(close_session(h) for h in handlers), return_exceptions=True)

    async def _open(self, consumer_group: str) -> None:
        try:
            async with asyncio.timeout(self._open_timeout):
                handler = await open_session(self._clients.consumer(consumer_group), consumer_group)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the receivers open their own connections, as without warm sessions
            _log.debug("opening a warm session for %s failed: %r", consumer_group, exc)
            return
        finally:
            self._opening[consumer_group] -= 1
        if handler is None:
            return
        if self._closed or asyncio.get_running_loop().time() >= self._until.get(consumer_group, 0.0):
            await close_session(handler)
            return
        self._ready.setdefault(consumer_group, deque()).append(handler)
        self.opened += 1

    def _expire(self, consumer_group: str) -> None:
        """Close the group's sessions if no :meth:`prepare` came within its ``ttl``."""
        if asyncio.get_running_loop().time() < self._until.get(consumer_group, 0.0):
            return
        ready = self._ready.pop(consumer_group, deque())
        self.expired += len(ready)
        for handler in ready:
            self._spawn(close_session(handler))

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work, name="rxhubs-warm-session")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


async def _never_called(*_: Any) -> None:  # the SDK's consumer wants a callback; this one never receives
    return None


async def open_session(client: Any, consumer_group: str) -> Any | None:
    """A pyamqp receive client of ``client`` with its connection, session and CBS token open, its link not attached.

    None when the SDK's private parts are not there. The placeholder partition ("0") is never attached: the
    receiver that takes the session attaches its own link (:func:`adopt`).
    """
    if not all(hasattr(client, name) for name in ("_create_consumer", "_create_auth_async", "_auth_uri")):
        return None
    consumer = client._create_consumer(
        consumer_group, "0", "-1", _never_called, prefetch=1, owner_level=None,
        track_last_enqueued_event_properties=False, event_position_inclusive=False,
    )
    auth = await client._create_auth_async(auth_uri=client._auth_uri)
    consumer._create_handler(auth)
    handler = consumer._handler
    if not all(hasattr(handler, name) for name in (*_SESSION_PARTS, "open_async", "auth_complete_async")):
        return None
    try:
        await handler.open_async()
        for step in itertools.count():  # each step reads until the service's reply; a long handshake is paced
            if await handler.auth_complete_async():
                break
            await asyncio.sleep(0.0 if step < 32 else 0.002)
    except BaseException:
        await close_session(handler)
        raise
    # It is not read until a receiver takes it: pyamqp's own idle check would close it at that first read ("No frame
    # received for the idle timeout"), so it is off, as on every receiver's connection once it is open; the
    # receiver's watchdog decides (rxhubs.transport._liveness).
    own_the_decision(handler._connection)
    return handler


def adopt(handler: Any, warm: Any) -> bool:
    """Move ``warm``'s open connection, session and CBS token to ``handler`` (not opened yet); False if it cannot.

    ``handler`` then owns them (closing it closes the connection) and only has to attach its link.
    """
    if not all(hasattr(handler, n) and hasattr(warm, n) for n in _SESSION_PARTS) or handler._session is not None:
        return False
    if warm._session is None or not _open(warm):
        return False
    handler._connection, handler._session = warm._connection, warm._session
    handler._cbs_authenticator = warm._cbs_authenticator
    handler._external_connection, handler._shutdown = False, False
    warm._connection = warm._session = warm._cbs_authenticator = None
    keep_alive = getattr(warm, "_keep_alive_thread", None)
    if keep_alive is not None:  # it pings the connection it no longer has; the handler runs its own
        keep_alive.cancel()
        warm._keep_alive_thread = None
    if getattr(handler, "_keep_alive_interval", None) and getattr(handler, "_keep_alive_thread", False) is None:
        handler._keep_alive_thread = asyncio.ensure_future(handler._keep_alive_async())
    trace = getattr(handler, "_network_trace_params", None)
    if isinstance(trace, dict):
        trace["amqpConnection"] = getattr(handler._connection, "_container_id", "")
        trace["amqpSession"] = getattr(handler._session, "name", "")
    return True


def _open(handler: Any) -> bool:
    """Whether the session's connection is still open, as far as it has read."""
    state = getattr(getattr(handler, "_connection", None), "state", None)
    return getattr(state, "name", None) == "OPENED"


async def close_session(handler: Any) -> None:
    """Close a session that was not used (best effort, bounded)."""
    try:
        await asyncio.wait_for(handler.close_async(), _CLOSE_BOUND)
    except Exception as exc:  # best effort: the session was never used
        _log.debug("closing a warm session failed: %r", exc)
