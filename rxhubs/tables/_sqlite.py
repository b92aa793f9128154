"""The SQL sink on a SQLite file: :class:`SqliteSink` and :func:`sqlite`."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from rxhubs.errors import ConfigurationError
from rxhubs.stores._common import open_sqlite
from rxhubs.tables._sql import SqlSink

__all__ = ["SqliteSink", "sqlite"]


class SqliteSink(SqlSink):
    """:class:`SqlSink` on a SQLite file: WAL journal, a busy timeout, each commit a ``BEGIN IMMEDIATE``.

    Several processes may write the same file (they wait on each other's commits up to ``timeout``); calls run
    on the sink's worker thread. A power loss may lose the last commits (``synchronous=NORMAL``), rows and
    positions together: they are then read from the hub again.

    Args:
        path: The database file (created with its directory if missing).
        table: The events table.
        positions_table: The positions table.
        timeout: Seconds to wait for another writer's lock before a commit fails (and is retried).

    Example:
        >>> import os, tempfile
        >>> sink = SqliteSink(os.path.join(tempfile.mkdtemp(), "events.db"))
        >>> sink.path.endswith("events.db"), sink.table
        (True, 'rxhubs_events')
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        table: str = "rxhubs_events",
        positions_table: str = "rxhubs_positions",
        timeout: float = 30.0,
    ) -> None:
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
            raise ConfigurationError(f"timeout must be a number of seconds > 0, got {timeout!r}")
        if not isinstance(path, str | os.PathLike) or not str(path):
            raise ConfigurationError(f"path must be a file path, got {path!r}")
        self.path = str(path)
        self.timeout = float(timeout)
        super().__init__(self._open_sqlite, table=table, positions_table=positions_table, paramstyle="qmark",
                         begin="BEGIN IMMEDIATE")

    def _open_sqlite(self) -> sqlite3.Connection:
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        return open_sqlite(self.path, self.timeout)

    def __repr__(self) -> str:
        return f"SqliteSink({self.path!r}, table={self.table!r})"


def sqlite(path: str | os.PathLike[str], *, table: str = "rxhubs_events", timeout: float = 30.0) -> SqliteSink:
    """A :class:`SqliteSink` on ``path`` (shorthand).

    Example:
        >>> import os, tempfile
        >>> sqlite(os.path.join(tempfile.mkdtemp(), "events.db"))  # doctest: +ELLIPSIS
        SqliteSink('...events.db', table='rxhubs_events')
    """
    return SqliteSink(path, table=table, timeout=timeout)
