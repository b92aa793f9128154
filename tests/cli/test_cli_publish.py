"""``rxhubs consume --sink eventhub:HUB`` publishes what it reads to another hub of the same namespace."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import rxhubs

ROOT = Path(__file__).resolve().parents[2]


def run_cli(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rxhubs.cli", *args],
        capture_output=True, text=True, timeout=120, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
    )


def environment(conn: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVENTHUB_")}
    env.update(EVENTHUB_CONNECTION_STRING=conn, PYTHONPATH=str(ROOT), PYTHONWARNINGS="always::ResourceWarning")
    return env


async def bodies_of(conn: str, eventhub_name: str) -> list[tuple[str | None, bytes]]:
    target = conn.replace("EntityPath=a", f"EntityPath={eventhub_name}")
    async with rxhubs.EventHub.from_connection_string(target) as hub:
        found = []
        for pid in await hub.get_partition_ids():
            async with hub.receiver(pid) as receiver:
                found += [(e.partition_key, e.body) for e in await receiver.receive_batch(100, max_wait=0.5)]
        return found


@pytest.mark.slow
def test_consume_with_an_eventhub_sink_publishes_every_event_then_checkpoints(
    emulator_factory: Any, tmp_path: Path
) -> None:
    emulator = emulator_factory(hubs={"a": 2, "b": 2})
    conn = emulator.connection_string("a")

    async def seed() -> None:
        async with rxhubs.EventHub.from_connection_string(conn) as hub:
            await hub.send([b"k-1", b"k-2"], partition_key="k")
            await hub.send([b"x-1"], partition_id="0")

    asyncio.run(seed())
    result = run_cli(
        "consume", "--sink", "eventhub:b", "--store", f"sqlite:///{tmp_path / 'cp.sqlite'}",
        "--checkpoint-interval", "0.2", "--duration", "3", env=environment(conn), cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "unclosed" not in result.stderr.lower() and "ResourceWarning" not in result.stderr, result.stderr[-3000:]
    assert sorted(asyncio.run(bodies_of(conn, "b")), key=repr) == [("k", b"k-1"), ("k", b"k-2"), (None, b"x-1")]

    table = run_cli("checkpoints", "--store", f"sqlite:///{tmp_path / 'cp.sqlite'}", "--json", env=environment(conn),
                    cwd=tmp_path)
    assert table.returncode == 0 and table.stdout.count('"lag": 0') == 2, table.stdout + table.stderr


def test_an_unknown_target_hub_fails_fast(emulator_factory: Any, tmp_path: Path) -> None:
    emulator = emulator_factory(hubs={"a": 1})
    result = run_cli(
        "consume", "--sink", "eventhub:missing", "--store", "memory:", "--duration", "5",
        env=environment(emulator.connection_string("a")), cwd=tmp_path,
    )
    assert result.returncode == 2, result.stderr[-3000:]
    assert "missing" in result.stderr and "Traceback" not in result.stderr
