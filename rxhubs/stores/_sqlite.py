"""The SQLite checkpoint store: the durable embedded default, shared safely by processes on one machine."""

from __future__ import annotations

import asyncio
import concurrent.futures
import math
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any, TypeVar

from rxhubs._models import Checkpoint, Ownership
from rxhubs.errors import ConfigurationError, StoreError
from rxhubs.stores._common import (
    describe,
    key_of,
    logger,
    lost,
    normalize_etag,
    open_sqlite,
    parse_offset,
    parse_sequence_number,
    record_key,
)
from rxhubs.stores._contract import StatefulCheckpointStore
from rxhubs.stores._sqlite_sql import KEY_WHERE, SCHEMA, transaction, validate_path, write_checkpoints

__all__ = ["SqliteCheckpointStore"]

T = TypeVar("T")

class SqliteCheckpointStore(StatefulCheckpointStore):
    """Ownership and checkpoints in one SQLite file: durable, embedded, shareable between local processes.

    Several processes on one machine may open the same file and balance partitions through it: every claim
    runs in one ``BEGIN IMMEDIATE`` transaction (the compare-and-swap of all its records is atomic and
    serialised with other writers), the database is in WAL mode (readers never block the writer) and a busy
    timeout makes writers queue rather than fail. Etags are versions from a counter kept in the file, so they
    never repeat. A process killed mid-write leaves the file consistent: SQLite rolls the unfinished
    transaction back when the file is next opened. Committed writes survive a process crash
    (``synchronous=NORMAL`` in WAL mode; a power loss may drop the last commits, never corrupt the file).

    It is fenced (:class:`~rxhubs.stores.FencedCheckpointStore`): each ownership row keeps the etag that names
    its period of ownership (a column added to older files when they are opened), and a fenced write checks it
    and writes in one ``BEGIN IMMEDIATE`` transaction, so a former owner's write can never land after a
    takeover. Operator state (:class:`~rxhubs.stores.StatefulCheckpointStore`) is a row of ``rxhubs_state``
    written in the checkpoint's transaction. Claims are stamped with this machine's clock, the one every
    process sharing the file reads.

    Calls run on one worker thread per store (SQLite connections are not shared between threads), so the
    event loop never blocks on disk or on another process's lock. Do not put the file on a network share:
    SQLite's locking is only reliable on a local disk.

    Args:
        path: The database file (created with its folder if missing), or ``":memory:"`` for a private,
            non-durable database.
        timeout: Seconds a call waits for another process's write lock before failing with a retriable
            :class:`~rxhubs.errors.StoreError`.

    Raises:
        ConfigurationError: If the path is a folder, or its folder cannot be created or written.

    Example:
        >>> import asyncio, tempfile, os
        >>> from rxhubs import Checkpoint
        >>> async def demo(path):
        ...     async with SqliteCheckpointStore(path) as store:
        ...         await store.update_checkpoint(Checkpoint("ns", "hub", "$Default", "0", "80", 7))
        ...         return [c.sequence_number for c in await store.list_checkpoints("ns", "hub", "$Default")]
        >>> asyncio.run(demo(os.path.join(tempfile.mkdtemp(), "checkpoints.sqlite")))
        [7]
    """

    def __init__(self, path: str | os.PathLike[str], *, timeout: float = 30.0) -> None:
        if not isinstance(timeout, int | float) or isinstance(timeout, bool) or not timeout > 0:
            raise ConfigurationError(f"timeout must be a number of seconds > 0, got {timeout!r}")
        self._timeout = float(timeout)
        self._path = validate_path(path)
        self._executor: concurrent.futures.ThreadPoolExecutor | None = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="rxhubs-sqlite"
        )
        self._connection: sqlite3.Connection | None = None
        self._close_lock = threading.Lock()

    @property
    def path(self) -> str:
        """The database file (or ``":memory:"``)."""
        return self._path

    # -- plumbing --------------------------------------------------------------------------------------

    async def _run(self, verb: str, function: Callable[[sqlite3.Connection], T]) -> T:
        executor = self._executor
        if executor is None:
            raise StoreError(f"{self!r} is closed ({verb})", retriable=False)
        loop = asyncio.get_running_loop()
        try:
            future = loop.run_in_executor(executor, self._call, verb, function)
        except RuntimeError as exc:  # the executor was shut down between the check and the submit
            raise StoreError(f"{self!r} is closed ({verb})", retriable=False) from exc
        return await future

    def _call(self, verb: str, function: Callable[[sqlite3.Connection], T]) -> T:
        """Runs on the worker thread: open on first use, run ``function``, translate sqlite3 errors."""
        try:
            if self._connection is None:
                self._connection = self._open()
            return function(self._connection)
        except sqlite3.OperationalError as exc:
            raise StoreError(f"SQLite store {self._path!r}: {verb} failed: {exc}") from exc
        except sqlite3.DatabaseError as exc:
            raise StoreError(
                f"SQLite store {self._path!r} is not a usable rxhubs database ({verb}: {exc}); "
                "point the store at another file",
                retriable=False,
            ) from exc

    def _open(self) -> sqlite3.Connection:
        def schema(connection: sqlite3.Connection) -> None:
            try:
                connection.executescript("BEGIN IMMEDIATE;" + SCHEMA)
                columns = {row[1] for row in connection.execute("PRAGMA table_info(rxhubs_ownership)")}
                if "period" not in columns:  # a file written before fencing (schema 1)
                    connection.execute("ALTER TABLE rxhubs_ownership ADD COLUMN period TEXT")
                connection.execute("COMMIT")
            except BaseException:
                if connection.in_transaction:
                    connection.execute("ROLLBACK")
                raise

        return open_sqlite(self._path, self._timeout, schema)

    # -- the verbs, on the worker thread ---------------------------------------------------------------

    def _list_ownership_sync(self, connection: sqlite3.Connection, key: tuple[str, str, str]) -> list[Any]:
        return connection.execute(
            f"SELECT partition_id, owner_id, last_modified_time, etag FROM rxhubs_ownership WHERE {KEY_WHERE}",
            key,
        ).fetchall()

    def _claim_sync(self, connection: sqlite3.Connection, claims: list[Ownership]) -> list[Ownership]:
        won: list[Ownership] = []
        with transaction(connection, immediate=True):
            now = time.time()
            (counter,) = connection.execute("SELECT value FROM rxhubs_meta WHERE name = 'etag_counter'").fetchone()
            counter = int(counter)
            for claim in claims:
                key = (*record_key(claim), claim.partition_id.lower())
                row = connection.execute(
                    f"SELECT etag, owner_id, period FROM rxhubs_ownership WHERE {KEY_WHERE} AND partition_id = ?",
                    key,
                ).fetchone()
                expected = normalize_etag(claim.etag)
                if row is None:
                    if expected is not None:
                        continue
                elif expected is None or str(row[0]) != expected:
                    continue
                counter += 1
                # the same owner renewing keeps its period of ownership; any other claim begins a new one
                same = row is not None and claim.owner_id != "" and row[1] == claim.owner_id
                connection.execute(
                    "INSERT OR REPLACE INTO rxhubs_ownership (fully_qualified_namespace, eventhub_name, "
                    "consumer_group, partition_id, owner_id, last_modified_time, etag, period) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (*key, claim.owner_id, now, str(counter), row[2] if same and row is not None else str(counter)),
                )
                won.append(replace(claim, etag=str(counter), last_modified_time=now))
            connection.execute("UPDATE rxhubs_meta SET value = ? WHERE name = 'etag_counter'", (counter,))
        return won

    def _update_checkpoints_sync(self, connection: sqlite3.Connection, checkpoints: list[Checkpoint]) -> None:
        with transaction(connection, immediate=True):
            write_checkpoints(connection, checkpoints)

    def _fence_sync(self, connection: sqlite3.Connection, ownership: Ownership) -> Any:
        key = (*record_key(ownership), ownership.partition_id.lower())
        etag = normalize_etag(ownership.etag)
        with transaction(connection, immediate=True):
            changed = connection.execute(
                f"UPDATE rxhubs_ownership SET period = etag WHERE {KEY_WHERE} AND partition_id = ? "
                "AND owner_id = ? AND etag = ?",
                (*key, ownership.owner_id, etag),
            ).rowcount
            if changed != 1 or not ownership.owner_id:
                raise lost(ownership, "the record changed before the fence")
            row = connection.execute(
                f'SELECT "offset", sequence_number FROM rxhubs_checkpoint WHERE {KEY_WHERE} AND partition_id = ?',
                key,
            ).fetchone()
            state = connection.execute(
                f"SELECT sequence_number, state FROM rxhubs_state WHERE {KEY_WHERE} AND partition_id = ?", key
            ).fetchone()
            return row, state

    def _update_fenced_sync(
        self, connection: sqlite3.Connection, checkpoint: Checkpoint, ownership: Ownership, state: bytes | None = None
    ) -> None:
        key = (*record_key(ownership), ownership.partition_id.lower())
        with transaction(connection, immediate=True):
            row = connection.execute(
                f"SELECT owner_id, period FROM rxhubs_ownership WHERE {KEY_WHERE} AND partition_id = ?", key
            ).fetchone()
            if row is None or row[0] != ownership.owner_id or not ownership.owner_id:
                raise lost(ownership, f"owned by {row[0] if row else None!r}")
            if row[1] is None or row[1] != normalize_etag(ownership.etag):
                raise lost(ownership, "another period of ownership began")
            write_checkpoints(connection, [checkpoint], state)

    def _list_checkpoints_sync(self, connection: sqlite3.Connection, key: tuple[str, str, str]) -> list[Any]:
        return connection.execute(
            f'SELECT partition_id, "offset", sequence_number FROM rxhubs_checkpoint WHERE {KEY_WHERE}', key
        ).fetchall()

    # -- the contract ----------------------------------------------------------------------------------

    async def list_ownership(
        self, fully_qualified_namespace: str, eventhub_name: str, consumer_group: str
    ) -> list[Ownership]:
        """Every ownership record of the consumer group; malformed rows come back as released."""
        key = key_of(fully_qualified_namespace, eventhub_name, consumer_group)
        rows = await self._run("list_ownership", lambda c: self._list_ownership_sync(c, key))
        result: list[Ownership] = []
        for partition_id, owner_id, last_modified_time, etag in rows:
            if not isinstance(partition_id, str) or not partition_id:
                logger.warning(
                    "SQLite store %r: ignoring an ownership row with partition id %s",
                    self._path,
                    describe(partition_id),
                )
                continue
            if not isinstance(owner_id, str):
                logger.warning(
                    "SQLite store %r: ownership of partition %r has owner id %s; treating it as released",
                    self._path,
                    partition_id,
                    describe(owner_id),
                )
                owner_id = ""
            if (
                isinstance(last_modified_time, bool)
                or not isinstance(last_modified_time, int | float)
                or not (math.isfinite(last_modified_time))
            ):
                logger.warning(
                    "SQLite store %r: ownership of partition %r has last-modified time %s; treating it as released",
                    self._path,
                    partition_id,
                    describe(last_modified_time),
                )
                owner_id, last_modified_time = "", 0.0
            result.append(
                Ownership(
                    fully_qualified_namespace,
                    eventhub_name,
                    consumer_group,
                    partition_id,
                    owner_id,
                    float(last_modified_time),
                    str(etag),
                )
            )
        return result

    async def claim_ownership(self, ownerships: Iterable[Ownership]) -> list[Ownership]:
        """Compare-and-swap every record in one transaction; return those won, with new etags and times."""
        claims = list(ownerships)
        if not claims:
            return []
        return await self._run("claim_ownership", lambda c: self._claim_sync(c, claims))

    async def update_checkpoint(self, checkpoint: Checkpoint) -> None:
        """Store the checkpoint of one partition, overwriting the previous one."""
        await self._run("update_checkpoint", lambda c: self._update_checkpoints_sync(c, [checkpoint]))

    async def update_checkpoints(self, checkpoints: Iterable[Checkpoint]) -> None:
        """Store several checkpoints in one transaction (all or none)."""
        batch = list(checkpoints)
        if batch:
            await self._run("update_checkpoint", lambda c: self._update_checkpoints_sync(c, batch))

    async def fence(self, ownership: Ownership) -> Checkpoint | None:
        """Begin the period named by ``ownership`` (its row's current version); the partition's checkpoint."""
        return (await self.fence_with_state(ownership))[0]

    async def fence_with_state(self, ownership: Ownership) -> tuple[Checkpoint | None, bytes | None]:
        """:meth:`fence`, with the state committed with the checkpoint, read in the same transaction."""
        row, state = await self._run("fence", lambda c: self._fence_sync(c, ownership))
        if row is None:
            return None, None
        number = parse_sequence_number(row[1])
        valid, offset = parse_offset(row[0])
        if number is None or not valid:
            logger.warning(
                "SQLite store %r: ignoring a malformed checkpoint row of partition %r at the fence",
                self._path,
                ownership.partition_id,
            )
            return None, None
        o = ownership
        checkpoint = Checkpoint(
            o.fully_qualified_namespace, o.eventhub_name, o.consumer_group, o.partition_id, offset, number
        )
        if state is not None and state[0] != number:  # written by a version that did not know state
            logger.warning(
                "SQLite store %r: the state of partition %r is of sequence number %r, its checkpoint of %d: "
                "ignoring the state",
                self._path,
                o.partition_id,
                state[0],
                number,
            )
            state = None
        return checkpoint, None if state is None else bytes(state[1])

    async def commit_state(self, checkpoint: Checkpoint, ownership: Ownership, state: bytes) -> None:
        """Store the checkpoint and ``state`` in one transaction if ``ownership``'s period is current."""
        data = bytes(state)
        await self._run("update_checkpoint", lambda c: self._update_fenced_sync(c, checkpoint, ownership, data))

    async def update_checkpoint_fenced(self, checkpoint: Checkpoint, ownership: Ownership) -> None:
        """Store the checkpoint if ``ownership``'s period is current, in one transaction (else OwnershipLostError)."""
        await self._run("update_checkpoint", lambda c: self._update_fenced_sync(c, checkpoint, ownership))

    async def list_checkpoints(
        self, fully_qualified_namespace: str, eventhub_name: str, consumer_group: str
    ) -> list[Checkpoint]:
        """Every checkpoint of the consumer group; malformed rows are logged and skipped."""
        key = key_of(fully_qualified_namespace, eventhub_name, consumer_group)
        rows = await self._run("list_checkpoints", lambda c: self._list_checkpoints_sync(c, key))
        result: list[Checkpoint] = []
        for partition_id, offset, sequence_number in rows:
            number = parse_sequence_number(sequence_number)
            valid, text = parse_offset(offset)
            if not isinstance(partition_id, str) or not partition_id or number is None or not valid:
                logger.warning(
                    "SQLite store %r: ignoring a malformed checkpoint row (partition %s, offset %s, "
                    "sequence number %s)",
                    self._path,
                    describe(partition_id),
                    describe(offset),
                    describe(sequence_number),
                )
                continue
            result.append(
                Checkpoint(fully_qualified_namespace, eventhub_name, consumer_group, partition_id, text, number)
            )
        return result

    # -- life cycle ------------------------------------------------------------------------------------

    async def close(self) -> None:
        """Close the database and stop the worker thread (waits for a call in progress). Idempotent."""
        with self._close_lock:
            executor, self._executor = self._executor, None
        if executor is None:
            return
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(executor, self._close_connection)
        executor.shutdown(wait=False)

    def _close_connection(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.close()

    async def __aenter__(self) -> SqliteCheckpointStore:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"SqliteCheckpointStore({self._path!r})"
