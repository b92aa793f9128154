"""Commands leave nothing open: a run against Azurite and the emulator ends without resource warnings.

The blob store's aiohttp session used to outlive ``rxhubs consume --store blob://...``, which then ended a
clean run with "ERROR asyncio: Unclosed client session" and "Unclosed connector" on stderr. Python hides
``ResourceWarning`` by default, so the commands run here with ``PYTHONWARNINGS=always::ResourceWarning``:
an unclosed socket, session or event loop anywhere shows up on stderr and fails the test.
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
from azure.eventhub import EventData, EventHubProducerClient

from rxhubs.testing._azurite import Azurite

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.azurite, pytest.mark.slow]


def run_cli(*args: str, env: dict[str, str], cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rxhubs.cli", *args],
        capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
    )


def consume_until_written(*args: str, events: int, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """``rxhubs consume ARGS``, stopped by Ctrl-C once its JSON-lines files in ``cwd`` hold ``events`` lines.

    Not after a fixed time: on a loaded machine a run of a few seconds once ended before it had read everything
    (and, with --workers, before the workers were up).
    """
    with subprocess.Popen(
        [sys.executable, "-m", "rxhubs.cli", "consume", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
    ) as proc:
        try:
            while sum(len(f.read_text().splitlines()) for f in cwd.glob("*.jsonl")) < events and proc.poll() is None:
                time.sleep(0.1)
            proc.send_signal(signal.SIGINT)
            stdout, stderr = proc.communicate(timeout=90)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def assert_nothing_left_open(result: subprocess.CompletedProcess[str]) -> None:
    assert result.returncode == 0, result.stderr[-3000:]
    assert "unclosed" not in result.stderr.lower(), result.stderr[-3000:]
    assert "ResourceWarning" not in result.stderr, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]


@pytest.fixture
def env(emulator_factory: Any, azurite: Azurite, blob_container: str) -> dict[str, str]:
    """A fresh 2-partition hub holding 20 events, and the Azurite account, in the commands' variables."""
    emulator = emulator_factory(hubs={"orders": 2})
    conn = emulator.connection_string("orders")
    with EventHubProducerClient.from_connection_string(conn) as producer:
        for partition in ("0", "1"):
            batch = producer.create_batch(partition_id=partition)
            for i in range(10):
                batch.add(EventData(f"{partition}-{i}"))
            producer.send_batch(batch)
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("EVENTHUB_", "AZURE_STORAGE_"))}
    environment.update(
        EVENTHUB_CONNECTION_STRING=conn,
        AZURE_STORAGE_CONNECTION_STRING=azurite.connection_string,
        PYTHONPATH=str(ROOT),
        PYTHONWARNINGS="always::ResourceWarning",
    )
    return environment


def test_consume_then_checkpoints_on_blob_leave_nothing_open(
    env: dict[str, str], blob_container: str, tmp_path: Path
) -> None:
    store = f"blob://{blob_container}"
    out = tmp_path / "events.jsonl"
    consume = consume_until_written(
        "--store", store, "--sink", f"jsonl:{out}", "--checkpoint-interval", "0.5", events=20, env=env, cwd=tmp_path
    )
    assert_nothing_left_open(consume)
    assert len(out.read_text().splitlines()) == 20  # the blob store really served the run

    table = run_cli("checkpoints", "--store", store, "--json", env=env, cwd=tmp_path)
    assert_nothing_left_open(table)
    rows = [json.loads(line) for line in table.stdout.splitlines()]
    assert [(r["partition"], r["checkpoint"], r["lag"]) for r in rows] == [("0", 9, 0), ("1", 9, 0)]

    watched = run_cli(
        "checkpoints", "--store", store, "--watch", "--interval", "0.2", "--count", "3", env=env, cwd=tmp_path
    )
    assert_nothing_left_open(watched)
    assert watched.stdout.count("last enqueued") == 3


def test_consume_with_workers_shares_partitions_prints_the_summary_and_leaves_nothing_open(
    env: dict[str, str], blob_container: str, tmp_path: Path
) -> None:
    store = f"blob://{blob_container}"
    out = tmp_path / "events.jsonl"
    consume = consume_until_written(
        "--store", store, "--sink", f"jsonl:{out}", "--checkpoint-interval", "0.5", "--workers", "2", "--owner-id",
        "cli", "--interval", "1", events=20, env=env, cwd=tmp_path,
    )
    assert_nothing_left_open(consume)
    files = sorted(tmp_path.glob("events.w*.jsonl"))
    assert [f.name for f in files] == ["events.w0.jsonl", "events.w1.jsonl"][: len(files)] and files
    seen = [json.loads(line) for f in files for line in f.read_text().splitlines()]
    assert sorted((e["partition"], e["sequenceNumber"]) for e in seen) == [
        (p, s) for p in ("0", "1") for s in range(10)
    ]
    lines = consume.stdout.splitlines()
    assert lines[0].split() == ["worker", "owner", "events", "restarts", "exit"]
    assert [line.split()[:2] for line in lines[1:3]] == [["0", "cli-w0"], ["1", "cli-w1"]]
    assert lines[3].split()[:2] == ["total", "20"]

    table = run_cli("checkpoints", "--store", store, "--json", env=env, cwd=tmp_path)
    assert_nothing_left_open(table)
    rows = [json.loads(line) for line in table.stdout.splitlines()]
    assert [(r["partition"], r["checkpoint"], r["lag"]) for r in rows] == [("0", 9, 0), ("1", 9, 0)]


def test_consume_with_workers_refuses_a_memory_store(env: dict[str, str], tmp_path: Path) -> None:
    result = run_cli("consume", "--store", "memory:", "--workers", "2", env=env, cwd=tmp_path)
    assert result.returncode == 2 and "store the processes share" in result.stderr, result.stderr
