"""The listening socket and the hubs it serves."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path
from typing import TYPE_CHECKING

from rxhubs.emulator._connection import Connection
from rxhubs.emulator._fault_state import FaultState, LinkLog
from rxhubs.emulator._geo import Replication
from rxhubs.emulator._hub import Hub
from rxhubs.emulator._identity import LocalIdentity
from rxhubs.emulator._retention import Retention
from rxhubs.emulator._roles import Writer
from rxhubs.emulator._sasl import SaslCheck, plain_checker

if TYPE_CHECKING:
    from rxhubs.emulator._websocket import WebSocketListener

_LOG = logging.getLogger("rxhubs.emulator")
#: Connections open at once (a Standard namespace's quota is 5,000 AMQP connections). azure-eventhub's producer
#: opens a connection per partition it sends to: one producer sending to every partition of a 1,024-partition hub
#: needs 1,024 by itself (``rxhubs bench scale --real``).
MAX_CONNECTIONS = 5000


class Server:
    """Accepts AMQP connections on ``host:port`` and serves ``hubs`` to them."""

    def __init__(self, hubs: dict[str, int], *, consumer_groups: tuple[str, ...], data_dir: Path | None,
                 keys: dict[str, str] | None, idle_timeout: float | None,
                 refuse_consumers_at_attach: bool = False, faults: FaultState | None = None,
                 link_log: LinkLog | None = None, identities: tuple[LocalIdentity, ...] = (),
                 retention: dict[str, Retention] | None = None, max_message_size: int = 1024 * 1024) -> None:
        kept = retention or {}
        self.hubs = {name: Hub(name, count, consumer_groups, data_dir, kept.get(name)) for name, count in hubs.items()}
        self.max_message_size = max_message_size  # what a producer may send in one message (advertised at attach)
        self.replication = Replication(data_dir)  # geo-replication: the segment a promotion moves to (_geo)
        for hub in self.hubs.values():
            self.replication.apply(hub)
        self.faults = faults or FaultState()  # server-busy windows in force (see rxhubs.emulator._faults)
        self.link_log = link_log or LinkLog()  # every consumer link attach, detach and refusal
        self._by_folded = {name.casefold(): hub for name, hub in self.hubs.items()}
        if identities and keys is None:
            keys = {}  # identities require authentication: no SAS key is accepted unless given
        self.keys = keys  # SAS key names and keys to check tokens against; None accepts any token
        self.identities = identities  # local Entra ID identities whose bearer tokens (JWT) are accepted
        self.sasl_check: SaslCheck | None = plain_checker(keys) if keys is not None else None
        self.idle_timeout = idle_timeout
        self.refuse_consumers_at_attach = refuse_consumers_at_attach
        self.connections: set[Connection] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None
        self._websocket: WebSocketListener | None = None

    def hub(self, name: str) -> Hub | None:
        """The hub called ``name``, ignoring case as the service does (None when unknown)."""
        return self._by_folded.get(name.casefold())

    async def start(self, host: str, port: int, websocket_port: int | None = None) -> tuple[int, int | None]:
        """Listen for AMQP on ``port`` and, when asked, AMQP over WebSockets on ``websocket_port``.

        Returns:
            The two ports (the second None without WebSockets).
        """
        self._server = await asyncio.start_server(self.serve_connection, host, port, limit=2**16)
        sock = self._server.sockets[0]
        ws_port = None
        if websocket_port is not None:
            from rxhubs.emulator._websocket import WebSocketListener

            self._websocket = WebSocketListener(self)
            ws_port = await self._websocket.start(host, websocket_port)
        return int(sock.getsockname()[1]), ws_port

    async def serve_connection(self, reader: asyncio.StreamReader, writer: Writer) -> None:
        """Serve one client connection (a TCP stream, or a WebSocket's) until it ends."""
        if len(self.connections) >= MAX_CONNECTIONS:
            _LOG.warning("refusing a connection: %d are open already", MAX_CONNECTIONS)
            writer.close()
            return
        conn = Connection(self, reader, writer)
        self.connections.add(conn)
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            await conn.serve()
        finally:
            self.connections.discard(conn)
            if task is not None:
                self._tasks.discard(task)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        if self._websocket is not None:
            self._websocket.stop_accepting()
        await asyncio.gather(*(c.shutdown() for c in list(self.connections)), return_exceptions=True)
        if self._tasks:
            _done, pending = await asyncio.wait(set(self._tasks), timeout=2.0)
            for task in pending:
                task.cancel()
            for task in pending:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2.0)
        if self._websocket is not None:
            await self._websocket.stop()
        for hub in self.hubs.values():
            hub.close()
