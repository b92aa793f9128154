"""``rxhubs consume --sink delta:PATH`` against the emulator: exactly once, resuming from the table."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import rxhubs
from rxhubs.tables import read_delta
from tests.cli.test_cli_publish import environment, run_cli
from tests.tables.delta_support import rows

ROOT = Path(__file__).resolve().parents[2]


async def send(conn: str, start: int, count: int) -> None:
    async with rxhubs.EventHub.from_connection_string(conn) as hub:
        for p in ("0", "1"):
            await hub.send([f"{p}-{n}".encode() for n in range(start, start + count)], partition_id=p)


@pytest.mark.slow
def test_consume_into_delta_writes_each_event_once_even_when_the_checkpoints_are_lost(
    emulator_factory: Any, tmp_path: Path
) -> None:
    emulator = emulator_factory(hubs={"a": 2})
    conn, table = emulator.connection_string("a"), tmp_path / "events"
    asyncio.run(send(conn, 0, 30))
    first = run_cli("consume", "--sink", f"delta:{table}", "--store", f"sqlite:///{tmp_path / 'cp1.sqlite'}",
                    "--duration", "3", env=environment(conn), cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    assert rows(table) == {(p, n): 1 for p in ("0", "1") for n in range(30)}
    # more events, and a fresh checkpoint store (as if the checkpoints were lost): the store would start at the
    # beginning, the table's positions say 29, so only the new events are read and written
    asyncio.run(send(conn, 30, 10))
    second = run_cli("consume", "--sink", f"delta:{table}", "--store", f"sqlite:///{tmp_path / 'cp2.sqlite'}",
                     "--duration", "3", env=environment(conn), cwd=tmp_path)
    assert second.returncode == 0, second.stderr[-3000:]
    assert rows(table) == {(p, n): 1 for p in ("0", "1") for n in range(40)}
    bodies = read_delta(table, ["body"]).column("body").to_pylist()
    assert sorted(bodies) == sorted(f"{p}-{n}".encode() for p in ("0", "1") for n in range(40))
    # the table's position beside the checkpoint
    shown = run_cli("checkpoints", "--store", f"sqlite:///{tmp_path / 'cp2.sqlite'}", "--table", f"delta:{table}",
                    "--json", env=environment(conn), cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr[-3000:]
    assert sorted((r["partition"], r["table"], r["lag"]) for r in map(json.loads, shown.stdout.splitlines())) == [
        ("0", 39, 0), ("1", 39, 0)]


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_the_demo_runs_with_the_delta_sink_and_writes_no_duplicate(tmp_path: Path) -> None:
    out, table = tmp_path / "demo-out", tmp_path / "events"
    result = subprocess.run(
        [sys.executable, "-m", "rxhubs.cli", "demo", "--sink", f"delta:{table}", "--duration", "8",
         "--partitions", "4", "--consumers", "3", "--rate", "300", "--interval", "1", "--expiry", "3", "--plain",
         "--out", str(out)],
        capture_output=True, text=True, timeout=230, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "RESULT: no event lost" in result.stdout and "exactly once" in result.stdout
    sent = int(re.search(r"events sent: ([\d,]+)", result.stdout).group(1).replace(",", ""))  # type: ignore[union-attr]
    held = rows(table)
    assert sum(held.values()) == len(held) == sent > 500  # every event once, read from the table itself
    assert "duplicates: 0" in result.stdout and not (out / "parquet").exists() and not (out / "jsonl").exists()
