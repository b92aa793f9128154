"""One client connection: SASL, the AMQP open/begin/attach dance, frame dispatch, heartbeats, limits.

Anything malformed closes this connection only (with an AMQP error when the peer can still read one);
nothing a client sends can grow memory without bound: frames are capped by the advertised max frame size,
partly received messages by a per-connection budget, and outgoing deliveries wait for the socket to drain.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import math
import struct
import time
from typing import TYPE_CHECKING

from rxhubs.emulator import _frames as fr
from rxhubs.emulator import _management
from rxhubs.emulator._amqp_session import (
    HANDLE_MAX,
    SESSION_WINDOW,
    ProtocolError,
    Session,
)
from rxhubs.emulator._codec import DecodeError
from rxhubs.emulator._roles import Writer
from rxhubs.emulator._sasl import negotiate

if TYPE_CHECKING:
    from rxhubs.emulator._roles import ServerRole

_LOG = logging.getLogger("rxhubs.emulator")

MAX_FRAME_SIZE = 1024 * 1024 + 4096
CHANNEL_MAX = 255
PARTIAL_BUDGET = 16 * 1024 * 1024
HANDSHAKE_TIMEOUT = 30.0
_HDR = struct.Struct(">IBBH")
_IDS = itertools.count(1)
FORCED_CLOSE_GRACE = 1.0  # seconds a peer gets to read a close the server sent before the socket closes


class Connection:
    """Serves one TCP connection until the peer closes it, it misbehaves or the server stops."""

    def __init__(self, server: ServerRole, reader: asyncio.StreamReader, writer: Writer) -> None:
        self.server = server
        self.reader = reader
        self.writer = writer
        self.sessions: dict[int, Session] = {}  # by the peer's channel
        self.peer_max_frame = 512
        self.peer_idle_timeout: float | None = None
        self.last_received = time.monotonic()
        self.last_sent = time.monotonic()
        self.partial_bytes = 0
        self.grants: list[tuple[str, float]] = []  # entity paths authorized by tokens, and until when
        self.opened = False
        self.closing = False
        self.id = next(_IDS)
        self.close_condition: str | None = None  # the error of a close the server sent
        self._finished = asyncio.Event()
        self._loop = asyncio.get_running_loop()

    # ------------------------------------------------------------------ output
    def write(self, data: bytes | bytearray) -> None:
        if self.writer.is_closing():
            return
        self.writer.write(data)
        self.last_sent = time.monotonic()

    async def drain(self) -> None:
        await self.writer.drain()

    def reserve_partial(self, n: int) -> None:
        self.partial_bytes += n
        if self.partial_bytes > max(PARTIAL_BUDGET, 2 * self.server.max_message_size):  # (20 MiB on Dedicated)
            raise ProtocolError(fr.RESOURCE_LIMIT, "Too many bytes of unfinished messages on this connection.")

    def release_partial(self, n: int) -> None:
        self.partial_bytes = max(0, self.partial_bytes - n)

    # ------------------------------------------------------------------ authorization
    def grant(self, path: str, until: float) -> None:
        """Authorize ``path`` ("" for the whole namespace) on this connection until ``until`` (epoch s)."""
        self.grants = [(p, t) for p, t in self.grants if p != path and t > time.time()] + [(path, until)]

    def authorized(self, entity: str) -> bool:
        """Whether this connection may use ``entity`` (a hub name or address): always, without SAS keys."""
        if self.server.keys is None:
            return True
        wanted, now = _management.resource_path(entity), time.time()
        return any(t > now and _management.covers(p, wanted) for p, t in self.grants)

    # ------------------------------------------------------------------ lifecycle
    async def serve(self) -> None:
        ticker: asyncio.Task[None] | None = None
        try:
            async with asyncio.timeout(HANDSHAKE_TIMEOUT):  # a silent peer cannot hold a connection forever
                mechanism = await negotiate(self.reader, self.writer, self.server.sasl_check)
                if mechanism is None:
                    return
                if mechanism == "PLAIN" and self.server.keys is not None:  # checked: a key name and its key
                    self.grant("", float("inf"))
            ticker = asyncio.get_running_loop().create_task(self._tick())
            await self._read_frames()
        except ProtocolError as exc:
            _LOG.info("closing a connection: %s (%s)", exc.condition, exc.description)
            self.write(fr.close_frame(fr.error(exc.condition, exc.description)))
        except DecodeError as exc:
            _LOG.info("closing a connection: undecodable frame (%s)", exc)
            self.write(fr.close_frame(fr.error(fr.DECODE_ERROR, str(exc))))
        except (asyncio.IncompleteReadError, ConnectionError, OSError, asyncio.LimitOverrunError, TimeoutError):
            pass
        except asyncio.CancelledError:
            raise
        except Exception:
            _LOG.exception("connection handler failed; closing the connection")
            self.write(fr.close_frame(fr.error(fr.INTERNAL_ERROR, "The emulator hit an internal error.")))
        finally:
            if ticker is not None:
                ticker.cancel()
            self._teardown()
            self._finished.set()
            with contextlib.suppress(Exception):
                self.writer.close()

    def _teardown(self) -> None:
        for session in list(self.sessions.values()):
            session.unmap()
        self.sessions.clear()

    async def shutdown(self) -> None:
        """Close the connection from the server side (the emulator is stopping)."""
        if self.closing:
            return
        self.closing = True
        self.close_condition = fr.CONNECTION_FORCED
        if self.opened:
            for session in list(self.sessions.values()):
                for link in list(session.links.values()):
                    link.detach(fr.DETACH_FORCED, "The emulator is shutting down.")
            self.write(fr.close_frame(fr.error(fr.CONNECTION_FORCED, "The emulator is shutting down.")))
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.writer.drain(), 1.0)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._finished.wait(), 1.0)
        self.writer.close()

    def force_close(self, condition: str, description: str) -> None:
        """Close from the server side now, with an error (a fault the emulator is told to inject).

        The close frame goes out at once and every link is torn down; the socket closes when the peer answers
        with its close, or after :data:`FORCED_CLOSE_GRACE` seconds.
        """
        if self.closing:
            return
        self.closing = True
        self.close_condition = condition
        if self.opened:
            self.write(fr.close_frame(fr.error(condition, description)))
        self._teardown()
        self._loop.call_later(FORCED_CLOSE_GRACE, self.writer.close)

    async def _tick(self) -> None:
        """Send heartbeats at half the peer's idle timeout; close when the peer is silent past ours.

        It sleeps until the next of the two is due (a second at most before the peer's Open says its timeout):
        a thousand connections that each woke every second kept the emulator busy with nothing to send.
        """
        ours = self.server.idle_timeout
        while True:
            peer = self.peer_idle_timeout
            now = time.monotonic()
            due = [t for t in (self.last_sent + peer / 2 if peer else None,
                               self.last_received + ours if ours else None) if t is not None]
            await asyncio.sleep(max(min([*due, now + (1.0 if peer is None else math.inf)]) - now, 0.05))
            now = time.monotonic()
            if peer and now - self.last_sent >= peer / 2:
                self.write(fr.EMPTY_FRAME)
            if ours and now - self.last_received > ours:
                _LOG.info("closing a connection idle for more than %.0f s", ours)
                self.write(fr.close_frame(fr.error(fr.RESOURCE_LIMIT, "Connection idle timeout exceeded.")))
                self.writer.close()
                return

    # ------------------------------------------------------------------ input
    async def _read_frames(self) -> None:
        reader = self.reader
        while True:
            head = await reader.readexactly(8)
            size, doff, ftype, channel = _HDR.unpack(head)
            self.last_received = time.monotonic()
            if size < 8 or doff < 2 or doff * 4 > size:
                raise ProtocolError(fr.FRAMING_ERROR, "Malformed frame header.")
            if size > MAX_FRAME_SIZE:
                raise ProtocolError(fr.FRAMING_ERROR, f"Frame of {size} bytes exceeds the max frame size.")
            rest = await reader.readexactly(size - 8) if size > 8 else b""
            if ftype != fr.AMQP_FRAME:
                raise ProtocolError(fr.FRAMING_ERROR, "Unexpected frame type.")
            body = rest[doff * 4 - 8 :]
            if not body:
                continue  # heartbeat
            perf = fr.decode_performative(body)
            if self.closing and perf.code != fr.CLOSE:
                continue  # the server closed the connection: only the peer's close matters now
            if not self.opened:
                if perf.code != fr.OPEN:
                    raise ProtocolError(fr.NOT_ALLOWED, "The first frame must be open.")
                self._on_open(perf)
                continue
            if perf.code == fr.CLOSE:
                if not self.closing:
                    self.closing = True
                    self._teardown()
                    self.write(fr.close_frame())
                await self._drain_quietly()
                return
            if perf.code == fr.BEGIN:
                self._on_begin(channel, perf)
            elif perf.code in (fr.END, fr.ATTACH, fr.FLOW, fr.TRANSFER, fr.DISPOSITION, fr.DETACH):
                session = self.sessions.get(channel)
                if session is None:
                    # The SDK sends detaches after ending a session; frames for a gone session are dropped.
                    _LOG.debug("ignoring a frame for channel %d, which has no session", channel)
                elif perf.code == fr.END:
                    session.unmap()
                    del self.sessions[channel]
                    self.write(fr.end_frame(session.channel))
                else:
                    session.on_frame(perf, body)
            elif perf.code == fr.OPEN:
                raise ProtocolError(fr.NOT_ALLOWED, "The connection is already open.")
            else:
                raise ProtocolError(fr.NOT_ALLOWED, f"Unexpected performative 0x{perf.code:02x}.")
            if self.writer.transport.get_write_buffer_size() > 4 * MAX_FRAME_SIZE:
                await self.writer.drain()

    async def _drain_quietly(self) -> None:
        # asyncio.timeout, not wait_for: on 3.11 wait_for runs drain() in a task of its own, and a peer gone
        # mid-drain (a promotion closes every connection) left "Task exception was never retrieved" on stderr.
        with contextlib.suppress(Exception):
            async with asyncio.timeout(1.0):
                await self.writer.drain()

    def _on_open(self, perf: fr.Performative) -> None:
        max_frame = perf.field(2)
        self.peer_max_frame = max_frame if isinstance(max_frame, int) and max_frame >= 512 else 4294967295
        self.peer_max_frame = min(self.peer_max_frame, 4 * 1024 * 1024)
        idle = perf.field(4)
        if isinstance(idle, int) and idle > 0:
            self.peer_idle_timeout = max(idle / 1000.0, 0.2)
        self.opened = True
        idle_ms = int(self.server.idle_timeout * 1000) if self.server.idle_timeout else None
        self.write(fr.open_frame("rxhubs-emulator", MAX_FRAME_SIZE, CHANNEL_MAX, idle_ms))

    def _on_begin(self, channel: int, perf: fr.Performative) -> None:
        if channel in self.sessions:
            raise ProtocolError(fr.NOT_ALLOWED, f"Channel {channel} already has a session.")
        if perf.field(0) is not None:
            raise ProtocolError(fr.NOT_ALLOWED, "The emulator does not begin sessions.")
        used = {s.channel for s in self.sessions.values()}
        ours = next((c for c in range(CHANNEL_MAX + 1) if c not in used), None)
        if ours is None or channel > CHANNEL_MAX:
            raise ProtocolError(fr.RESOURCE_LIMIT, "Too many sessions on this connection.")
        next_id, window = perf.field(1), perf.field(2)
        session = Session(self, ours, next_id if isinstance(next_id, int) else 0,
                          window if isinstance(window, int) else 0)
        self.sessions[channel] = session
        self.write(fr.begin_frame(ours, channel, 0, SESSION_WINDOW, SESSION_WINDOW, HANDLE_MAX))
