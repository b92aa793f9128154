"""``rxhubs checkpoints reset`` on the blob store (Azurite) and the emulator, read back by three readers.

After each reset (dry run, then executed) an rxhubs consumer and the official ``EventHubConsumerClient`` with the
official blob store start from the new positions, and the KEDA oracle (``tests/support/keda.py``) reports the lag
they imply.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from rxhubs import Checkpoint, Ownership
from rxhubs.cli import main
from rxhubs.errors import OwnershipLostError
from rxhubs.stores import BlobCheckpointStore
from tests.operate.readers import official_first_events, rxhubs_first_events, send
from tests.support.keda import keda_lag

pytestmark = [pytest.mark.azurite, pytest.mark.slow]
HUB = "orders"
ROOT = Path(__file__).resolve().parents[2]
GROUPS = ("g-time", "g-earliest", "g-shift", "g-force")


@pytest.fixture
def hub(emulator_factory: Any) -> Any:
    """A fresh emulator: 2 partitions of 40 events each, 20 before ``hub.middle`` and 20 after."""
    emulator = emulator_factory(hubs={HUB: 2}, consumer_groups=GROUPS)
    conn = emulator.connection_string(HUB)
    send(conn, {"0": 20, "1": 20}, "before")
    time.sleep(0.05)
    middle = dt.datetime.now(dt.UTC)
    time.sleep(0.05)
    send(conn, {"0": 20, "1": 20}, "after")
    emulator.conn, emulator.middle = conn, middle
    emulator.namespace = f"127.0.0.1:{emulator.port}"
    return emulator


async def write(storage: str, container: str, records: list[Checkpoint]) -> None:
    async with BlobCheckpointStore.from_connection_string(storage, container) as store:
        for record in records:
            await store.update_checkpoint(record)


def cli(monkeypatch: Any, capsys: Any, conn: str, storage: str, container: str, *args: str) -> tuple[int, str, str]:
    monkeypatch.setenv("EVENTHUB_CONNECTION_STRING", conn)
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", storage)
    code = main(["checkpoints", "reset", "--store", f"blob://{container}", *args])
    out, err = capsys.readouterr()
    return code, out, err


def read_everywhere(hub: Any, storage: str, container: str, group: str) -> tuple[dict[str, int], dict[str, int], Any]:
    ours = asyncio.run(rxhubs_first_events(hub.conn, storage, container, group, 2))
    official = official_first_events(hub.conn, storage, container, group, 2)
    return ours, official, keda_lag(hub.conn, storage, container, group)


@pytest.mark.parametrize(
    ("group", "option", "resume"),
    [("g-time", "--to-datetime", 20), ("g-earliest", "--to-earliest", 0), ("g-shift", "--shift-by=-10", 26)],
)
def test_a_reset_dry_run_then_executed_moves_every_reader(
    hub: Any, azurite: Any, blob_container: str, monkeypatch: Any, capsys: Any, group: str, option: str,
    resume: int,
) -> None:
    storage = azurite.connection_string
    asyncio.run(write(storage, blob_container, [
        Checkpoint(hub.namespace, HUB, group, pid, None, 35) for pid in ("0", "1")
    ]))
    args = ["-g", group, option] + ([hub.middle.isoformat()] if option == "--to-datetime" else [])
    code, out, _ = cli(monkeypatch, capsys, hub.conn, storage, blob_container, *args)
    assert code == 0 and "dry run: nothing written" in out
    rows = [line.split() for line in out.splitlines()[1:3]]
    assert rows == [[pid, "35", str(resume - 1), f"{resume - 36:+,}"] for pid in ("0", "1")]
    assert keda_lag(hub.conn, storage, blob_container, group).per_partition == {"0": 4, "1": 4}, "nothing written"

    code, out, _ = cli(monkeypatch, capsys, hub.conn, storage, blob_container, *args, "--execute")
    assert code == 0 and f"reset 2 partition(s) of {group}" in out
    ours, official, keda = read_everywhere(hub, storage, blob_container, group)
    assert ours == official == {"0": resume, "1": resume}
    assert keda.per_partition == {"0": 40 - resume, "1": 40 - resume}
    assert keda.checkpoints == {"0": resume - 1, "1": resume - 1}


def test_live_owners_refuse_and_force_fences_a_paused_owner(
    hub: Any, azurite: Any, blob_container: str, monkeypatch: Any, capsys: Any
) -> None:
    storage = azurite.connection_string

    async def paused_owner() -> Ownership:
        async with BlobCheckpointStore.from_connection_string(storage, blob_container) as store:
            [mine] = await store.claim_ownership([Ownership(hub.namespace, HUB, "g-force", "0", "paused-worker")])
            await store.fence(mine)
            await store.update_checkpoint_fenced(Checkpoint(hub.namespace, HUB, "g-force", "0", None, 30), mine)
            return mine

    mine = asyncio.run(paused_owner())
    code, _, err = cli(monkeypatch, capsys, hub.conn, storage, blob_container, "-g", "g-force", "--to-earliest",
                       "--execute")
    assert code == 2
    assert err.strip() == (
        "rxhubs checkpoints: error: consumer group g-force has live owners: paused-worker (partition 0); stop them"
        " first, or pass --force to fence them"
    )
    assert keda_lag(hub.conn, storage, blob_container, "g-force").checkpoints["0"] == 30

    code, out, _ = cli(monkeypatch, capsys, hub.conn, storage, blob_container, "-g", "g-force", "--to-earliest",
                       "--execute", "--force")
    assert code == 0 and "fenced paused-worker (partition 0)" in out

    async def resume_paused() -> None:  # the paused worker wakes up and writes the position it had
        async with BlobCheckpointStore.from_connection_string(storage, blob_container) as store:
            with pytest.raises(OwnershipLostError):
                await store.update_checkpoint_fenced(Checkpoint(hub.namespace, HUB, "g-force", "0", None, 39), mine)

    asyncio.run(resume_paused())
    ours, official, keda = read_everywhere(hub, storage, blob_container, "g-force")
    assert ours == official == {"0": 0, "1": 0}
    assert keda.checkpoints == {"0": -1, "1": -1} and keda.total == 80


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--to-datetime", "2020-01-01T00:00:00Z"], "is before the retention of partition 0"),
        (["--to-earliest", "--partition", "7"], "unknown partition 7 of orders: it has 0, 1"),
        (["--to-earliest", "--shift-by", "3"], "argument --shift-by: not allowed with argument --to-earliest"),
        (["--to-datetime", "noon"], "--to-datetime takes an ISO 8601 time"),
        (["--to-sequence", "0:99", "--execute"], "outside partition 0's retained events: give 0..40"),
        (["--to-earliest", "--force"], "--force fences live owners when writing: it needs --execute"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_nothing_written(
    hub: Any, azurite: Any, blob_container: str, monkeypatch: Any, capsys: Any, args: list[str], message: str
) -> None:
    storage = azurite.connection_string
    asyncio.run(write(storage, blob_container, [Checkpoint(hub.namespace, HUB, "g-time", "0", None, 35)]))
    try:
        code, out, err = cli(monkeypatch, capsys, hub.conn, storage, blob_container, "-g", "g-time", *args)
    except SystemExit as exit_:  # argparse's own usage errors
        code, (out, err) = int(exit_.code or 0), capsys.readouterr()
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and message in err and "Traceback" not in err
    assert keda_lag(hub.conn, storage, blob_container, "g-time").checkpoints == {"0": 35, "1": None}


def test_a_sigstopped_consumer_resumed_after_a_forced_reset_reads_from_the_reset_position(
    hub: Any, azurite: Any, blob_container: str, monkeypatch: Any, capsys: Any, tmp_path: Any
) -> None:
    """A real ``rxhubs consume`` process catches up, is paused (SIGSTOP), the group is reset with ``--force``,
    new events arrive, and it is resumed: its old position never comes back; it reads again from the reset."""
    storage = azurite.connection_string
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EVENTHUB_", "AZURE_STORAGE_"))}
    env.update(EVENTHUB_CONNECTION_STRING=hub.conn, AZURE_STORAGE_CONNECTION_STRING=storage, PYTHONPATH=str(ROOT))
    out = tmp_path / "out.jsonl"
    zombie = subprocess.Popen(
        [sys.executable, "-m", "rxhubs.cli", "consume", "--store", f"blob://{blob_container}", "-g", "g-force",
         "--sink", f"jsonl:{out}", "--checkpoint-interval", "0.2", "--duration", "300"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=tmp_path, stdin=subprocess.DEVNULL,
    )

    def read(pid: str) -> list[int]:
        lines = out.read_text().splitlines() if out.exists() else []
        return [r["sequenceNumber"] for r in map(json.loads, lines) if r["partition"] == pid]

    def until(done: Any) -> None:
        for _ in range(600):
            if done():
                return
            assert zombie.poll() is None
            time.sleep(0.2)
        raise AssertionError("timed out")

    try:
        until(lambda: keda_lag(hub.conn, storage, blob_container, "g-force").checkpoints == {"0": 39, "1": 39})
        zombie.send_signal(signal.SIGSTOP)
        send(hub.conn, {"0": 5, "1": 5}, "while-paused")
        code, _, err = cli(monkeypatch, capsys, hub.conn, storage, blob_container, "-g", "g-force",
                           "--to-earliest", "--execute")
        assert code == 2 and "has live owners:" in err and "(partitions 0, 1)" in err  # the paused process
        code, out_text, _ = cli(monkeypatch, capsys, hub.conn, storage, blob_container, "-g", "g-force",
                                "--to-earliest", "--execute", "--force")
        assert code == 0 and "fenced" in out_text
        assert keda_lag(hub.conn, storage, blob_container, "g-force").checkpoints == {"0": -1, "1": -1}
        assert read("0") == read("1") == list(range(40))  # what it had done before it was paused
        zombie.send_signal(signal.SIGCONT)
        # resumed, it must neither write 39 or 44 over the reset nor carry on from 40: it reads 0.. again
        until(lambda: read("0").count(0) == 2 and read("1").count(0) == 2 and max(read("0")) == max(read("1")) == 44)
        until(lambda: keda_lag(hub.conn, storage, blob_container, "g-force").checkpoints == {"0": 44, "1": 44})
    finally:
        zombie.send_signal(signal.SIGCONT)
        zombie.terminate()
        zombie.wait(60)
