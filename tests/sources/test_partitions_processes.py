"""Consumer processes sharing a store, reading the emulator: one is killed with SIGKILL, another joins.

Afterwards every event sent was processed at least once (checked by partition and sequence number), and the
only duplicates are events the killed consumer processed within its checkpoint window before it died: the
graceful handovers between the survivors add none.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
PARTITIONS = 4


def _start(name: str, out: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.balancing.consumer_proc", name, str(out)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
        stdout=subprocess.PIPE,
        stderr=open(out.with_suffix(".err"), "w"),  # noqa: SIM115 - closed with the process
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready", out.with_suffix(".err").read_text()
    return proc


class Producer(threading.Thread):
    """Sends small batches to every partition until stopped; counts what the service accepted."""

    def __init__(self, connection_string: str) -> None:
        super().__init__(daemon=True)
        self.connection_string = connection_string
        self.stop = threading.Event()
        self.sent: dict[str, int] = defaultdict(int)
        self.error: BaseException | None = None

    def run(self) -> None:
        from azure.eventhub import EventData, EventHubProducerClient

        try:
            with EventHubProducerClient.from_connection_string(self.connection_string) as producer:
                n = 0
                while not self.stop.is_set():
                    for pid in map(str, range(PARTITIONS)):
                        batch = producer.create_batch(partition_id=pid)
                        for _ in range(10):
                            batch.add(EventData(f"{pid}-{n}"))
                            n += 1
                        producer.send_batch(batch)
                        self.sent[pid] += 10
                    time.sleep(0.05)
        except BaseException as exc:  # reported by the test
            self.error = exc


def _read(outs: list[Path]) -> list[tuple[str, int, str, float]]:
    rows = []
    for out in outs:
        if out.exists():
            for line in out.read_text().splitlines():
                parts = line.split()
                if len(parts) == 4 and parts[0] != "CP":
                    rows.append((parts[0], int(parts[1]), parts[2], float(parts[3])))
    return rows


def _checkpoint_lines(out: Path) -> list[tuple[str, int, float]]:
    """Every checkpoint the consumer that wrote ``out`` started writing: partition, sequence number, time."""
    lines = []
    for line in out.read_text().splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[0] == "CP":
            lines.append((parts[1], int(parts[2]), float(parts[3])))
    return lines


def _checkpoints(out: Path) -> dict[str, int]:
    """The last checkpoint written per partition by the consumer that wrote ``out``."""
    return {pid: seq for pid, seq, _ in _checkpoint_lines(out)}


def _scenario(tmp_path: Path, env: dict[str, str], connection_string: str) -> None:
    outs = {name: tmp_path / f"{name}.log" for name in ("a", "b", "c")}
    producer = Producer(connection_string)
    procs: dict[str, subprocess.Popen[str]] = {}
    try:
        procs["a"] = _start("a", outs["a"], env)
        procs["b"] = _start("b", outs["b"], env)
        producer.start()
        time.sleep(4.0)
        procs["a"].send_signal(signal.SIGKILL)
        procs["a"].wait(timeout=10)
        time.sleep(1.0)
        procs["c"] = _start("c", outs["c"], env)
        time.sleep(5.0)
        producer.stop.set()
        producer.join(timeout=30)
        assert producer.error is None, producer.error
        expected = {(pid, seq) for pid, n in producer.sent.items() for seq in range(n)}
        deadline = time.monotonic() + 60.0
        while time.monotonic() < deadline:
            seen = {(pid, seq) for pid, seq, _, _ in _read(list(outs.values()))}
            if expected <= seen:
                break
            time.sleep(0.5)
        for name in ("b", "c"):
            procs[name].send_signal(signal.SIGTERM)
        for name in ("b", "c"):
            assert procs[name].wait(timeout=30) == 0, outs[name].with_suffix(".err").read_text()[-3000:]
    finally:
        producer.stop.set()
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    rows = _read(list(outs.values()))
    seen = {(pid, seq) for pid, seq, _, _ in rows}
    missing = sorted(expected - seen)
    assert missing == [], f"{len(missing)} events never processed, e.g. {missing[:10]}"
    assert {owner for _, _, owner, _ in rows} == {"a", "b", "c"}

    by_event: dict[tuple[str, int], list[tuple[str, float]]] = defaultdict(list)
    for pid, seq, owner, at in rows:
        by_event[(pid, seq)].append((owner, at))
    # the checkpoint window: what a processed after the last checkpoint it wrote for the partition
    a_last = _checkpoints(outs["a"])
    duplicates = {k: v for k, v in by_event.items() if len(v) > 1}
    for (pid, seq), runs in duplicates.items():
        owners = [owner for owner, _ in runs]
        assert "a" in owners and len(owners) == 2, (pid, seq, runs)  # only the killed consumer's work is redone
        assert seq > a_last.get(pid, -1), (pid, seq, a_last)
    assert len(duplicates) < len(expected) / 4  # sanity: a window (0.5 s), not the whole stream

    # at every checkpoint write, every event at or below it had been processed (its work completed)
    first_done: dict[tuple[str, int], float] = {}
    for pid, seq, _, at in rows:
        first_done[(pid, seq)] = min(at, first_done.get((pid, seq), at))
    for out in outs.values():
        for pid, seq, at in _checkpoint_lines(out):
            early = [s for s in range(seq + 1) if first_done.get((pid, s), float("inf")) > at + 0.001]
            assert early == [], f"checkpoint {pid}@{seq} at {at} before {early[:5]} were processed"


@pytest.mark.slow
def test_sqlite_processes_kill_and_join_every_event_processed(tmp_path: Path, emulator_factory: Any) -> None:
    emulator = emulator_factory(hubs={"procs": PARTITIONS})
    connection_string = emulator.connection_string("procs")
    env = {"RXHUBS_TEST_EVENTHUB": connection_string, "RXHUBS_TEST_STORE": f"sqlite:///{tmp_path / 'cp.sqlite'}"}
    _scenario(tmp_path, env, connection_string)


@pytest.mark.slow
def test_async_work_in_flight_at_a_kill_loses_nothing(tmp_path: Path, emulator_factory: Any) -> None:
    emulator = emulator_factory(hubs={"procs": PARTITIONS})
    connection_string = emulator.connection_string("procs")
    env = {
        "RXHUBS_TEST_EVENTHUB": connection_string,
        "RXHUBS_TEST_STORE": f"sqlite:///{tmp_path / 'cp.sqlite'}",
        "RXHUBS_TEST_ASYNC_WORK": "1",
    }
    _scenario(tmp_path, env, connection_string)


@pytest.mark.slow
@pytest.mark.azurite
def test_blob_processes_kill_and_join_every_event_processed(
    tmp_path: Path, emulator_factory: Any, azurite: Any, blob_container: str
) -> None:
    emulator = emulator_factory(hubs={"procs": PARTITIONS})
    connection_string = emulator.connection_string("procs")
    env = {
        "RXHUBS_TEST_EVENTHUB": connection_string,
        "RXHUBS_TEST_STORE": f"blob://{blob_container}",
        "RXHUBS_TEST_STORAGE": azurite.connection_string,
    }
    _scenario(tmp_path, env, connection_string)
