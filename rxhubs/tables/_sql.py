"""SQL tables written exactly once, over any DB-API 2 connection: :class:`SqlSink`, and :class:`SqliteSink`.

One commit is one database transaction: read each partition's position from the positions table, drop the events
at or below it, insert the rest into the events table, and move the position with a compare-and-set
(``UPDATE ... WHERE sequence_number = <the value read>``; an ``INSERT`` when the partition has none yet). If the
compare-and-set changes no row (or the insert hits the primary key), another writer committed that partition
since the read: roll back, read again, filter again, retry. A partition no longer owned by then is dropped.
Rows and positions therefore change together or not at all, whatever the isolation level: a serialization
failure or a deadlock (SQLSTATE 40001, 40P01) is the same conflict. A connection in autocommit is switched out of
it; a connection that failed otherwise is closed and replaced on the next call.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import datetime as _dt
import logging
import re
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, TypeVar

from rxhubs._batch import EventBatch
from rxhubs._models import PartitionContext
from rxhubs.errors import ConfigurationError, SinkError
from rxhubs.operators import CommitResult
from rxhubs.tables._plan import PartitionWrite, contexts_of, key_of, plan, result_of
from rxhubs.tables._rows import COLUMNS, row

__all__ = ["Paramstyle", "SqlSink"]

log = logging.getLogger("rxhubs.tables")

T = TypeVar("T")
Paramstyle = Literal["qmark", "format", "pyformat", "numeric", "named"]
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?")
_KEY = ("namespace", "eventhub", "consumer_group", "partition_id")
#: SQLSTATEs that mean "another transaction got there first": retry the whole transaction, same connection.
_UNIQUE_VIOLATION, _RETRY_STATES = "23505", frozenset({"40001", "40P01"})  # serialization failure, deadlock
_DUPLICATE_STATES = frozenset({"42P07", "42710"})  # duplicate table, duplicate object (a table's row type)


class _ConflictError(Exception):
    """Another writer moved a partition's position since this transaction read it."""


class SqlSink:
    """A :class:`~rxhubs.operators.TransactionalSink` over any DB-API 2 connection (SQLite, PostgreSQL, ...).

    The events table has the Spark connector's columns (:data:`rxhubs.tables.COLUMNS`); the positions table
    has one row per partition (``namespace, eventhub, consumer_group, partition_id`` (lower-case, as stores
    compare them), ``sequence_number``, ``updated_at``). Both are created if missing (``create=True``).

    Calls run on one worker thread per sink (one connection, opened there on first use), never on the event
    loop's thread; without a running asyncio loop (virtual time) they run inline. ``owned`` is asked on that
    thread, at every attempt.

    Args:
        connect: Opens a DB-API 2 connection (``lambda: psycopg.connect(dsn)``); called once, on the worker thread.
        table: The events table (``name`` or ``schema.name``).
        positions_table: The positions table.
        paramstyle: The driver's ``paramstyle`` (``sqlite3``: ``"qmark"``, psycopg and pg8000: ``"format"``).
        create: Create the tables if they do not exist.
        blob_type: The SQL type of ``body`` when creating the table (PostgreSQL: ``"BYTEA"``).
        begin: A statement that opens each transaction (SQLite: ``"BEGIN IMMEDIATE"``); None: the driver's own.
        max_conflicts: Reloads after conflicts within one commit before it fails (retriable: the operator
            retries it with backoff).

    Example:
        >>> import asyncio, datetime as dt, sqlite3
        >>> from rxhubs import Event, EventBatch, PartitionContext
        >>> ctx, t = PartitionContext("ns", "hub", "$Default", "0"), dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
        >>> db = sqlite3.connect(":memory:", check_same_thread=False)
        >>> sink = SqlSink(lambda: db)
        >>> def batch(first, last):
        ...     return EventBatch(ctx, tuple(Event(b"x", n, str(n), t) for n in range(first, last + 1)))
        >>> async def twice():
        ...     await sink.commit([batch(0, 100)], owned=lambda _: True)
        ...     result = await sink.commit([batch(90, 120)], owned=lambda _: True)  # 90..100 are in already
        ...     return result.written, await sink.positions([ctx])
        >>> asyncio.run(twice())
        ({'0': 20}, {'0': 120})
        >>> db.execute('SELECT COUNT(*), COUNT(DISTINCT "sequenceNumber") FROM rxhubs_events').fetchone()
        (121, 121)
    """

    def __init__(
        self,
        connect: Callable[[], Any],
        *,
        table: str = "rxhubs_events",
        positions_table: str = "rxhubs_positions",
        paramstyle: Paramstyle = "qmark",
        create: bool = True,
        blob_type: str = "BLOB",
        begin: str | None = None,
        max_conflicts: int = 20,
    ) -> None:
        if not callable(connect):
            raise ConfigurationError(f"connect must be a function that opens a DB-API connection, got {connect!r}")
        for what, name in (("table", table), ("positions_table", positions_table), ("blob_type", blob_type)):
            if not isinstance(name, str) or not _NAME.fullmatch(name):
                raise ConfigurationError(f"{what} must be a plain SQL name (letters, digits, _), got {name!r}")
        if paramstyle not in ("qmark", "format", "pyformat", "numeric", "named"):
            raise ConfigurationError(f"paramstyle must be one of DB-API's paramstyles, got {paramstyle!r}")
        if isinstance(max_conflicts, bool) or not isinstance(max_conflicts, int) or max_conflicts < 1:
            raise ConfigurationError(f"max_conflicts must be an int >= 1, got {max_conflicts!r}")
        self.table, self.positions_table, self.paramstyle = table, positions_table, paramstyle
        self._connect, self._create, self._blob, self._begin = connect, create, blob_type, begin
        self._max_conflicts = max_conflicts
        self._connection: Any = None
        self._executor: concurrent.futures.ThreadPoolExecutor | None = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="rxhubs-sql"
        )
        self._lock = threading.Lock()
        #: Commits that met another writer's commit of the same partition and were filtered again.
        self.conflicts = 0
        self._sql = self._statements()

    # -- the protocol ------------------------------------------------------------------------------------
    async def positions(self, partitions: Sequence[PartitionContext]) -> Mapping[str, int | None]:
        """The sequence number of the last event of each partition in the table (None: nothing yet)."""
        wanted = list(partitions)

        def read(connection: Any) -> dict[str, int | None]:
            cursor = connection.cursor()
            try:
                found = {p.partition_id: self._position(cursor, p) for p in wanted}
            finally:
                connection.rollback()  # end the read's transaction, if the driver opened one
            return found

        return await self._run("positions", read)

    async def commit(
        self, batches: Sequence[EventBatch], *, owned: Callable[[PartitionContext], bool]
    ) -> CommitResult:
        """One transaction: filter against the positions read in it, insert, compare-and-set; retry on conflict."""
        batches = list(batches)
        return await self._run("commit", lambda connection: self._commit(connection, batches, owned))

    async def close(self) -> None:
        """Close the connection and stop the worker thread (waits for a call in progress). Idempotent."""
        with self._lock:
            executor, self._executor = self._executor, None
        if executor is None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._close_connection()
        else:
            await loop.run_in_executor(executor, self._close_connection)
        executor.shutdown(wait=False)

    # -- one commit, on the worker thread --------------------------------------------------------------------
    def _commit(self, connection: Any, batches: list[EventBatch], owned: Callable[[PartitionContext], bool]
                ) -> CommitResult:
        contexts = contexts_of(batches)
        for attempt in range(1, self._max_conflicts + 1):
            cursor = connection.cursor()
            try:
                if self._begin:
                    cursor.execute(self._begin)
                writes = plan(batches, {c: self._position(cursor, c) for c in contexts}, owned)
                changed = [w for w in writes if w.moves]
                if not changed:
                    connection.rollback()
                    return result_of(writes)
                rows = [self._values(tuple(row(b, e).values())) for w in changed for b, e in w.events]
                if rows:
                    cursor.executemany(self._sql["insert"], rows)
                for write in sorted(changed, key=lambda w: key_of(w.context)):  # one lock order: no deadlocks
                    self._move(connection, cursor, write)
                connection.commit()
                return result_of(writes)
            except _ConflictError as conflict:
                connection.rollback()
                self._conflicted(conflict, attempt)
            except Exception as exc:
                if _sqlstate(exc) not in _RETRY_STATES:  # anything else: the caller drops the connection
                    _rollback(connection)
                    raise
                connection.rollback()  # REPEATABLE READ / SERIALIZABLE report a conflict this way
                self._conflicted(exc, attempt)
            except BaseException:
                _rollback(connection)
                raise
        raise SinkError(f"{self.table}: {self._max_conflicts} commits in a row met another writer's; retrying later",
                        retriable=True)

    def _conflicted(self, conflict: Exception, attempt: int) -> None:
        self.conflicts += 1
        log.info("sql sink: %s; reading the positions again (attempt %d)", conflict, attempt)

    def _position(self, cursor: Any, context: PartitionContext) -> int | None:
        cursor.execute(self._sql["select"], self._values(key_of(context)))
        found = cursor.fetchone()
        return None if found is None or found[0] is None else int(found[0])

    def _move(self, connection: Any, cursor: Any, write: PartitionWrite) -> None:
        key, now = key_of(write.context), _dt.datetime.now(_dt.UTC).isoformat()
        if write.before is None:
            try:
                cursor.execute(self._sql["insert_position"], self._values((*key, write.after, now)))
            except Exception as exc:
                if _unique_violation(exc, connection):
                    raise _ConflictError(f"partition {key[3]} got its first position from another writer") from exc
                raise
            return
        cursor.execute(self._sql["update_position"], self._values((write.after, now, *key, write.before)))
        if cursor.rowcount != 1:
            raise _ConflictError(f"partition {key[3]} moved past {write.before} meanwhile")

    # -- SQL ---------------------------------------------------------------------------------------------------
    def _marks(self, count: int) -> list[str]:
        style = self.paramstyle
        if style == "qmark":
            return ["?"] * count
        if style in ("format", "pyformat"):
            return ["%s"] * count
        if style == "numeric":
            return [f":{i + 1}" for i in range(count)]
        return [f":p{i}" for i in range(count)]

    def _values(self, values: Sequence[Any]) -> Any:
        if self.paramstyle == "named":
            return {f"p{i}": v for i, v in enumerate(values)}
        return tuple(values)

    def _statements(self) -> dict[str, str]:
        columns = ", ".join(f'"{name}"' for name, _ in COLUMNS)
        key = " AND ".join(f"{c} = {m}" for c, m in zip(_KEY, self._marks(4), strict=True))
        update_marks = self._marks(7)
        where = " AND ".join(f"{c} = {m}" for c, m in zip(_KEY, update_marks[2:6], strict=True))
        return {
            "select": f"SELECT sequence_number FROM {self.positions_table} WHERE {key}",
            "insert": f"INSERT INTO {self.table} ({columns}) VALUES ({', '.join(self._marks(len(COLUMNS)))})",
            "insert_position": f"INSERT INTO {self.positions_table} ({', '.join(_KEY)}, sequence_number, updated_at)"
            f" VALUES ({', '.join(self._marks(6))})",
            "update_position": f"UPDATE {self.positions_table} SET sequence_number = {update_marks[0]}, updated_at ="
            f" {update_marks[1]} WHERE {where} AND sequence_number = {update_marks[6]}",
        }

    def _schema(self) -> list[str]:
        types = {"BLOB": self._blob}
        columns = ", ".join(f'"{name}" {types.get(sql, sql)}' for name, sql in COLUMNS)
        return [
            f"CREATE TABLE IF NOT EXISTS {self.table} ({columns})",
            f"CREATE TABLE IF NOT EXISTS {self.positions_table} (namespace TEXT NOT NULL, eventhub TEXT NOT NULL,"
            " consumer_group TEXT NOT NULL, partition_id TEXT NOT NULL, sequence_number BIGINT NOT NULL,"
            " updated_at TEXT, PRIMARY KEY (namespace, eventhub, consumer_group, partition_id))",
        ]

    # -- plumbing --------------------------------------------------------------------------------------------
    def _open(self) -> Any:
        """Runs on the worker thread: connect, create the tables if asked."""
        connection = self._connect()
        try:
            if getattr(connection, "autocommit", None) is True:  # each statement its own commit: not atomic
                connection.autocommit = False
            for attempt in range(2) if self._create else ():
                try:
                    cursor = connection.cursor()
                    for statement in self._schema():
                        cursor.execute(statement)
                    connection.commit()
                    break
                except Exception as exc:
                    # PostgreSQL: of two CREATE TABLE IF NOT EXISTS at once, one may fail on the catalog's unique
                    # index or find the table's type taken; the second attempt finds the table.
                    _rollback(connection)
                    if attempt or not (_sqlstate(exc) in _DUPLICATE_STATES or _unique_violation(exc, connection)):
                        raise
        except BaseException:
            _rollback(connection)
            _close(connection)
            raise
        return connection

    def _call(self, verb: str, function: Callable[[Any], T]) -> T:
        try:
            if self._connection is None:
                self._connection = self._open()
            return function(self._connection)
        except (SinkError, ConfigurationError):
            raise
        except Exception as exc:
            self._drop_connection()  # its state is unknown (a commit may or may not have landed): start afresh
            raise SinkError(f"{self!r}: {verb} failed: {type(exc).__name__}: {exc}", retriable=True) from exc

    async def _run(self, verb: str, function: Callable[[Any], T]) -> T:
        executor = self._executor
        if executor is None:
            raise SinkError(f"{self!r} is closed ({verb})", retriable=False)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # virtual time: no event loop to keep free
            return self._call(verb, function)
        try:
            future = loop.run_in_executor(executor, self._call, verb, function)
        except RuntimeError as exc:  # shut down between the check and the submit
            raise SinkError(f"{self!r} is closed ({verb})", retriable=False) from exc
        return await future

    def _drop_connection(self) -> None:
        try:
            self._close_connection()
        except Exception as exc:
            log.debug("sql sink: closing a failed connection failed: %s", exc)

    def _close_connection(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(table={self.table!r}, positions_table={self.positions_table!r})"


def _sqlstate(exc: BaseException) -> str | None:
    """The SQLSTATE of a driver's error: psycopg's ``sqlstate``, psycopg2's ``pgcode``, pg8000's ``args[0]["C"]``."""
    for name in ("sqlstate", "pgcode"):
        state = getattr(exc, name, None)
        if isinstance(state, str):
            return state
    args = getattr(exc, "args", ())
    if args and isinstance(args[0], dict) and isinstance(args[0].get("C"), str):
        return str(args[0]["C"])
    return None


def _unique_violation(exc: BaseException, connection: Any) -> bool:
    """Whether ``exc`` is a unique key violation.

    By SQLSTATE where the driver gives one (pg8000 raises a plain ``DatabaseError`` for it), else by the driver's
    DB-API ``IntegrityError`` (on the connection, or the driver's module), else by class name.
    """
    state = _sqlstate(exc)
    if state is not None:
        return state == _UNIQUE_VIOLATION
    module = sys.modules.get(type(connection).__module__.partition(".")[0])
    for owner in (connection, module):
        cls = getattr(owner, "IntegrityError", None)
        if isinstance(cls, type) and isinstance(exc, cls):
            return True
    return any(cls.__name__ == "IntegrityError" for cls in type(exc).__mro__)


def _close(connection: Any) -> None:
    try:
        connection.close()
    except Exception as exc:
        log.debug("sql sink: closing a failed connection failed: %s", exc)


def _rollback(connection: Any) -> None:
    try:
        connection.rollback()
    except Exception as exc:  # the transaction may be gone with the connection; the error that got here matters
        log.debug("sql sink: rollback failed: %s", exc)
