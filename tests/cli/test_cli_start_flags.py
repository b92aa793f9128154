"""``rxhubs consume --seed-checkpoint`` and ``--checkpoint-out-of-range``, passed on a real command line.

Each run: the emulator's 2-partition hub holding 10 events per partition, a SQLite store in ``tmp_path``, the
command in a subprocess for a few seconds; what it read (the JSONL sink) and what the store holds afterwards.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from azure.eventhub import EventData, EventHubProducerClient

from rxhubs import Checkpoint, EventHub
from rxhubs.stores import SqliteCheckpointStore

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


@pytest.fixture
def env(emulator_factory: Any) -> dict[str, str]:
    emulator = emulator_factory(hubs={"orders": 2})
    conn = emulator.connection_string("orders")
    with EventHubProducerClient.from_connection_string(conn) as producer:
        for partition in ("0", "1"):
            batch = producer.create_batch(partition_id=partition)
            for i in range(10):
                batch.add(EventData(f"{partition}-{i}"))
            producer.send_batch(batch)
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("EVENTHUB_", "AZURE_STORAGE_"))}
    environment.update(EVENTHUB_CONNECTION_STRING=conn, PYTHONPATH=str(ROOT))
    return environment


def consume(tmp_path: Path, env: dict[str, str], *flags: str) -> list[tuple[str, int]]:
    out = tmp_path / "events.jsonl"
    result = subprocess.run(
        [sys.executable, "-m", "rxhubs.cli", "consume", "--store", f"sqlite:///{tmp_path / 'cp.sqlite'}",
         "--sink", f"jsonl:{out}", "--checkpoint-interval", "0.5", "--interval", "1", "--duration", "6", *flags],
        capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env, stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = out.read_text().splitlines() if out.exists() else []
    return sorted((e["partition"], e["sequenceNumber"]) for e in map(json.loads, lines))


def checkpoints(tmp_path: Path, env: dict[str, str]) -> dict[str, int]:
    async def read() -> dict[str, int]:
        hub = EventHub.from_connection_string(env["EVENTHUB_CONNECTION_STRING"])
        store = SqliteCheckpointStore(tmp_path / "cp.sqlite")
        try:
            found = await store.list_checkpoints(hub.fully_qualified_namespace, hub.eventhub_name, "$Default")
        finally:
            await store.close()
            await hub.close()
        return {c.partition_id: c.sequence_number for c in found}

    return asyncio.run(read())


def test_seed_checkpoint_writes_one_where_a_new_group_starts(env: dict[str, str], tmp_path: Path) -> None:
    assert consume(tmp_path, env, "--default-start", "latest", "--seed-checkpoint") == []  # nothing after latest
    assert checkpoints(tmp_path, env) == {"0": 9, "1": 9}  # seeded at claim: KEDA sees no backlog


def test_without_seed_checkpoint_a_new_group_at_latest_writes_none(env: dict[str, str], tmp_path: Path) -> None:
    assert consume(tmp_path, env, "--default-start", "latest") == []
    assert checkpoints(tmp_path, env) == {}  # (what the flag changes)


@pytest.mark.parametrize(("policy", "read_of_0"), [("latest", []), ("earliest", list(range(10)))])
def test_checkpoint_out_of_range_says_where_a_checkpoint_ahead_of_the_hub_reads(
    env: dict[str, str], tmp_path: Path, policy: str, read_of_0: list[int]
) -> None:
    async def ahead() -> None:  # the hub was recreated: partition 0's checkpoint names an event it never had
        hub = EventHub.from_connection_string(env["EVENTHUB_CONNECTION_STRING"])
        store = SqliteCheckpointStore(tmp_path / "cp.sqlite")
        try:
            await store.update_checkpoint(
                Checkpoint(hub.fully_qualified_namespace, hub.eventhub_name, "$Default", "0", None, 500))
        finally:
            await store.close()
            await hub.close()

    asyncio.run(ahead())
    read = consume(tmp_path, env, "--checkpoint-out-of-range", policy)
    # the checkpoint is moved (before the first event, or to the last) and the partition restarted from it
    assert [s for p, s in read if p == "0"] == read_of_0
    assert checkpoints(tmp_path, env)["0"] == 9
    assert [s for p, s in read if p == "1"] == list(range(10))  # no checkpoint: the default start, earliest


def test_gc_thresholds_are_taken_and_bad_ones_are_a_usage_error(env: dict[str, str], tmp_path: Path) -> None:
    got = consume(tmp_path, env, "--gc-thresholds", "50000,20,100")
    assert got == sorted((p, i) for p in ("0", "1") for i in range(10))
    bad = subprocess.run(
        [sys.executable, "-m", "rxhubs.cli", "consume", "--store", f"sqlite:///{tmp_path / 'cp.sqlite'}",
         "--gc-thresholds", "700,10"],
        capture_output=True, text=True, timeout=60, cwd=tmp_path, env=env, stdin=subprocess.DEVNULL,
    )
    assert bad.returncode == 2 and "--gc-thresholds: three whole numbers" in bad.stderr, bad.stderr
