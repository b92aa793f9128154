"""A zombie consumer: paused (SIGSTOP) past its ownership expiry while another takes its partitions, then resumed.

Two consumer processes (``tests.balancing.consumer_proc``: interval 1 s, expiry 3 s, a checkpoint every 0.5 s)
balance four partitions of the emulator through one SQLite store while a producer sends. Consumer A is
stopped with SIGSTOP for longer than the expiry; B takes A's partitions over and checkpoints them. A is then
resumed with SIGCONT, still believing it owns them, with checkpoints pending. The store is polled all along:

* no partition's checkpoint ever moves backwards (every value seen during the resume is recorded);
* A's late writes were refused (the fence was felt: ``FENCED`` lines), and A closed those partitions with
  ``CloseReason.OWNERSHIP_LOST`` instead of crashing;
* every event produced was processed at least once (0 lost), and both consumers stop cleanly afterwards.
"""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from tests.balancing.consumer_proc import EXPIRY
from tests.sources.test_partitions_processes import PARTITIONS, Producer, _read, _start


def _owners(db: Path) -> dict[str, str]:
    """Partition -> owner of the live records (renewed within the expiry) of the consumer group."""
    try:
        with sqlite3.connect(db) as con:
            rows = con.execute(
                "SELECT partition_id, owner_id, last_modified_time FROM rxhubs_ownership "
                "WHERE consumer_group = '$default'"
            ).fetchall()
    except sqlite3.OperationalError:  # not created yet, or busy
        return {}
    now = time.time()
    return {pid: owner for pid, owner, at in rows if owner and now - float(at) < EXPIRY}


def _checkpoints(db: Path) -> dict[str, int]:
    try:
        with sqlite3.connect(db) as con:
            rows = con.execute("SELECT partition_id, sequence_number FROM rxhubs_checkpoint").fetchall()
    except sqlite3.OperationalError:  # not created yet, or busy
        return {}
    return {pid: int(seq) for pid, seq in rows}


class Poller(threading.Thread):
    """Reads the checkpoints every few milliseconds and keeps every change seen, per partition."""

    def __init__(self, db: Path) -> None:
        super().__init__(daemon=True)
        self.db = db
        self.stop = threading.Event()
        self.seen: dict[str, list[int]] = defaultdict(list)
        self.reads = 0

    def run(self) -> None:
        while not self.stop.is_set():
            current = _checkpoints(self.db)
            self.reads += 1
            for pid, seq in current.items():
                if not self.seen[pid] or self.seen[pid][-1] != seq:
                    self.seen[pid].append(seq)
            time.sleep(0.005)


def _lines(out: Path, kind: str) -> list[list[str]]:
    return [line.split()[1:] for line in out.read_text().splitlines() if line.startswith(kind + " ")]


def _wait(condition: Any, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return bool(condition())


@pytest.mark.slow
def test_a_paused_consumer_resumed_after_a_takeover_never_moves_a_checkpoint_and_drops_its_partitions(
    tmp_path: Path, emulator_factory: Any
) -> None:
    emulator = emulator_factory(hubs={"zombie": PARTITIONS})
    conn = emulator.connection_string("zombie")
    db = tmp_path / "checkpoints.sqlite"
    env = {"RXHUBS_TEST_EVENTHUB": conn, "RXHUBS_TEST_STORE": f"sqlite:///{db}"}
    outs = {name: tmp_path / f"{name}.log" for name in ("a", "b")}
    producer = Producer(conn)
    poller = Poller(db)
    procs: dict[str, subprocess.Popen[str]] = {}
    try:
        procs["a"] = _start("a", outs["a"], env)
        procs["b"] = _start("b", outs["b"], env)
        producer.start()
        assert _wait(lambda: sorted(_owners(db).values()) == ["a", "a", "b", "b"], 30), _owners(db)
        assert _wait(lambda: len(_checkpoints(db)) == PARTITIONS, 30)
        poller.start()
        a_partitions = sorted(pid for pid, owner in _owners(db).items() if owner == "a")
        assert len(a_partitions) == 2
        # stop A right after one of its checkpoint writes, once more batches arrived: a write is then pending,
        # with its timer armed, when A resumes
        written = len(_lines(outs["a"], "CP"))
        assert _wait(lambda: len(_lines(outs["a"], "CP")) > written, 10)
        time.sleep(0.25)
        procs["a"].send_signal(signal.SIGSTOP)
        at_stop = _checkpoints(db)
        # B takes A's partitions once their records expire, and checkpoints past where A stopped
        assert _wait(
            lambda: set(_owners(db)) == set(map(str, range(PARTITIONS))) and set(_owners(db).values()) == {"b"}, 30
        ), _owners(db)
        # ... and past everything A had read before it stopped: a late write of A's would now go backwards
        a_read = {p: max(seq for pid, seq, owner, _ in _read([outs["a"]]) if pid == p) for p in a_partitions}
        assert _wait(lambda: all(_checkpoints(db).get(p, -1) > max(at_stop[p], a_read[p]) for p in a_partitions), 30)
        taken_over = _checkpoints(db)
        procs["a"].send_signal(signal.SIGCONT)  # A resumes, believing it still owns them
        assert _wait(lambda: {p for p, _ in _lines(outs["a"], "CLOSE")} >= set(a_partitions), 30)
        time.sleep(2.0)  # keep polling through A's resume
        producer.stop.set()
        producer.join(timeout=30)
        assert producer.error is None, producer.error
        expected = {(pid, seq) for pid, n in producer.sent.items() for seq in range(n)}
        assert _wait(lambda: expected <= {(p, s) for p, s, _, _ in _read(list(outs.values()))}, 60)
        for name in ("a", "b"):
            procs[name].send_signal(signal.SIGTERM)
        for name in ("a", "b"):
            assert procs[name].wait(timeout=30) == 0, outs[name].with_suffix(".err").read_text()[-3000:]
    finally:
        producer.stop.set()
        poller.stop.set()
        for proc in procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.kill()
                proc.wait()
    poller.join(timeout=5)

    # never backwards, not even briefly: every value the poller saw, in order
    assert poller.reads > 100
    for pid, values in poller.seen.items():
        assert values == sorted(values), (pid, values)
    for pid in a_partitions:
        assert poller.seen[pid][-1] >= taken_over[pid]
    # the fence was felt: A's late writes for the partitions B had taken were refused, and reported
    fenced = _lines(outs["a"], "FENCED")
    assert fenced and {pid for pid, _ in fenced} <= set(a_partitions), fenced
    assert all(int(seq) < max(poller.seen[pid]) for pid, seq in fenced)
    assert {pid for pid, operation in _lines(outs["a"], "LOST") if operation == "checkpoint"} == {
        pid for pid, _ in fenced
    }
    # A closed each of them as lost (not a crash, not a shutdown) before it read any of them again
    closes = _lines(outs["a"], "CLOSE")
    for pid in a_partitions:
        assert [pid, "ownership_lost"] in closes, closes
    # 0 lost
    seen = {(pid, seq) for pid, seq, _, _ in _read(list(outs.values()))}
    missing = sorted(expected - seen)
    assert missing == [], f"{len(missing)} events never processed, e.g. {missing[:10]}"
