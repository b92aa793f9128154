"""AMQP over WebSockets: the service's ``/$servicebus/websocket`` endpoint (subprotocol ``AMQPWSB10``).

Served with aiohttp (a dependency of rxhubs already), imported only when a WebSocket port is asked for. Each
WebSocket carries one AMQP connection as a byte stream in binary messages (the AMQP WebSocket binding), so
the same :class:`~rxhubs.emulator._connection.Connection` serves it through a small reader/writer adapter:
incoming binary messages feed an :class:`asyncio.StreamReader`; writes are buffered and sent in order by one
task, and ``drain`` waits while more than a high-water mark is queued, as a stream writer does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aiohttp import web

    from rxhubs.emulator._roles import ServerRole

_LOG = logging.getLogger("rxhubs.emulator")

PATH = "/$servicebus/websocket"
SUBPROTOCOL = "AMQPWSB10"
HIGH_WATER = 256 * 1024
CHUNK = 256 * 1024  # bytes per WebSocket message the emulator sends
MAX_MESSAGE = 8 * 1024 * 1024  # a client's message holds at most a few frames of at most ~1 MiB


class WebSocketWriter:
    """The write side of a WebSocket, shaped like the parts of :class:`asyncio.StreamWriter` a connection uses."""

    def __init__(self, ws: web.WebSocketResponse) -> None:
        self._ws = ws
        self._buffer = bytearray()
        self._wake = asyncio.Event()
        self._flushed = asyncio.Event()
        self._flushed.set()
        self._closing = False
        self._failed = False
        self._task = asyncio.get_running_loop().create_task(self._send_loop(), name="emulator-websocket-writer")

    @property
    def transport(self) -> WebSocketWriter:
        return self

    def get_write_buffer_size(self) -> int:
        return len(self._buffer)

    def write(self, data: bytes | bytearray) -> None:
        if self._closing or self._failed:
            return
        self._buffer += data
        self._flushed.clear()
        self._wake.set()

    def is_closing(self) -> bool:
        return self._closing or self._failed or self._ws.closed

    async def drain(self) -> None:
        if len(self._buffer) > HIGH_WATER:
            await self._flushed.wait()
        if self._failed:
            raise ConnectionResetError("the WebSocket is closed")

    def close(self) -> None:
        self._closing = True
        self._wake.set()  # the send loop flushes what is queued, then closes the WebSocket

    async def wait_closed(self) -> None:
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.shield(self._task)

    async def _send_loop(self) -> None:
        try:
            while True:
                await self._wake.wait()
                self._wake.clear()
                while self._buffer:
                    chunk = bytes(self._buffer[:CHUNK])
                    del self._buffer[:CHUNK]
                    await self._ws.send_bytes(chunk)
                self._flushed.set()
                if self._closing:
                    await self._ws.close()
                    return
        except (ConnectionError, OSError, RuntimeError):  # aiohttp raises these once the peer has gone
            self._failed = True
            self._buffer.clear()
            self._flushed.set()


async def _pump(ws: web.WebSocketResponse, reader: asyncio.StreamReader) -> None:
    """Feed the binary messages of ``ws`` to ``reader``; end of stream when the WebSocket closes."""
    from aiohttp import WSMsgType

    try:
        async for message in ws:
            if message.type == WSMsgType.BINARY:
                reader.feed_data(message.data)
            else:  # AMQP travels in binary messages only; anything else ends the connection
                break
    finally:
        reader.feed_eof()


class WebSocketListener:
    """An HTTP listener that upgrades ``GET /$servicebus/websocket`` to AMQP connections of ``server``."""

    def __init__(self, server: ServerRole) -> None:
        self.server = server
        self._runner: web.AppRunner | None = None
        self._accepting = True

    def stop_accepting(self) -> None:
        """Refuse new WebSockets from now on (the emulator is stopping)."""
        self._accepting = False

    async def start(self, host: str, port: int, ssl_context: Any = None) -> int:
        """Listen on ``host:port`` (0: a free port; over TLS with ``ssl_context``: ``wss://``); returns the port.

        Raises:
            OSError: The port cannot be bound.
        """
        from aiohttp import web

        app = web.Application()
        app.router.add_get(PATH, self._handle)
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
            site = web.SockSite(runner, sock, ssl_context=ssl_context)
            await site.start()
        except BaseException:
            sock.close()
            await runner.cleanup()
            raise
        self._runner = runner
        return int(sock.getsockname()[1])

    async def _handle(self, request: web.Request) -> Any:
        from aiohttp import web

        if not self._accepting:
            return web.Response(status=503, text="The emulator is shutting down.\n")
        ws = web.WebSocketResponse(protocols=(SUBPROTOCOL,), max_msg_size=MAX_MESSAGE)
        if not ws.can_prepare(request).ok:
            return web.Response(status=400, text="AMQP over WebSockets: a WebSocket upgrade is required.\n")
        await ws.prepare(request)
        if ws.ws_protocol != SUBPROTOCOL:
            await ws.close(message=f"the {SUBPROTOCOL} subprotocol is required".encode())
            return ws
        reader = asyncio.StreamReader(limit=2**16)
        writer = WebSocketWriter(ws)
        pump = asyncio.get_running_loop().create_task(_pump(ws, reader), name="emulator-websocket-reader")
        try:
            await self.server.serve_connection(reader, writer)
        finally:
            writer.close()
            await writer.wait_closed()
            pump.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await pump
        return ws

    async def stop(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(runner.cleanup(), 5.0)
