"""``rxhubs consume --sink sqlite:PATH`` against the emulator: the table holds exactly the hub's events.

A second run resumes from the table's positions, not from the checkpoints, which are set ahead of the table here
(as after restoring the table from a backup): reading from the checkpoints would lose the events between them.
Nothing is written twice; ``rxhubs checkpoints --table`` shows the table's positions.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from azure.eventhub import EventData, EventHubProducerClient

from rxhubs import Checkpoint
from rxhubs.stores import SqliteCheckpointStore

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def send(conn: str, first: int, count: int) -> set[tuple[str, str]]:
    sent = set()
    with EventHubProducerClient.from_connection_string(conn) as producer:
        for partition in ("0", "1"):
            batch = producer.create_batch(partition_id=partition)
            for i in range(first, first + count):
                batch.add(EventData(f"{partition}-{i}"))
                sent.add((partition, f"{partition}-{i}"))
            producer.send_batch(batch)
    return sent


def rows(path: Path) -> list[tuple[str, str, int]]:
    if not path.exists():
        return []
    try:
        with sqlite3.connect(path) as db:
            return [(p, body.decode(), n) for p, body, n in db.execute(
                'SELECT partition, body, "sequenceNumber" FROM rxhubs_events')]
    except sqlite3.OperationalError:  # not created yet
        return []


async def checkpoints_ahead(path: Path, namespace: str, sequence_number: int) -> None:
    async with SqliteCheckpointStore(path) as store:
        for partition in ("0", "1"):
            await store.update_checkpoint(Checkpoint(namespace, "orders", "$Default", partition, None, sequence_number))


def consume_until(env: dict[str, str], cwd: Path, table: Path, store: Path, expected: int) -> str:
    """Run ``rxhubs consume --sink sqlite:...`` until the table holds ``expected`` rows, then Ctrl-C it."""
    process = subprocess.Popen(
        [sys.executable, "-m", "rxhubs.cli", "consume", "--sink", f"sqlite:{table}", "--store", f"sqlite:///{store}",
         "--interval", "1", "--checkpoint-interval", "0.5"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
    )
    try:
        for _ in range(600):  # up to a minute: a loaded machine starts slowly
            if len(rows(table)) >= expected or process.poll() is not None:
                break
            time.sleep(0.1)
        time.sleep(1.0)  # anything written twice would land now
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, stderr[-3000:]
    return stderr


def test_consume_into_sqlite_holds_exactly_the_hubs_events_across_a_restart(
    emulator_factory: Any, tmp_path: Path
) -> None:
    emulator = emulator_factory(hubs={"orders": 2})
    conn = emulator.connection_string("orders")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EVENTHUB_", "AZURE_STORAGE_"))}
    env.update(EVENTHUB_CONNECTION_STRING=conn, PYTHONPATH=str(ROOT))
    table, store = tmp_path / "events.db", tmp_path / "cp.sqlite"

    sent = send(conn, 0, 15)
    consume_until(env, tmp_path, table, store, 30)
    first = rows(table)
    assert sorted((p, b) for p, b, _ in first) == sorted(sent)

    sent |= send(conn, 15, 5)
    asyncio.run(checkpoints_ahead(store, f"127.0.0.1:{emulator.port}", 17))
    consume_until(env, tmp_path, table, store, 40)
    final = rows(table)
    assert len(final) == len({(p, n) for p, _, n in final}), "an event was written twice"
    assert sorted((p, b) for p, b, _ in final) == sorted(sent)

    shown = subprocess.run(
        [sys.executable, "-m", "rxhubs.cli", "checkpoints", "--store", f"sqlite:///{store}", "--table",
         f"sqlite:{table}", "--json"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env, stdin=subprocess.DEVNULL,
    )
    assert shown.returncode == 0, shown.stderr[-3000:]
    positions = {r["partition"]: (r["table"], r["lag"]) for r in map(json.loads, shown.stdout.splitlines())}
    assert positions == {"0": (19, 0), "1": (19, 0)}


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (("checkpoints", "--table", "sqlite:missing.db"), "no such file"),
        (("checkpoints", "--table", "jsonl:out.jsonl"), "exactly-once table"),
        (("consume", "--sink", "sqlite:"), "file path"),
    ],
)
def test_bad_table_options_are_one_line_errors(args: tuple[str, ...], fragment: str, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EVENTHUB_", "AZURE_STORAGE_"))}
    env.update(PYTHONPATH=str(ROOT), EVENTHUB_CONNECTION_STRING="Endpoint=sb://127.0.0.1:9;SharedAccessKeyName=k;"
               "SharedAccessKey=c2VjcmV0;EntityPath=orders;UseDevelopmentEmulator=true")
    result = subprocess.run([sys.executable, "-m", "rxhubs.cli", *args], capture_output=True, text=True, timeout=60,
                            cwd=tmp_path, env=env, stdin=subprocess.DEVNULL)
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stderr and fragment in result.stderr, result.stderr[-2000:]
    assert not (tmp_path / "missing.db").exists()  # showing a table never creates one


def test_the_plain_table_shows_the_table_column_only_when_asked() -> None:
    from rxhubs.cli._checkpoints import format_rows

    row = {"partition": "0", "owner": "a", "ownership_age_s": 1.0, "checkpoint": 90, "last_enqueued": 120, "lag": 0}
    with_table = format_rows([{**row, "table": 120}]).splitlines()
    assert with_table[0].split()[5] == "table" and with_table[2].split()[4] == "120"
    assert "table" not in format_rows([row])
