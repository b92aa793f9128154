"""The SQLite store: processes balancing through one file, surviving kill -9, path validation, lock waits."""

from __future__ import annotations

import multiprocessing
import os
import signal
import sqlite3
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from rxhubs import Checkpoint, Ownership
from rxhubs.errors import ConfigurationError, StoreError
from rxhubs.stores import SqliteCheckpointStore
from tests.stores import sqlite_worker

NS, HUB, CG = sqlite_worker.NS, sqlite_worker.HUB, sqlite_worker.CG
ROOT = Path(__file__).resolve().parents[2]


def test_competing_processes_exactly_one_wins_each_round(tmp_path: Path) -> None:
    path = str(tmp_path / "shared.sqlite")
    processes, rounds = 4, 5
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(processes, timeout=60)
    results = ctx.Queue()
    children = [
        ctx.Process(target=sqlite_worker.claimer, args=(path, i, rounds, barrier, results)) for i in range(processes)
    ]
    for child in children:
        child.start()
    try:
        outcomes = [results.get(timeout=90) for _ in range(processes * rounds)]
    finally:
        for child in children:
            child.join(timeout=30)
            if child.is_alive():
                child.kill()
    assert [child.exitcode for child in children] == [0] * processes

    winners: dict[int, list[int]] = defaultdict(list)
    for round_, index, won in outcomes:
        if won:
            winners[round_].append(index)
    assert {r: len(w) for r, w in winners.items()} == {r: 1 for r in range(rounds)}, winners


def run_writer_and_kill(path: Path, after_rounds: int) -> int:
    """Start the writer process, SIGKILL it once it reported ``after_rounds`` rounds; the last round reported."""
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.stores.sqlite_worker", "writer", str(path)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    reported = 0
    try:
        for line in child.stdout:
            reported = int(line)
            if reported >= after_rounds:
                break
    finally:
        os.kill(child.pid, signal.SIGKILL)
        rest = child.stdout.read()
        child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL
    return max([reported, *(int(x) for x in rest.split())])


async def test_a_writer_killed_mid_write_leaves_a_consistent_readable_store(tmp_path: Path) -> None:
    path = tmp_path / "killed.sqlite"
    reported = run_writer_and_kill(path, after_rounds=150)
    assert reported >= 150

    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    async with SqliteCheckpointStore(path) as store:
        checkpoints = await store.list_checkpoints(NS, HUB, CG)
        [ownership] = await store.list_ownership(NS, HUB, CG)
        # Each round's 8 checkpoints were one transaction: all or none, never a mix of rounds.
        assert len(checkpoints) == 8 and len({c.sequence_number for c in checkpoints}) == 1
        # Every reported round was committed; at most the one in flight got further.
        assert checkpoints[0].sequence_number in (reported, reported + 1)
        # The file is usable at once: no lock left behind by the dead writer.
        [taken] = await store.claim_ownership([Ownership(NS, HUB, CG, "0", "survivor", etag=ownership.etag)])
        await store.update_checkpoint(Checkpoint(NS, HUB, CG, "0", "1", 1))
    assert taken.owner_id == "survivor"


async def test_a_write_waiting_for_another_writers_lock_fails_retriably_then_succeeds(tmp_path: Path) -> None:
    path = tmp_path / "locked.sqlite"
    async with SqliteCheckpointStore(path, timeout=0.2) as store:
        await store.list_checkpoints(NS, HUB, CG)
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN EXCLUSIVE")
        try:
            with pytest.raises(StoreError, match="locked") as info:
                await store.update_checkpoint(Checkpoint(NS, HUB, CG, "0", "1", 1))
            assert info.value.retriable is True
        finally:
            other.execute("ROLLBACK")
            other.close()
        await store.update_checkpoint(Checkpoint(NS, HUB, CG, "0", "1", 1))
        assert len(await store.list_checkpoints(NS, HUB, CG)) == 1


async def test_etags_never_repeat_across_reopening(tmp_path: Path) -> None:
    path = tmp_path / "etags.sqlite"
    async with SqliteCheckpointStore(path) as store:
        [a] = await store.claim_ownership([Ownership(NS, HUB, CG, "0", "a")])
        [b] = await store.claim_ownership([Ownership(NS, HUB, CG, "1", "a")])
    async with SqliteCheckpointStore(path) as store:
        [c] = await store.claim_ownership([Ownership(NS, HUB, CG, "2", "a")])
        [a2] = await store.claim_ownership([Ownership(NS, HUB, CG, "0", "a", etag=a.etag)])
        assert await store.claim_ownership([Ownership(NS, HUB, CG, "0", "b", etag=a.etag)]) == []
    assert len({a.etag, b.etag, c.etag, a2.etag}) == 4


async def test_missing_folders_are_created(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "er" / "checkpoints.sqlite"
    async with SqliteCheckpointStore(path) as store:
        await store.update_checkpoint(Checkpoint(NS, HUB, CG, "0", "1", 1))
    assert path.exists() and store.path == str(path)


async def test_an_in_memory_database_works_in_one_store() -> None:
    async with SqliteCheckpointStore(":memory:") as store:
        await store.claim_ownership([Ownership(NS, HUB, CG, "0", "a")])
        assert [o.owner_id for o in await store.list_ownership(NS, HUB, CG)] == ["a"]


def test_a_folder_is_not_a_database_path(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="is a folder"):
        SqliteCheckpointStore(tmp_path)


def test_a_path_under_a_file_is_a_configuration_error(tmp_path: Path) -> None:
    (tmp_path / "file.txt").write_text("not a folder")
    with pytest.raises(ConfigurationError, match="cannot create the folder"):
        SqliteCheckpointStore(tmp_path / "file.txt" / "checkpoints.sqlite")


def test_an_unwritable_folder_is_a_configuration_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "readonly"
    folder.mkdir()
    # The suite may run as root, which may write anywhere: make os.access answer as for an ordinary user.
    monkeypatch.setattr(os, "access", lambda p, mode: Path(p) != folder)
    with pytest.raises(ConfigurationError, match="not writable"):
        SqliteCheckpointStore(folder / "checkpoints.sqlite")


@pytest.mark.parametrize("bad", ["", "file:x.db?mode=ro", 42])
def test_bad_paths_are_configuration_errors(bad: object) -> None:
    with pytest.raises(ConfigurationError):
        SqliteCheckpointStore(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("timeout", [0, -1.0, "5"])
def test_bad_timeouts_are_configuration_errors(tmp_path: Path, timeout: object) -> None:
    with pytest.raises(ConfigurationError, match="timeout"):
        SqliteCheckpointStore(tmp_path / "x.sqlite", timeout=timeout)  # type: ignore[arg-type]


async def test_a_file_that_is_not_a_database_is_a_clear_non_retriable_error(tmp_path: Path) -> None:
    path = tmp_path / "garbage.sqlite"
    path.write_bytes(b"this is not a database, just some text that is long enough to have a header" * 20)
    async with SqliteCheckpointStore(path) as store:
        with pytest.raises(StoreError, match="not a usable rxhubs database") as info:
            await store.list_checkpoints(NS, HUB, CG)
    assert info.value.retriable is False


async def test_a_closed_store_refuses_calls_and_closes_once(tmp_path: Path) -> None:
    store = SqliteCheckpointStore(tmp_path / "closed.sqlite")
    await store.list_ownership(NS, HUB, CG)
    await store.close()
    await store.close()
    with pytest.raises(StoreError, match="closed") as info:
        await store.list_ownership(NS, HUB, CG)
    assert info.value.retriable is False
    assert repr(store) == f"SqliteCheckpointStore({str(tmp_path / 'closed.sqlite')!r})"


async def test_a_batch_of_checkpoints_is_one_transaction(tmp_path: Path) -> None:
    async with SqliteCheckpointStore(tmp_path / "batch.sqlite") as store:
        await store.update_checkpoints(Checkpoint(NS, HUB, CG, str(p), str(p), p) for p in range(16))
        assert len(await store.list_checkpoints(NS, HUB, CG)) == 16
