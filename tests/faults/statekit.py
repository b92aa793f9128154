"""The harness of the state fault test: a producer in compressed event time, the ground truth, a fleet, a checker.

* :class:`Producer` sends, per tick, a few events per device (partition key = the device, so a device stays in
  one partition). Event time is synthetic: each tick moves it :data:`STEP` seconds (a minute of event time per
  real second), each event is up to :data:`DISORDER` seconds older than the tick (inside the grace period), and
  now and then an event is injected far past the grace period (``"late": true``). At the end one far-future
  marker per partition (device ``end-P``) moves every partition's watermark past every window, so all of them
  close.
* :func:`ground_truth` reads every partition from the start and counts per (device, window) offline, with the
  watermark rule (a window ``[s, s+60)`` is closed once ``s + 60 <= max event time seen - grace``).
* :class:`Fleet` runs the worker processes (``tests.faults.state_worker``): start, SIGKILL, SIGTERM, restart as
  a new owner (``NAME.INCARNATION``), and counts handovers from their ``OPEN`` lines.
* :func:`compare` counts wrong, missing and extra cells.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.faults.state_worker import GRACE, SCHEMA, WINDOW, window_start

ROOT = Path(__file__).resolve().parents[2]
BASE = 1_767_225_600.0  # 2026-01-01T00:00:00Z: synthetic event time starts here
STEP = 15.0  # event-time seconds per tick
TICK = 0.25  # real seconds per tick: a minute of event time per second
DISORDER = 12.0  # events are up to this much older than their tick: inside GRACE
LATE_BY = 300.0  # injected late events are this much (and up to a minute more) older than their tick
PARTITIONS = 8


class Producer(threading.Thread):
    """Sends ``ticks`` ticks of keyed events, then the end markers; keeps what the hub accepted."""

    def __init__(
        self, connection_string: str, *, devices: int = 16, ticks: int = 48, seed: int = 27,
        gate: Callable[[int], None] = lambda tick: None,
    ) -> None:
        super().__init__(daemon=True)
        self.gate = gate  # called before each tick: lets the test hold the producer until its faults kept up
        self.tick = 0
        self.connection_string = connection_string
        self.devices = [f"dev-{i:02d}" for i in range(devices)]
        self.ticks = ticks
        self.rng = random.Random(seed)
        self.sent = 0
        self.injected_late: set[str] = set()
        self.stop = threading.Event()
        self.done = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        from azure.eventhub import EventData, EventHubProducerClient

        try:
            with EventHubProducerClient.from_connection_string(self.connection_string) as producer:
                began = time.monotonic()
                for tick in range(self.ticks):
                    self.gate(tick)
                    if self.stop.is_set():
                        return
                    self.tick, now = tick, BASE + tick * STEP
                    for device in self.devices:
                        bodies = [{"id": f"{tick}-{device}-{i}", "d": device,
                                   "t": round(now - self.rng.uniform(0, DISORDER), 3), "late": False}
                                  for i in range(self.rng.randint(1, 4))]
                        if tick >= 6 and self.rng.random() < 0.06:
                            bodies.append({"id": f"L{tick}-{device}", "d": device, "late": True,
                                           "t": round(now - LATE_BY - self.rng.uniform(0, 60), 3)})
                        batch = producer.create_batch(partition_key=device)
                        for body in bodies:
                            batch.add(EventData(json.dumps(body)))
                        producer.send_batch(batch)
                        self.sent += len(bodies)
                        self.injected_late.update(b["id"] for b in bodies if b["late"])
                    began = max(began, time.monotonic() - (tick + 1) * TICK)  # a held producer goes on at its pace
                    time.sleep(max(0.0, began + (tick + 1) * TICK - time.monotonic()))
                end = BASE + self.ticks * STEP + 3600.0
                for pid in map(str, range(PARTITIONS)):
                    batch = producer.create_batch(partition_id=pid)
                    batch.add(EventData(json.dumps({"id": f"end-{pid}", "d": f"end-{pid}", "t": end, "late": False})))
                    producer.send_batch(batch)
                    self.sent += 1
        except BaseException as exc:  # reported by the test
            self.error = exc
        finally:
            self.done.set()


async def _read_hub(connection_string: str) -> dict[str, list[tuple[int, dict[str, Any]]]]:
    import rxhubs
    from rxhubs import Position

    stored: dict[str, list[tuple[int, dict[str, Any]]]] = {}
    hub = rxhubs.EventHub.from_connection_string(connection_string)
    async with hub:
        for pid in map(str, range(PARTITIONS)):
            stored[pid] = []
            props = await hub.get_partition_properties(pid)
            last = props.last_enqueued_sequence_number
            if props.is_empty or last is None or last < 0:
                continue
            async with hub.receiver(pid, consumer_group="verify", start=Position.earliest(),
                                    owner_level=None) as receiver:
                got, empty = -1, 0
                while got < last and empty < 15:
                    batch = await receiver.receive_batch(500, 2.0)
                    empty = 0 if batch else empty + 1
                    for e in batch:
                        got = e.sequence_number
                        stored[pid].append((e.sequence_number, e.body_as_json()))
            assert got == last, f"read partition {pid} up to {got}, the hub has {last}"
    return stored


class Truth:
    """What the hub holds, counted offline: cells, late ids, the partition of each device, the last sequences."""

    def __init__(self, stored: dict[str, list[tuple[int, dict[str, Any]]]]) -> None:
        self.cells: Counter[tuple[str, float]] = Counter()
        self.late: set[str] = set()
        self.flagged_late: set[str] = set()
        self.partition_of: dict[str, set[str]] = {}
        self.last = {pid: events[-1][0] for pid, events in stored.items() if events}
        self.events = sum(len(events) for events in stored.values())
        for pid, events in stored.items():
            stream_time = float("-inf")
            for _, body in events:
                self.partition_of.setdefault(body["d"], set()).add(pid)
                if body["late"]:
                    self.flagged_late.add(body["id"])
                start = window_start(body["t"])
                if start + WINDOW <= stream_time - GRACE:
                    self.late.add(body["id"])
                elif not body["d"].startswith("end-"):
                    self.cells[(body["d"], start)] += 1
                stream_time = max(stream_time, body["t"])


def ground_truth(connection_string: str) -> Truth:
    """Read every partition from the start (consumer group ``verify``) and count offline."""
    return Truth(asyncio.run(_read_hub(connection_string)))


def results(db: Path) -> tuple[dict[tuple[str, float], int], set[str], Counter[tuple[str, float]], int]:
    """The sink's cells, the ids reported late, the cells emitted with more than one distinct value, and how many
    cells were emitted more than once."""
    with sqlite3.connect(db, timeout=30.0) as con:
        cells = {(d, s): n for d, s, n in con.execute("SELECT device, window_start, count FROM cells")}
        late = {i for (i,) in con.execute("SELECT id FROM late")}
        conflicts = Counter({(d, s): n for d, s, n in con.execute(
            "SELECT device, window_start, COUNT(DISTINCT count) FROM emits GROUP BY device, window_start "
            "HAVING COUNT(DISTINCT count) > 1")})
        [(again,)] = con.execute("SELECT COUNT(*) FROM (SELECT 1 FROM emits GROUP BY device, window_start "
                                 "HAVING COUNT(*) > 1)").fetchall()
    return cells, late, conflicts, again


def compare(truth: Counter[tuple[str, float]], got: dict[tuple[str, float], int]) -> dict[str, Any]:
    """Wrong, missing and extra cells (and a few examples of each)."""
    wrong = sorted(k for k in truth.keys() & got.keys() if truth[k] != got[k])
    missing = sorted(truth.keys() - got.keys())
    extra = sorted(got.keys() - truth.keys())
    return {"cells": len(truth), "wrong": len(wrong), "missing": len(missing), "extra": len(extra),
            "examples": {"wrong": [(k, truth[k], got[k]) for k in wrong[:5]], "missing": missing[:5],
                         "extra": extra[:5]}}


def create_results(db: Path) -> None:
    with sqlite3.connect(db) as con:
        con.execute("PRAGMA journal_mode=WAL")
        con.executescript(SCHEMA)


def checkpoints(store: Path) -> dict[str, int]:
    """Partition -> the checkpointed sequence number, as the shared SQLite store has it now."""
    try:
        with sqlite3.connect(store, timeout=30.0) as con:
            rows = con.execute("SELECT partition_id, sequence_number FROM rxhubs_checkpoint").fetchall()
    except sqlite3.OperationalError:  # not created yet
        return {}
    return {pid: int(seq) for pid, seq in rows if seq is not None}


class Fleet:
    """The worker processes: started, killed and restarted by name; each incarnation is a new owner."""

    def __init__(self, out: Path, env: dict[str, str]) -> None:
        self.out, self.env = out, env
        self.procs: dict[str, subprocess.Popen[str]] = {}
        self.incarnation: Counter[str] = Counter()
        self.kills = 0
        self.stops = 0

    def start(self, *names: str) -> None:
        started = []
        for name in names:
            self.incarnation[name] += 1
            owner = f"{name}.{self.incarnation[name]}"
            log = self.out / f"{owner}.log"
            proc = subprocess.Popen(
                [sys.executable, "-m", "tests.faults.state_worker", owner, str(log)],
                cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT), **self.env},
                stdout=subprocess.PIPE, stderr=open(log.with_suffix(".err"), "w"),  # noqa: SIM115
                text=True,
            )
            self.procs[name] = proc
            started.append((proc, log))
        for proc, log in started:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "ready", log.with_suffix(".err").read_text()[-3000:]

    def kill(self, name: str) -> None:
        self.procs[name].send_signal(signal.SIGKILL)
        assert self.procs[name].wait(timeout=10) == -signal.SIGKILL
        self.kills += 1

    def stop(self, name: str, *, count: bool = True) -> None:
        self.procs[name].send_signal(signal.SIGTERM)
        code = self.procs[name].wait(timeout=40)
        owner = f"{name}.{self.incarnation[name]}"
        assert code == 0, (self.out / f"{owner}.err").read_text()[-3000:]
        self.stops += count

    @property
    def faults(self) -> int:
        return self.kills + self.stops

    def stop_all(self) -> None:
        for name, proc in self.procs.items():
            if proc.poll() is None:
                self.stop(name, count=False)

    def cleanup(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    def restores(self) -> list[int]:
        """How many keys each restore of saved state brought back (the operator logs it at INFO)."""
        return [int(n) for err in self.out.glob("*.err") for n in re.findall(r"restored (\d+) keys", err.read_text())]

    def handovers(self) -> int:
        """Handovers felt: per partition, the owners (incarnations) that opened it, less one."""
        owners: dict[str, set[str]] = {}
        for log in self.out.glob("*.log"):
            for line in log.read_text().splitlines():
                parts = line.split()
                if parts[:1] == ["OPEN"]:
                    owners.setdefault(parts[1], set()).add(log.stem)
        return sum(len(o) - 1 for o in owners.values())


def wait_until(condition: Any, timeout: float, step: float = 0.25) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(step)
    return bool(condition())
