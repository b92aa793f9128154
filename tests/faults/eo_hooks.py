"""The exactly-once sinks of the kill test, built through their public seams, with the kill hook outside the library.

:func:`make_sink` returns the sink wrapped in :class:`Noted`, which notes each commit in the worker's log
(``COMMIT began ended partition:written:skipped ...``) and, on the hook's N-th commit (``RXHUBS_TEST_KILL_AT``),
kills the process after the data was written and before it was committed:

* SQLite (``rxhubs.tables.SqlSink`` over a connection factory of ours): the connection's trace callback sees every
  statement the sink runs; when the armed commit's ``COMMIT`` is about to run, its rows inserted in the open
  transaction, the process dies (``HOOK sqlite``). Deterministic.
* Delta (``rxhubs.tables.DeltaSink``): deltalake writes the commit's data files, then its log entry, in one call,
  so a thread watches the table's folder during the armed commit and kills the process the moment a new data
  file appears (``HOOK delta FILE``). Whether the log entry got in first is checked after the run (is FILE in
  the table?); if the commit returned before the watcher saw the file, the process dies right after the commit,
  before the batches are emitted and acknowledged (``HOOK delta-committed``).
"""

from __future__ import annotations

import os
import signal
import sqlite3
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from rxhubs import EventBatch, PartitionContext
from rxhubs.operators import CommitResult
from tests.faults.eo_worker import KillHook, Log


class Noted:
    """A transactional sink that notes its commits, and lets the hook kill the process inside its N-th one."""

    def __init__(self, kind: str, inner: Any, note: Log, hook: KillHook | None,
                 arm: Callable[[], Callable[[], None]]) -> None:
        self.kind = kind
        self.inner = inner
        self.note = note
        self.hook = hook
        self.arm = arm  # arms the kill for one commit; returns what disarms it

    async def positions(self, partitions: Sequence[PartitionContext]) -> Mapping[str, int | None]:
        return await self.inner.positions(partitions)  # type: ignore[no-any-return]

    async def commit(self, batches: Sequence[EventBatch], *, owned: Callable[[PartitionContext], bool]
                     ) -> CommitResult:
        if any(b.events for b in batches):
            pause_here(self.note)
        began = time.time()  # the line carries when the commit began and ended: a pause can freeze one mid-way
        due = self.hook is not None and any(b.events for b in batches) and self.hook.due()
        disarm = self.arm() if due else None
        try:
            result: CommitResult = await self.inner.commit(batches, owned=owned)
        finally:
            if disarm is not None:
                disarm()
        parts = " ".join(f"{p}:{result.written.get(p, 0)}:{result.skipped.get(p, 0)}"
                         for p in sorted({*result.written, *result.skipped}))
        self.note(f"COMMIT {began:.3f} {time.time():.3f} {parts}")
        if due and self.hook is not None:
            self.hook.kill(f"{self.kind}-committed")
        return result


def pause_request(folder: Path, pid: int) -> Path:
    """The file that asks process ``pid`` to stop itself (SIGSTOP) at its next commit that holds events."""
    return folder / f"pause-at-commit-{pid}"


def pause_here(note: Log) -> None:
    """Stop this process (SIGSTOP) if the harness asked for it: a zombie certain to hold rows it has not committed.

    The harness (``eo_kit.chaos``) asks, waits until the process is stopped, lets its ownership expire and the
    others take over and commit, then resumes it: the commit it was about to make begins after it resumed.
    """
    request = pause_request(Path(os.environ["RXHUBS_TEST_FOLDER"]), os.getpid())
    if request.exists():
        request.unlink()
        note(f"PAUSE {time.time():.3f}")
        os.kill(os.getpid(), signal.SIGSTOP)


def _sqlite(path: Path, hook: KillHook | None) -> tuple[Any, Callable[[], Callable[[], None]]]:
    from rxhubs.tables import SqlSink

    armed = threading.Event()

    def traced(statement: str) -> None:
        if armed.is_set() and hook is not None and statement.lstrip().upper().startswith("COMMIT"):
            hook.kill("sqlite")

    def connect() -> sqlite3.Connection:  # as SqliteSink opens its connection, plus the trace callback
        con = sqlite3.connect(path, timeout=30.0, isolation_level=None, check_same_thread=False)
        con.execute("PRAGMA busy_timeout = 30000")
        for _ in range(3000):
            try:
                con.execute("PRAGMA journal_mode = WAL")  # does not wait on the busy handler: retried
                break
            except sqlite3.OperationalError:
                time.sleep(0.01)
        con.execute("PRAGMA synchronous = NORMAL")
        con.set_trace_callback(traced)
        return con

    def arm() -> Callable[[], None]:
        armed.set()
        return armed.clear

    return SqlSink(connect, begin="BEGIN IMMEDIATE"), arm


def _delta(uri: Path, hook: KillHook | None) -> tuple[Any, Callable[[], Callable[[], None]]]:
    from rxhubs.tables import DeltaSink

    def arm() -> Callable[[], None]:
        stop = threading.Event()
        before = _data_files(uri)
        switch = sys.getswitchinterval()
        sys.setswitchinterval(1e-5)  # the watcher gets the GIL back at once: the window after the file is short

        def watch() -> None:
            seen = _mtime(uri)
            while not stop.is_set():
                now = _mtime(uri)
                if now == seen:
                    continue  # one stat per turn; the folder changes when a file is created or renamed in it
                seen = now
                new = _data_files(uri) - before
                if new and hook is not None:
                    hook.kill(f"delta {sorted(new)[0]}")

        threading.Thread(target=watch, daemon=True).start()

        def disarm() -> None:
            stop.set()
            sys.setswitchinterval(switch)

        return disarm

    return DeltaSink(uri), arm


def _mtime(uri: Path) -> int:
    try:
        return os.stat(uri).st_mtime_ns
    except FileNotFoundError:
        return 0


def _data_files(uri: Path) -> set[str]:
    try:
        return {e.name for e in os.scandir(uri) if e.name.endswith(".parquet")}
    except FileNotFoundError:
        return set()


def make_sink(kind: str, folder: Path, note: Log, hook: KillHook | None) -> Noted:
    """The ``kind`` sink (``sqlite``: ``DIR/table.sqlite``, ``delta``: ``DIR/delta``), noted and hooked."""
    inner, arm = _sqlite(folder / "table.sqlite", hook) if kind == "sqlite" else _delta(folder / "delta", hook)
    return Noted(kind, inner, note, hook, arm)
