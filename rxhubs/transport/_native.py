"""The native receive path: a receive link's socket read in large chunks and parsed by the compiled frame reader.

The SDK keeps what it does well and rarely (connection, TLS, SASL and CBS authentication and token refresh,
attach with owner level and filters, detach, errors). Once the direct path (:mod:`rxhubs.transport._direct`) has
the link attached, :class:`NativeLink` reads the connection's socket itself, tens of KB per await, and hands each
chunk to the compiled :func:`parse <rxhubs.transport._framing_py.parse>` in one call: every complete transfer
frame of the link becomes the same pyamqp ``Message`` the SDK would have built, without pyamqp's per-frame task,
timer, lock and copies; a delivery of several frames (a large event) is joined once its last frame is read.
Session and link bookkeeping (incoming ids and windows, delivery count, credit) is done once per chunk, and
credit is granted back in bulk when half is spent. Every other frame (flow, disposition, detach, end, close,
transfers of other links such as CBS replies, a delivery the SDK had begun to read) goes, in order, to the
SDK's own ``Connection._process_incoming_frame``; when one changes state (a detach: a stolen link, a forced
close) the caller lets the SDK take its next step (``do_work_async``), so errors surface exactly as before.

Between chunks, bytes that do not yet make a whole frame wait in the transport's own read buffer, where pyamqp
looks first: the SDK can read the socket at any step (a token refresh, a handshake) without losing a byte.
Reading holds the transport's socket lock, as pyamqp's reads do. The empty frames the service's idle timeout asks
for are sent from here (the SDK's keep-alive task, which reads the socket on its own, is stopped), the token is
refreshed by the SDK's ``client_ready_async`` (looked at about once a second while bytes come, on an idle link when a
heartbeat or the token's refresh is due, every 15 s at most), and every byte read counts as life for the
watchdog (:mod:`rxhubs.transport._liveness`).

It uses private parts of pyamqp, so :class:`NativeLink` checks every one of them first and raises
``NotImplementedError`` when one is missing (the caller then keeps the SDK's loop), and only plain TCP and TLS
connections qualify (WebSocket connections keep the SDK's loop). See ``docs/transport.md``.
"""

from __future__ import annotations

import asyncio
import io
import logging
import time
from collections.abc import Callable
from typing import Any

from azure.eventhub._pyamqp._decode import decode_frame

from rxhubs.transport._frame_errors import FrameError

__all__ = ["CHUNK", "NativeLink"]

_log = logging.getLogger("rxhubs.transport.azure")

#: Bytes asked of the socket per read (the stream reader hands over what it holds, up to this).
CHUNK = 256 * 1024
#: Longest wait for bytes before looking at heartbeats and the token (seconds) while a link is read busily, and
#: while the token's refresh is due.
_TICK = 1.0
#: Longest wait for bytes on an idle link (seconds), when the service's idle timeout and the token allow it.
_IDLE_TICK = 15.0

_CONNECTION_PARTS = (
    "_transport", "_incoming_endpoints", "_process_incoming_frame", "_get_remote_timeout", "_last_frame_received_time",
)
_SESSION_PARTS = (
    "next_incoming_id", "incoming_window", "remote_outgoing_window", "target_incoming_window", "_outgoing_flow",
    "_input_handles",
)
_LINK_PARTS = ("current_link_credit", "delivery_count", "received_delivery_id", "flow", "_session", "_received_payload")
_TRANSPORT_PARTS = ("reader", "_read_buffer", "socket_lock")


def _missing(thing: Any, names: tuple[str, ...], what: str) -> list[str]:
    return [f"{what}.{name}" for name in names if not hasattr(thing, name)]


def _key_of(mapping: Any, value: Any) -> Any:
    for key, item in mapping.items():
        if item is value:
            return key
    return None


class NativeLink:
    """One attached receive link read natively (see the module docstring).

    ``push(messages)`` takes each chunk's messages, in order (the SDK's own messages go where its callback puts
    them, the same buffer); with a parser of events (``parse_events``), ``push(events, delivery_annotations)``
    (the last event's). ``prefetch`` is the link credit granted back once half of it is spent.
    Raises ``NotImplementedError`` naming the private part that is missing, before any I/O.
    """

    def __init__(self, parse: Callable[..., Any], handler: Any, prefetch: int, push: Callable[..., None]):
        connection: Any = getattr(handler, "_connection", None)
        link: Any = getattr(handler, "_link", None)
        transport: Any = getattr(connection, "_transport", None)
        missing = [
            *_missing(handler, ("client_ready_async",), "client"),
            *_missing(connection, _CONNECTION_PARTS, "connection"),
            *_missing(link, _LINK_PARTS, "link"),
            *_missing(transport, _TRANSPORT_PARTS, "transport"),
        ]
        session: Any = getattr(link, "_session", None)
        missing += _missing(session, _SESSION_PARTS, "session")
        if missing:
            raise NotImplementedError(f"pyamqp has no {', '.join(missing)}")
        if not isinstance(transport.reader, asyncio.StreamReader) or not isinstance(transport._read_buffer, io.BytesIO):
            raise NotImplementedError("the connection is not a plain socket (WebSocket keeps the SDK's loop)")
        channel = _key_of(connection._incoming_endpoints, session)
        handle = _key_of(session._input_handles, link)
        if not isinstance(channel, int) or not isinstance(handle, int):
            raise NotImplementedError("the link's channel or handle is not among the connection's")
        self._parse, self._handler, self._prefetch, self._push = parse, handler, prefetch, push
        self._connection, self._session, self._link, self._transport = connection, session, link, transport
        self._channel, self._handle = channel, handle
        self._ticked = time.monotonic()
        most = getattr(connection, "_max_frame_size", None)  # what our Open allowed the peer to send
        self._max_frame = most if isinstance(most, int) and most >= 512 else 0x7FFFFFFF
        self.messages = 0  # read natively (for tests and the bench)
        self.handed_back = 0  # frames handed to the SDK
        self.grants = 0  # credit granted back
        keep_alive = getattr(handler, "_keep_alive_thread", None)
        if keep_alive is not None:  # it reads the socket on its own: heartbeats are sent from here instead
            keep_alive.cancel()
            handler._keep_alive_thread = None

    async def pump(self, has_room: Callable[[], bool]) -> bool:
        """Read and parse until the receiver is full (returns True) or the SDK must take a step (returns False).

        The SDK's step is due when a frame it processed changed state (a detach, an end, a close), when the
        socket ended (its read raises the error it always raised), and about once a second when idle, for its
        token refresh and link checks (when those are not ready).
        """
        connection, transport = self._connection, self._transport
        lock = transport.socket_lock
        while has_room():
            await self._flow()
            async with lock:
                data = transport._read_buffer.read()
                messages, consumed, other, last, frames, tail = self._parsed(data) if data else _NOTHING
                if not messages and other is None:  # no whole frame (or delivery) held: read the socket
                    at, need = _first_incomplete(data, consumed)
                    self._check_size(data, at)
                    try:
                        async with asyncio.timeout(self._tick_every()):
                            chunk = await (transport.reader.read(CHUNK) if need <= CHUNK  # a large frame:
                                           else transport.reader.readexactly(need))  # read whole, in one await
                    except TimeoutError:
                        chunk = None
                    except asyncio.IncompleteReadError as exc:  # the socket ended inside a large frame
                        data, chunk = data + exc.partial, b""
                    except OSError:
                        chunk = b""
                    except BaseException:  # cancelled (a receiver closing): the SDK may still read what is held
                        transport._read_buffer = io.BytesIO(data)
                        raise
                    if chunk == b"":  # the socket ended or failed: the SDK's own read raises what it always did
                        transport._read_buffer = io.BytesIO(data)
                        return False
                    if chunk:
                        connection._last_frame_received_time = time.time()  # every byte is a sign of life
                        data = data + chunk if data else chunk
                        messages, consumed, other, last, frames, tail = self._parsed(data)
                transport._read_buffer = io.BytesIO(data[consumed:] if consumed else data)
            if messages:
                await self._delivered(messages, last, frames, tail)
            if other is not None and await self._hand_back(*other):
                return False
            if time.monotonic() - self._ticked >= _TICK and not await self._tick():
                return False
        return True

    def _parsed(self, data: bytes) -> tuple[Any, int, Any, Any, int, Any]:
        """The compiled reader's parse of ``data`` (``parse_events`` or ``parse_frames``; the tail: :data:`_NO_TAIL`).

        While the SDK's link holds part of a delivery (it read the first frames itself, in one of its steps), the
        next whole frame goes to the SDK instead.
        """
        if self._link._received_payload and len(data) >= 8:
            size = int.from_bytes(data[:4], "big")
            if 8 <= size <= len(data):
                return [], size, (int.from_bytes(data[6:8], "big"), data[:size]), None, 0, _NO_TAIL
            return _NOTHING
        out = self._parse(data, self._channel, self._handle)
        if len(out) == 6:  # parse_events: the last event's delivery annotations
            return out  # type: ignore[no-any-return]
        if len(out) == 4:  # a parser without frame counts (the Spark source's builder: one frame per event)
            return (*out, out[0] if isinstance(out[0], int) else len(out[0]), _NO_TAIL)
        return (*out, _NO_TAIL)

    def _check_size(self, data: bytes, at: int) -> None:
        """An incomplete frame whose size is over the connection's maximum is garbage: never wait for it."""
        if len(data) - at >= 4:
            size = int.from_bytes(data[at:at + 4], "big")
            if size > self._max_frame:  # (a reader that waited would hold up to 2 GB for nothing)
                raise FrameError(f"a frame of {size} bytes, over the connection's maximum of {self._max_frame}")

    def _tick_every(self) -> float:
        """How long an idle link waits for bytes before its next tick.

        Up to :data:`_IDLE_TICK`: within half the time the service's idle timeout allows between our frames (the
        heartbeat is sent at the tick), and no later than the token's refresh is due (a second at most once it is,
        or when the token's expiry cannot be read). A thousand idle links that each woke every second spent a
        tenth of a core on nothing.
        """
        wait = _IDLE_TICK
        remote = getattr(self._connection, "_remote_idle_timeout_send_frame", None)
        if isinstance(remote, int | float) and remote > 0:
            wait = min(wait, remote / 2)
        auth = getattr(self._handler, "_cbs_authenticator", None)
        if auth is not None:
            expires, window = getattr(auth, "_expires_on", None), getattr(auth, "_refresh_window", None)
            if isinstance(expires, int | float) and isinstance(window, int | float):
                wait = min(wait, max(expires - window - time.time(), _TICK))
            else:
                wait = min(wait, _TICK)
        return wait

    async def _tick(self) -> bool:
        """Heartbeat if due, and the SDK's readiness check (token refresh). False: the SDK must take a step."""
        self._ticked = time.monotonic()
        await self._connection._get_remote_timeout(time.time())
        ready: bool = await self._handler.client_ready_async()
        return ready

    async def _delivered(self, messages: list[Any] | int, last: Any, frames: int, tail: Any) -> None:
        """The session's (per transfer frame) and link's (per delivery) bookkeeping, once; then hand them over.

        ``messages`` is a count instead when the parser keeps the events itself (the Spark source's Arrow builder);
        ``tail``: the last event's delivery annotations from ``parse_events`` (:data:`_NO_TAIL` from other parsers).
        """
        n = messages if isinstance(messages, int) else len(messages)
        session, link = self._session, self._link
        session.next_incoming_id += frames
        session.remote_outgoing_window -= frames
        session.incoming_window -= frames
        link.delivery_count += n
        link.current_link_credit -= n
        link.received_delivery_id = last
        self.messages += n
        self._handler._last_activity_timestamp = time.time()
        if tail is _NO_TAIL:
            self._push(messages)
        else:
            self._push(messages, tail)
        if session.incoming_window <= 0:
            session.incoming_window = session.target_incoming_window
            await session._outgoing_flow()

    async def _flow(self) -> None:
        """Grant the link its credit back once half is spent (the SDK waits for none left: a pause per batch)."""
        if self._link.current_link_credit <= self._prefetch // 2:
            self.grants += 1
            await self._link.flow(link_credit=self._prefetch)

    async def _hand_back(self, channel: int, raw: bytes) -> bool:
        """A frame for the SDK, decoded by pyamqp as its own read would; True when it changed state."""
        self.handed_back += 1
        body = memoryview(raw)[8 + raw[4] - 2:]  # where pyamqp's read puts the frame body
        try:
            frame = decode_frame(body)
        except Exception as exc:  # pyamqp would have failed in its read: the same kind of failure, typed
            raise FrameError(f"a frame neither reader decodes ({exc!r})") from exc
        changed: bool = await self._connection._process_incoming_frame(channel, frame)
        return changed


#: What parsers without a tail give (only ``parse_events`` gives the last event's delivery annotations).
_NO_TAIL = object()
_NOTHING: tuple[list[Any], int, None, None, int, Any] = ([], 0, None, None, 0, _NO_TAIL)


def _first_incomplete(data: bytes, at: int) -> tuple[int, int]:
    """Where the first incomplete frame of ``data[at:]`` starts, and the bytes it misses (0: none, or no header)."""
    n = len(data)
    while n - at >= 8:
        size = int.from_bytes(data[at:at + 4], "big")
        if size < 8 or n - at < size:
            return at, max(0, size - (n - at))
        at += size
    return at, 0
