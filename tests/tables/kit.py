"""Real SQLite connections whose steps fail on demand, and helpers to read a table back."""

from __future__ import annotations

import datetime as dt
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rxhubs import Event, EventBatch, PartitionContext

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
CTX = {p: PartitionContext("ns", "hub", "$Default", p) for p in "0123"}
#: Where a commit can fail: before its rows are written, after the rows but before COMMIT (nothing lands), and
#: after COMMIT landed (the caller sees an error and cannot tell it landed).
STEPS = ("before_write", "before_commit", "commit_lost")


def events(first: int, last: int, partition_id: str = "0") -> EventBatch:
    return EventBatch(CTX[partition_id], tuple(Event(b"e%d" % n, n, str(n), T0) for n in range(first, last + 1)))


class Injected(sqlite3.OperationalError):
    """The fault a test injected."""


class FaultyCursor:
    def __init__(self, inner: sqlite3.Cursor, owner: FaultyConnection) -> None:
        self.inner, self.owner = inner, owner

    def execute(self, sql: str, params: Any = ()) -> Any:
        self.owner.before(sql)
        return self.inner.execute(sql, params)

    def executemany(self, sql: str, params: Any) -> Any:
        self.owner.before(sql)
        return self.inner.executemany(sql, params)

    def fetchone(self) -> Any:
        return self.inner.fetchone()

    @property
    def rowcount(self) -> int:
        return self.inner.rowcount


class FaultyConnection:
    """A sqlite3 connection (real file) with faults armed by name; ``felt`` counts the faults that fired.

    ``on_read`` runs right after a position was read (a test makes another writer commit there).
    """

    def __init__(self, path: Path, *, begin_immediate: bool = False) -> None:
        self.inner = sqlite3.connect(path, timeout=30, check_same_thread=False,
                                     isolation_level=None if begin_immediate else "")
        self.inner.execute("PRAGMA journal_mode = WAL")  # readers never block the other writer
        self.armed: set[str] = set()
        self.felt: list[str] = []
        self.on_read: Callable[[], None] | None = None

    def _fire(self, step: str) -> None:
        if step in self.armed:
            self.armed.discard(step)
            self.felt.append(step)
            raise Injected(f"injected fault: {step}")

    def before(self, sql: str) -> None:
        if sql.startswith("INSERT INTO rxhubs_events"):
            self._fire("before_write")

    def cursor(self) -> Any:
        owner = self

        class Reading(FaultyCursor):
            def execute(self, sql: str, params: Any = ()) -> Any:
                result = super().execute(sql, params)
                if sql.startswith("SELECT sequence_number") and owner.on_read is not None:
                    hook, owner.on_read = owner.on_read, None
                    hook()
                return result

        return Reading(self.inner.cursor(), self)

    def commit(self) -> None:
        self._fire("before_commit")
        self.inner.commit()
        self._fire("commit_lost")

    def rollback(self) -> None:
        self.inner.rollback()

    def close(self) -> None:
        """Kept open: the test reads through it after the sink dropped it."""


def table_numbers(path: Path, partition_id: str = "0") -> list[int]:
    with sqlite3.connect(path) as db:
        return [n for (n,) in db.execute(
            'SELECT "sequenceNumber" FROM rxhubs_events WHERE partition = ? ORDER BY "sequenceNumber"',
            (partition_id,))]


def table_position(path: Path, partition_id: str = "0") -> int | None:
    with sqlite3.connect(path) as db:
        found = db.execute("SELECT sequence_number FROM rxhubs_positions WHERE partition_id = ?",
                           (partition_id,)).fetchone()
    return None if found is None else int(found[0])
