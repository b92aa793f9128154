"""run_workers: N consumer processes of one group on one machine, over the emulator and a SQLite store.

Each test counts distinct (partition, sequence number) pairs processed against what the producer sent:
at-least-once must hold through balancing, Ctrl-C and a SIGKILLed worker.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import rxhubs
from rxhubs.errors import ConfigurationError
from rxhubs.stores import SqliteCheckpointStore
from tests.sources.test_partitions_processes import PARTITIONS, Producer
from tests.workers import pipelines

ROOT = Path(__file__).resolve().parents[2]


def _rows(out: Path) -> list[tuple[str, int, str]]:
    rows = []
    for log in out.glob("*.log"):
        for line in log.read_text().splitlines():
            pid, seq, owner = line.split()
            rows.append((pid, int(seq), owner))
    return rows


def _workers_of(parent: int) -> set[int]:
    """Live worker processes (multiprocessing spawn children) of ``parent``."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == parent and fields[0] != "Z" and b"spawn_main" in cmdline:
            found.add(int(entry.name))
    return found


def _wait(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def _driver(tmp_path: Path, connection_string: str, workers: int) -> tuple[subprocess.Popen[str], Path, Path]:
    out = tmp_path / "out"
    out.mkdir()
    store = tmp_path / "cp.sqlite"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.workers.driver", connection_string, str(store), str(out), str(workers)],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE,
        stderr=open(tmp_path / "driver.err", "w"), text=True,  # noqa: SIM115 - closed with the process
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "started", (tmp_path / "driver.err").read_text()
    return proc, out, store


def _finish(proc: subprocess.Popen[str], tmp_path: Path) -> list[dict[str, Any]]:
    proc.send_signal(signal.SIGINT)  # Ctrl-C
    stdout, _ = proc.communicate(timeout=90)
    assert proc.returncode == 0, (tmp_path / "driver.err").read_text()[-3000:]
    reports: list[dict[str, Any]] = json.loads(stdout.splitlines()[0])
    assert "total" in stdout  # the printed summary
    return reports


def _state(store_path: Path, connection_string: str) -> tuple[dict[str, int], dict[str, str]]:
    namespace = rxhubs.EventHub.from_connection_string(connection_string).fully_qualified_namespace

    async def read() -> tuple[dict[str, int], dict[str, str]]:
        store = SqliteCheckpointStore(store_path)
        try:
            checkpoints = await store.list_checkpoints(namespace, "workers", "$Default")
            owners = await store.list_ownership(namespace, "workers", "$Default")
        finally:
            await store.close()
        return ({c.partition_id: c.sequence_number or -1 for c in checkpoints},
                {o.partition_id: o.owner_id for o in owners})

    return asyncio.run(read())


def _renewals(store_path: Path, connection_string: str) -> dict[str, set[float]]:
    """Partition -> the renewal times of its ownership record seen so far (one now)."""
    namespace = rxhubs.EventHub.from_connection_string(connection_string).fully_qualified_namespace

    async def read() -> dict[str, set[float]]:
        store = SqliteCheckpointStore(store_path)
        try:
            owners = await store.list_ownership(namespace, "workers", "$Default")
        finally:
            await store.close()
        return {o.partition_id: {o.last_modified_time or 0.0} for o in owners}

    return asyncio.run(read())


def _renewed_twice(seen: dict[str, set[float]], store_path: Path, connection_string: str) -> bool:
    """Note each record's renewal time now; True once every partition's record has two renewals after the first."""
    for pid, times in _renewals(store_path, connection_string).items():
        seen.setdefault(pid, set()).update(times)
    return len(seen) == PARTITIONS and all(len(times) >= 3 for times in seen.values())


@pytest.mark.slow
def test_workers_started_together_split_a_backlog_from_their_first_round(tmp_path: Path, emulator_factory: Any) -> None:
    """Every partition holds events before the workers start. Without the start gate the first worker's first round
    claims all four and reads from each at once, and hands two over a round later: those two are read by both."""
    emulator = emulator_factory(hubs={"workers": PARTITIONS})
    connection_string = emulator.connection_string("workers")
    producer = Producer(connection_string)
    producer.start()
    try:
        _wait(lambda: len(producer.sent) == PARTITIONS and min(producer.sent.values()) >= 50, 60, "a backlog")
        proc, out, _ = _driver(tmp_path, connection_string, workers=2)
        try:
            readers = lambda: {pid: {o for p, _, o in _rows(out) if p == pid} for pid in map(str, range(PARTITIONS))}  # noqa: E731
            _wait(lambda: all(readers().values()), 60, "every partition to be read")
            # two more balancing rounds (each record renewed twice more, as the store shows): a handover of the
            # first round would show by now. (Not a wall-clock wait: on a busy machine rounds come late.)
            seen = _renewals(tmp_path / "cp.sqlite", connection_string)
            _wait(lambda: _renewed_twice(seen, tmp_path / "cp.sqlite", connection_string), 60, "two more rounds")
            _finish(proc, tmp_path)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    finally:
        producer.stop.set()
        producer.join(timeout=30)
    assert producer.error is None, producer.error
    by_partition = readers()
    assert all(len(owners) == 1 for owners in by_partition.values()), by_partition  # nothing handed over
    assert sorted(sum(1 for o in by_partition.values() if o == {w}) for w in ("t-w0", "t-w1")) == [2, 2]


@pytest.mark.slow
def test_workers_share_the_partitions_and_ctrl_c_stops_them_gracefully(tmp_path: Path, emulator_factory: Any) -> None:
    emulator = emulator_factory(hubs={"workers": PARTITIONS})
    connection_string = emulator.connection_string("workers")
    producer = Producer(connection_string)
    proc, out, store = _driver(tmp_path, connection_string, workers=2)
    try:
        producer.start()
        # both workers end up owning partitions: each has processed events
        _wait(lambda: len({owner for _, _, owner in _rows(out)}) == 2, 60, "both workers to process events")
        producer.stop.set()
        producer.join(timeout=30)
        assert producer.error is None, producer.error
        expected = {(pid, seq) for pid, n in producer.sent.items() for seq in range(n)}
        _wait(lambda: expected <= {(p, s) for p, s, _ in _rows(out)}, 60, "every event to be processed")
        reports = _finish(proc, tmp_path)
    finally:
        producer.stop.set()
        if proc.poll() is None:
            proc.kill()
            proc.wait()

    assert [r["owner_id"] for r in reports] == ["t-w0", "t-w1"]
    assert all(r["exit_code"] == 0 and r["restarts"] == 0 and not r["gave_up"] for r in reports), reports
    rows = _rows(out)
    per_owner = {o: sum(1 for _, _, owner in rows if owner == o) for o in ("t-w0", "t-w1")}
    assert {r["owner_id"]: r["events"] for r in reports} == per_owner  # the summary counts what each processed
    # graceful stop: every partition checkpointed at its last event, and released
    checkpoints, owners = _state(store, connection_string)
    assert checkpoints == {pid: n - 1 for pid, n in producer.sent.items()}
    assert set(owners.values()) == {""}, owners


@pytest.mark.slow
def test_a_killed_worker_is_restarted_and_nothing_is_lost(tmp_path: Path, emulator_factory: Any) -> None:
    emulator = emulator_factory(hubs={"workers": PARTITIONS})
    connection_string = emulator.connection_string("workers")
    producer = Producer(connection_string)
    proc, out, store = _driver(tmp_path, connection_string, workers=2)
    try:
        producer.start()
        _wait(lambda: len({owner for _, _, owner in _rows(out)}) == 2, 60, "both workers to process events")
        before = _workers_of(proc.pid)
        assert len(before) == 2
        victim = min(before)
        os.kill(victim, signal.SIGKILL)
        _wait(lambda: len(_workers_of(proc.pid) - before) == 1, 30, "the killed worker to be restarted")
        _wait(lambda: any(log.name.endswith(".1.log") and log.stat().st_size for log in out.glob("*.log")), 60,
              "the restarted worker to process events")
        producer.stop.set()
        producer.join(timeout=30)
        assert producer.error is None, producer.error
        expected = {(pid, seq) for pid, n in producer.sent.items() for seq in range(n)}
        _wait(lambda: expected <= {(p, s) for p, s, _ in _rows(out)}, 60, "every event to be processed")
        reports = _finish(proc, tmp_path)
    finally:
        producer.stop.set()
        if proc.poll() is None:
            proc.kill()
            proc.wait()

    assert sorted(r["restarts"] for r in reports) == [0, 1], reports
    assert all(r["exit_code"] == 0 and not r["gave_up"] for r in reports), reports
    missing = expected - {(p, s) for p, s, _ in _rows(out)}
    assert missing == set()
    checkpoints, owners = _state(store, connection_string)
    assert checkpoints == {pid: n - 1 for pid, n in producer.sent.items()}
    assert set(owners.values()) == {""}, owners


def test_a_worker_that_keeps_dying_is_given_up_on() -> None:
    summary = rxhubs.run_workers(
        pipelines.failing, workers=1, restart=rxhubs.Backoff(initial=0.01, maximum=0.01, max_retries=2)
    )
    (report,) = summary.workers
    assert report.gave_up and report.restarts == 2 and report.exit_code == 1 and report.events == 0
    assert not summary.ok
    assert "gave up" in str(summary)


def test_a_factory_returning_something_else_is_an_error_in_its_worker() -> None:
    summary = rxhubs.run_workers(
        pipelines.not_a_pipeline, workers=1, restart=rxhubs.Backoff(initial=0.01, maximum=0.01, max_retries=0)
    )
    assert summary.workers[0].exit_code == 2 and summary.workers[0].gave_up  # ConfigurationError: exit 2


def test_a_factory_that_cannot_reach_a_process_is_refused_before_any_starts() -> None:
    with pytest.raises(ConfigurationError, match="module level"):
        rxhubs.run_workers(lambda context: None, workers=2)  # type: ignore[arg-type,return-value]

    def nested(context: Any) -> Any:
        return None

    with pytest.raises(ConfigurationError, match="cannot be sent to a worker process"):
        rxhubs.run_workers(nested, workers=2)


@pytest.mark.parametrize("workers", [0, -1, 1.5, True, "2"])
def test_bad_worker_counts_are_refused(workers: Any) -> None:
    with pytest.raises(ConfigurationError, match="workers"):
        rxhubs.run_workers(pipelines.failing, workers=workers)


def test_bad_duration_and_grace_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="duration"):
        rxhubs.run_workers(pipelines.failing, workers=1, duration=0)
    with pytest.raises(ConfigurationError, match="grace"):
        rxhubs.run_workers(pipelines.failing, workers=1, grace=-1)


def test_a_stop_while_the_workers_start_stops_them_gracefully() -> None:
    """The duration ends long before the workers are up (spawn, imports): the SIGTERM sent then waits for the
    worker's handler and stops its pipeline gracefully; it used to kill the worker (exit -15, summary not ok, and
    `rxhubs consume --workers` exited 1 on a loaded machine)."""
    summary = rxhubs.run_workers(pipelines.idle, workers=2, duration=0.05)
    assert [(w.exit_code, w.restarts, w.gave_up) for w in summary.workers] == [(0, 0, False)] * 2, str(summary)
    assert summary.ok


def test_each_worker_runs_its_pipeline_with_the_collector_thresholds_given() -> None:
    summary = rxhubs.run_workers(pipelines.thresholds, workers=2, gc_thresholds=(50_000, 20, 100))
    assert summary.ok and [w.events for w in summary.workers] == [1, 1]  # the item passes only with them set
    summary = rxhubs.run_workers(pipelines.thresholds, workers=1)
    assert summary.ok and summary.workers[0].events == 0
