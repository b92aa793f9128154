"""``rxhubs checkpoints --watch``: the table refreshes live, ``--count`` ends it, Ctrl-C exits 0."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import IO, Any

import pytest

from rxhubs import Checkpoint
from rxhubs.cli import main
from rxhubs.stores import SqliteCheckpointStore

ROOT = Path(__file__).resolve().parents[2]


def cli_env(conn: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EVENTHUB_", "AZURE_STORAGE_"))}
    env.update(EVENTHUB_CONNECTION_STRING=conn, PYTHONPATH=str(ROOT), PYTHONWARNINGS="always::ResourceWarning")
    return env


def read_table(stream: IO[str]) -> list[str]:
    """The lines of the next table a non-TTY watch prints (title, header, rule, rows), up to its blank line."""
    lines = []
    while True:
        line = stream.readline()
        assert line, "the watch ended before printing a whole table"
        if not line.strip():
            return lines
        lines.append(line.rstrip("\n"))


async def write_checkpoint(path: Path, namespace: str, sequence_number: int) -> None:
    async with SqliteCheckpointStore(path) as store:
        await store.update_checkpoint(Checkpoint(namespace, "telemetry", "$Default", "2", None, sequence_number))


@pytest.mark.slow
def test_watch_shows_a_checkpoint_written_while_it_runs_and_ctrl_c_exits_0(
    eventhubs_emulator: Any, tmp_path: Path
) -> None:
    store = tmp_path / "cp.sqlite"
    namespace = f"127.0.0.1:{eventhubs_emulator.port}"
    asyncio.run(write_checkpoint(store, namespace, -1))  # the schema exists before the watch reads it
    watch = subprocess.Popen(
        [sys.executable, "-m", "rxhubs.cli", "checkpoints", "--store", f"sqlite:///{store}", "--watch",
         "--interval", "0.3"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
        env=cli_env(eventhubs_emulator.connection_string("telemetry")), stdin=subprocess.DEVNULL,
    )
    try:
        assert watch.stdout is not None
        first = read_table(watch.stdout)
        assert first[0].startswith("rxhubs checkpoints: $Default at ") and "Ctrl-C to stop" in first[0]
        assert "last enqueued" in first[1]
        partition_2 = next(line for line in first if line.split()[0] == "2")

        asyncio.run(write_checkpoint(store, namespace, 424_242))
        for _ in range(100):  # a later refresh shows it (bounded by the test's timeout, not by a clock here)
            table = read_table(watch.stdout)
            if any(line.split()[0] == "2" and "424,242" in line for line in table[3:]):
                break
        else:
            pytest.fail("the new checkpoint never appeared")
        assert "424,242" not in partition_2

        watch.send_signal(signal.SIGINT)
        _, stderr = watch.communicate(timeout=60)
    finally:
        if watch.poll() is None:
            watch.kill()
            watch.communicate()
    assert watch.returncode == 0, stderr
    assert "Traceback" not in stderr and "unclosed" not in stderr.lower(), stderr


def test_watch_count_ends_by_itself_with_json_rows_per_refresh(eventhubs_emulator: Any, tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "rxhubs.cli", "checkpoints", "--store", "memory:", "--json", "--watch",
         "--interval", "0.1", "--count", "2"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
        env=cli_env(eventhubs_emulator.connection_string("telemetry")), stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(rows) == 2 * 4  # two refreshes of the 4 partitions
    assert [r["partition"] for r in rows] == ["0", "1", "2", "3"] * 2
    assert len({r["time"] for r in rows}) == 2 and rows[0]["time"] < rows[-1]["time"]


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (("--count", "3"), "need --watch"),
        (("--interval", "1"), "need --watch"),
        (("--watch", "--interval", "0"), "--interval"),
        (("--watch", "--interval", "-2"), "--interval"),
        (("--watch", "--count", "0"), "--count"),
    ],
)
def test_bad_watch_options_are_one_line_exit_2(args: tuple[str, ...], fragment: str) -> None:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["checkpoints", "-c", "Endpoint=sb://127.0.0.1:1;SharedAccessKeyName=k;SharedAccessKey=x;"
                     "EntityPath=h", "--store", "memory:", *args])
    assert code == 2
    lines = err.getvalue().strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("rxhubs checkpoints: error: ") and fragment in lines[0], lines
    assert out.getvalue() == ""
