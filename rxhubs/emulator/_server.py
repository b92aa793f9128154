"""The listening socket and the hubs it serves."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path

from rxhubs.emulator._connection import Connection
from rxhubs.emulator._hubs import Hub
from rxhubs.emulator._sasl import SaslCheck, plain_checker

_LOG = logging.getLogger("rxhubs.emulator")
MAX_CONNECTIONS = 1024


class Server:
    """Accepts AMQP connections on ``host:port`` and serves ``hubs`` to them."""

    def __init__(self, hubs: dict[str, int], *, consumer_groups: tuple[str, ...], data_dir: Path | None,
                 key_name: str, key: str, verify_key: bool, idle_timeout: float | None) -> None:
        self.hubs = {name: Hub(name, count, consumer_groups, data_dir) for name, count in hubs.items()}
        self.key_name = key_name
        self.verify_key = key if verify_key else None
        self.sasl_check: SaslCheck | None = plain_checker(key_name, key) if verify_key else None
        self.idle_timeout = idle_timeout
        self.connections: set[Connection] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None

    async def start(self, host: str, port: int) -> int:
        self._server = await asyncio.start_server(self._accept, host, port, limit=2**16)
        sock = self._server.sockets[0]
        return int(sock.getsockname()[1])

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
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
        for hub in self.hubs.values():
            hub.close()
