"""The SQL of the SQLite store: schema, transactions, checkpoint and state rows, path checks (private)."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from rxhubs._models import Checkpoint
from rxhubs.errors import ConfigurationError
from rxhubs.stores._common import record_key

__all__ = ["KEY_WHERE", "SCHEMA", "transaction", "validate_path", "write_checkpoints"]

SCHEMA = """
CREATE TABLE IF NOT EXISTS rxhubs_meta (
    name TEXT PRIMARY KEY,
    value INTEGER NOT NULL
);
INSERT OR IGNORE INTO rxhubs_meta (name, value) VALUES ('schema_version', 1), ('etag_counter', 0);
CREATE TABLE IF NOT EXISTS rxhubs_ownership (
    fully_qualified_namespace TEXT NOT NULL,
    eventhub_name TEXT NOT NULL,
    consumer_group TEXT NOT NULL,
    partition_id TEXT NOT NULL,
    owner_id TEXT,
    last_modified_time REAL,
    etag TEXT NOT NULL,
    period TEXT,
    PRIMARY KEY (fully_qualified_namespace, eventhub_name, consumer_group, partition_id)
);
CREATE TABLE IF NOT EXISTS rxhubs_state (
    fully_qualified_namespace TEXT NOT NULL,
    eventhub_name TEXT NOT NULL,
    consumer_group TEXT NOT NULL,
    partition_id TEXT NOT NULL,
    sequence_number INTEGER NOT NULL,
    state BLOB NOT NULL,
    PRIMARY KEY (fully_qualified_namespace, eventhub_name, consumer_group, partition_id)
);
CREATE TABLE IF NOT EXISTS rxhubs_checkpoint (
    fully_qualified_namespace TEXT NOT NULL,
    eventhub_name TEXT NOT NULL,
    consumer_group TEXT NOT NULL,
    partition_id TEXT NOT NULL,
    "offset" TEXT,
    sequence_number INTEGER,
    PRIMARY KEY (fully_qualified_namespace, eventhub_name, consumer_group, partition_id)
);
"""

KEY_WHERE = "fully_qualified_namespace = ? AND eventhub_name = ? AND consumer_group = ?"


class transaction:  # noqa: N801 - used like a function: `with transaction(connection):`
    """BEGIN (IMMEDIATE) ... COMMIT, or ROLLBACK on any exception."""

    def __init__(self, connection: sqlite3.Connection, *, immediate: bool = False) -> None:
        self._connection = connection
        self._begin = "BEGIN IMMEDIATE" if immediate else "BEGIN"

    def __enter__(self) -> None:
        self._connection.execute(self._begin)

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        if exc_type is None:
            self._connection.execute("COMMIT")
        elif self._connection.in_transaction:
            self._connection.execute("ROLLBACK")


def write_checkpoints(
    connection: sqlite3.Connection, checkpoints: list[Checkpoint], state: bytes | None = None
) -> None:
    """Write checkpoint rows; with ``state`` (one checkpoint), its state row too, else drop their state rows."""
    connection.executemany(
        "INSERT OR REPLACE INTO rxhubs_checkpoint (fully_qualified_namespace, eventhub_name, "
        'consumer_group, partition_id, "offset", sequence_number) VALUES (?, ?, ?, ?, ?, ?)',
        [(*record_key(c), c.partition_id.lower(), c.offset, int(c.sequence_number)) for c in checkpoints],
    )
    if state is None:  # a checkpoint written without state: the old state does not describe it any more
        connection.executemany(
            f"DELETE FROM rxhubs_state WHERE {KEY_WHERE} AND partition_id = ?",
            [(*record_key(c), c.partition_id.lower()) for c in checkpoints],
        )
        return
    [c] = checkpoints
    connection.execute(
        "INSERT OR REPLACE INTO rxhubs_state (fully_qualified_namespace, eventhub_name, consumer_group, "
        "partition_id, sequence_number, state) VALUES (?, ?, ?, ?, ?, ?)",
        (*record_key(c), c.partition_id.lower(), int(c.sequence_number), sqlite3.Binary(state)),
    )


def validate_path(path: str | os.PathLike[str]) -> str:
    if not isinstance(path, str | os.PathLike):
        raise ConfigurationError(f"SqliteCheckpointStore path must be a str or a path, got {type(path).__name__}")
    text = os.fspath(path)
    if text == ":memory:":
        return text
    if not text or text.startswith("file:"):
        raise ConfigurationError(f"SqliteCheckpointStore needs a file path, got {text!r}")
    file = Path(text).expanduser()
    if file.is_dir():
        raise ConfigurationError(f"SqliteCheckpointStore path {str(file)!r} is a folder; give a file inside it")
    folder = file.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigurationError(
            f"cannot create the folder {str(folder)!r} for the SQLite checkpoint store: {exc.strerror or exc}"
        ) from exc
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ConfigurationError(
            f"the folder {str(folder)!r} is not writable: the SQLite checkpoint store needs to create "
            f"{file.name!r} and its -wal/-shm files there"
        )
    if file.exists() and not os.access(file, os.R_OK | os.W_OK):
        raise ConfigurationError(f"the SQLite checkpoint store file {str(file)!r} is not readable and writable")
    return str(file)
