"""``rxhubs consume --sink postgresql://...`` against the emulator and a real PostgreSQL server.

The table holds exactly the hub's events (each once), and ``rxhubs checkpoints --table postgresql://...`` shows
the table's positions. The driver is whichever is installed (psycopg here); tests/tables/test_postgres.py runs
both drivers through the same sink.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.cli.test_cli_exactly_once import ROOT, send
from tests.support.postgres import Postgres

pytestmark = pytest.mark.slow


def rows(server: Postgres, database: str) -> list[tuple[str, str, int]]:
    with server.admin(database) as db:
        if not db.run("SELECT 1 FROM pg_tables WHERE tablename = 'rxhubs_events'"):
            return []
        return [(p, bytes(b).decode(), int(n)) for p, b, n in db.run(
            'SELECT partition, body, "sequenceNumber" FROM rxhubs_events')]


def test_consume_into_postgresql_holds_exactly_the_hubs_events(
    emulator_factory: Any, postgres: Postgres, pg_database: str, tmp_path: Path
) -> None:
    emulator = emulator_factory(hubs={"orders": 2})
    conn = emulator.connection_string("orders")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EVENTHUB_", "AZURE_STORAGE_"))}
    env.update(EVENTHUB_CONNECTION_STRING=conn, PYTHONPATH=str(ROOT))
    url, store = postgres.url(pg_database), f"sqlite:///{tmp_path / 'cp.sqlite'}"
    sent = send(conn, 0, 15)
    process = subprocess.Popen(
        [sys.executable, "-m", "rxhubs.cli", "consume", "--sink", url, "--store", store, "--interval", "1",
         "--checkpoint-interval", "0.5"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=tmp_path, env=env, stdin=subprocess.DEVNULL,
    )
    try:
        for _ in range(600):  # up to a minute: a loaded machine starts slowly
            if len(rows(postgres, pg_database)) >= 30 or process.poll() is not None:
                break
            time.sleep(0.1)
        time.sleep(1.0)  # anything written twice would land now
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, stderr[-3000:]
    table = rows(postgres, pg_database)
    assert len(table) == len({(p, n) for p, _, n in table}), "an event was written twice"
    assert sorted((p, b) for p, b, _ in table) == sorted(sent)

    shown = subprocess.run(
        [sys.executable, "-m", "rxhubs.cli", "checkpoints", "--store", store, "--table", url, "--json"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env, stdin=subprocess.DEVNULL,
    )
    assert shown.returncode == 0, shown.stderr[-3000:]
    positions = {r["partition"]: r["table"] for r in map(json.loads, shown.stdout.splitlines())}
    assert positions == {"0": 14, "1": 14}
