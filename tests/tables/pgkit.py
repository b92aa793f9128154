"""PostgreSQL through the unmodified drivers (pg8000, psycopg), with real faults: the server ends a backend, the
network drops COMMIT's answer. See tests/support/postgres.py for the server."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rxhubs.tables import SqlSink
from rxhubs.testing import FaultProxy
from tests.support.postgres import Postgres

DRIVERS = ("pg8000", "psycopg")
#: Bytes the server answers pg8000's COMMIT with before its CommandComplete: ParseComplete and ReadyForQuery
#: (11), ParameterDescription, NoData and ReadyForQuery (18), BindComplete (5).
_PG8000_COMMIT_PREAMBLE = 34


def connector(driver: str, host: str, port: int, database: str, *, setup: str | None = None,
              autocommit: bool = False) -> Callable[[], Any]:
    """Opens a plain connection of ``driver`` (``setup``: a statement run and committed first)."""

    def connect() -> Any:
        if driver == "pg8000":
            import pg8000.dbapi

            connection = pg8000.dbapi.connect(user="postgres", host=host, port=port, database=database, timeout=30)
        else:
            import psycopg

            connection = psycopg.connect(host=host, port=port, user="postgres", dbname=database, connect_timeout=30)
        if setup:
            cursor = connection.cursor()
            cursor.execute(setup)
            connection.commit()
        connection.autocommit = autocommit
        return connection

    return connect


def pg_sink(connect: Callable[[], Any], **options: Any) -> SqlSink:
    return SqlSink(connect, paramstyle="format", blob_type="BYTEA", **options)


def numbers(server: Postgres, database: str, partition_id: str = "0", table: str = "rxhubs_events") -> list[int]:
    with server.admin(database) as db:
        rows = db.run(f'SELECT "sequenceNumber" FROM {table} WHERE partition = :p ORDER BY "sequenceNumber"',
                      p=partition_id)
    return [int(n) for (n,) in rows]


def position(server: Postgres, database: str, partition_id: str = "0") -> int | None:
    with server.admin(database) as db:
        rows = db.run("SELECT sequence_number FROM rxhubs_positions WHERE partition_id = :p", p=partition_id)
    return None if not rows else int(rows[0][0])


class ProxyThread:
    """A :class:`~rxhubs.testing.FaultProxy` in front of the server, on an event loop of its own thread."""

    def __init__(self, server: Postgres) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="pg-proxy", daemon=True)
        self.thread.start()
        self.proxy = FaultProxy(server.host, server.port)
        asyncio.run_coroutine_threadsafe(self.proxy.start(), self.loop).result(30)

    def close(self) -> None:
        try:
            asyncio.run_coroutine_threadsafe(self.proxy.stop(), self.loop).result(30)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(30)
            self.loop.close()


@dataclass
class Faults:
    """Faults armed by step name for one writer's connections; ``felt`` lists the ones that fired.

    ``on_read`` runs right after a position was read (a test makes another writer commit there), ``on_move``
    right after a position was moved (its row locked): each once.
    """

    server: Postgres
    proxy: FaultProxy | None = None
    armed: set[str] = field(default_factory=set)
    felt: list[str] = field(default_factory=list)
    on_read: Callable[[], None] | None = None
    on_move: Callable[[], None] | None = None
    pids: list[int] = field(default_factory=list)

    def take(self, step: str) -> bool:
        if step in self.armed:
            self.armed.discard(step)
            self.felt.append(step)
            return True
        return False


class KilledConnection:
    """A real driver connection whose steps fail for real when armed:

    * ``before_write``: the server ends the backend (``pg_terminate_backend``) before the rows are written;
    * ``before_commit``: the same, after the rows and positions, before COMMIT (nothing lands);
    * ``commit_lost``: COMMIT lands, and the proxy resets the connection instead of passing its answer on.
    """

    def __init__(self, connect: Callable[[], Any], faults: Faults) -> None:
        self.inner, self.faults = connect(), faults
        cursor = self.inner.cursor()
        cursor.execute("SELECT pg_backend_pid()")
        self.pid = int(cursor.fetchone()[0])
        self.inner.rollback()
        faults.pids.append(self.pid)

    def _kill(self) -> None:
        assert self.faults.server.terminate(self.pid), "the backend to end was not there"

    def cursor(self) -> _Cursor:
        return _Cursor(self.inner.cursor(), self)

    def commit(self) -> None:
        if self.faults.take("before_commit"):
            self._kill()
        if not self.faults.take("commit_lost"):
            self.inner.commit()
            return
        proxy = self.faults.proxy
        assert proxy is not None, "commit_lost needs the connection to go through a proxy"
        cut = proxy.stats.connections_cut
        # COMMIT goes up and lands; its answer never comes back. psycopg sends it as one simple query; pg8000 in
        # three round trips (parse, describe, then bind and execute): let the first two answers through.
        before = _PG8000_COMMIT_PREAMBLE if type(self.inner).__module__.startswith("pg8000") else 0
        proxy.cut_after(before, "downstream")
        try:
            self.inner.commit()
        finally:
            proxy.heal()
        raise AssertionError(f"COMMIT's answer came through the cut (cuts: {cut} -> {proxy.stats.connections_cut})")

    def rollback(self) -> None:
        self.inner.rollback()

    def close(self) -> None:
        self.inner.close()

    @property
    def autocommit(self) -> bool:
        return bool(self.inner.autocommit)

    @autocommit.setter
    def autocommit(self, value: bool) -> None:
        self.inner.autocommit = value


class _Cursor:
    def __init__(self, inner: Any, owner: KilledConnection) -> None:
        self.inner, self.owner = inner, owner

    def execute(self, sql: str, params: Any = None) -> Any:
        result = self.inner.execute(sql) if params is None else self.inner.execute(sql, params)
        faults = self.owner.faults
        if sql.startswith("SELECT sequence_number") and faults.on_read is not None:
            hook, faults.on_read = faults.on_read, None
            hook()
        if sql.startswith("UPDATE rxhubs_positions") and faults.on_move is not None:
            hook, faults.on_move = faults.on_move, None
            hook()
        return result

    def executemany(self, sql: str, params: Any) -> Any:
        if sql.startswith("INSERT INTO rxhubs_events") and self.owner.faults.take("before_write"):
            self.owner._kill()
        return self.inner.executemany(sql, params)

    def fetchone(self) -> Any:
        return self.inner.fetchone()

    @property
    def rowcount(self) -> int:
        return int(self.inner.rowcount)
