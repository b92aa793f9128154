"""Windowed counts in real processes killed with SIGKILL: the results equal a ground truth computed offline.

Eight partitions on the emulator, events keyed by device (partition key = device), event time in the payload
with disorder inside the grace period, one-minute tumbling windows in compressed time (a minute of event time per
second), a few events injected far past the grace period. Three worker processes (``tests.faults.state_worker``)
share a SQLite checkpoint store and a SQLite results table upserted per (device, window); every six ticks of the
producer (1.5 s, 1.5 minutes of event time; the producer waits if a fault lags) one of them is killed with
SIGKILL (the fourth time stopped with SIGTERM instead) and restarted as a new owner, so partitions move many
times. Afterwards the hub is read from the start and counted offline (``tests.faults.statekit``):

* with ``hops.window`` (state committed with the checkpoint): 0 wrong, 0 missing, 0 extra cells; the events
  reported late are exactly the ones injected past grace; a cell emitted twice (after a crash) carries the same
  value both times; new owners restored saved state (the operator logs each restore);
* the control, the same counting in process memory without committed state, under the same faults: wrong cells
  (the checker sees the damage a crash does to uncommitted state).
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import pytest

from tests.faults.statekit import (
    PARTITIONS,
    STEP,
    Fleet,
    Producer,
    Truth,
    checkpoints,
    compare,
    create_results,
    ground_truth,
    results,
    wait_until,
)

NAMES = ("a", "b", "c")
FAULT_EVERY = 6  # ticks (1.5 s of real time, 1.5 minutes of event time) between faults
FAULTS = 7  # 6 SIGKILLs, 1 SIGTERM (the fourth fault), all while the producer sends
TICKS = 48  # 12 minutes of event time: 12 windows per device


def _run(
    tmp_path: Path, emulator_factory: Any, mode: str, *, seed: int, faults: int = FAULTS, ticks: int = TICKS
) -> tuple[Truth, dict[str, Any], Fleet]:
    emulator = emulator_factory(hubs={"state": PARTITIONS}, consumer_groups=["verify"])
    conn = emulator.connection_string("state")
    store, db = tmp_path / "checkpoints.sqlite", tmp_path / "results.sqlite"
    create_results(db)
    env = {"RXHUBS_TEST_EVENTHUB": conn, "RXHUBS_TEST_STORE": f"sqlite:///{store}",
           "RXHUBS_STATE_RESULTS": str(db), "RXHUBS_STATE_MODE": mode}
    fleet = Fleet(tmp_path, env)

    def gate(tick: int) -> None:  # the producer waits (its event time does not move) while a fault lags behind
        while tick >= (fleet.faults + 1) * FAULT_EVERY and fleet.faults < faults and not producer.stop.is_set():
            time.sleep(0.05)

    producer = Producer(conn, seed=seed, ticks=ticks, gate=gate)
    rng = random.Random(seed)
    try:
        fleet.start(*NAMES)
        producer.start()
        while fleet.faults < faults:
            next_at = (fleet.faults + 1) * FAULT_EVERY - 1
            assert wait_until(lambda: producer.tick >= next_at or producer.done.is_set(), 60)  # noqa: B023
            assert not producer.done.is_set(), "the producer finished before the faults"
            time.sleep(rng.uniform(0.0, 0.5))
            name = rng.choice(NAMES)
            if fleet.faults == 3:
                fleet.stop(name)  # once gracefully: the release flushes state with the checkpoint
            else:
                fleet.kill(name)
            fleet.start(name)
        producer.join(timeout=30)
        assert producer.error is None, producer.error
        truth = ground_truth(conn)
        # drained: every partition checkpointed at its last event (results are written before the checkpoint)
        drained = wait_until(lambda: all(checkpoints(store).get(p, -1) >= s for p, s in truth.last.items()), 90)
        assert drained, (checkpoints(store), truth.last)
        fleet.stop_all()
    finally:
        producer.stop.set()
        fleet.cleanup()
    cells, late, conflicts, again = results(db)
    report = {**compare(truth.cells, cells), "late": late, "conflicts": conflicts}
    print(f"{mode}: {truth.events} events, {len(truth.flagged_late)} injected late, kills {fleet.kills}, "
          f"stops {fleet.stops}, handovers {fleet.handovers()}: {report['cells']} cells, wrong {report['wrong']}, "
          f"missing {report['missing']}, extra {report['extra']}, late reported {len(late)}, "
          f"cells emitted again {again}, with another value {len(conflicts)}, restores {fleet.restores()}; "
          f"examples {report['examples']}, partitions {_partitions_of(truth, report)}")
    return truth, report, fleet


def _partitions_of(truth: Truth, report: dict[str, Any]) -> dict[str, list[str]]:
    """The partitions of the devices of the wrong cells (to find their owners in the workers' logs)."""
    return {d: sorted(truth.partition_of[d]) for (d, _), *_ in report["examples"]["wrong"]}


def _check_harness(truth: Truth, fleet: Fleet, *, faults: int = FAULTS, ticks: int = TICKS) -> None:
    # the workload is what the test says it is
    assert truth.events > ticks * 30
    assert all(len(p) == 1 for p in truth.partition_of.values()), "a device in two partitions"
    assert len({next(iter(p)) for d, p in truth.partition_of.items() if d.startswith("dev-")}) >= 6
    assert truth.flagged_late and truth.late == truth.flagged_late  # injected past grace == late by the rule
    assert len({start for _, start in truth.cells}) >= ticks * STEP / 60 - 1  # many windows
    # the faults were felt
    assert (fleet.kills, fleet.stops) == (faults - 1, 1)
    assert fleet.handovers() >= 2 * faults, fleet.handovers()


@pytest.mark.slow
def test_windowed_counts_survive_kills_and_handovers_exactly(tmp_path: Path, emulator_factory: Any) -> None:
    truth, report, fleet = _run(tmp_path, emulator_factory, "window", seed=27)
    _check_harness(truth, fleet)
    assert (report["wrong"], report["missing"], report["extra"]) == (0, 0, 0), report
    assert report["late"] == truth.flagged_late
    assert not report["conflicts"], report["conflicts"]  # re-emitted after a crash: the same values
    assert len([n for n in fleet.restores() if n > 0]) >= 3, fleet.restores()  # new owners restored saved state


@pytest.mark.slow
def test_control_without_committed_state_gets_wrong_counts_under_the_same_faults(
    tmp_path: Path, emulator_factory: Any
) -> None:
    # shorter: it only has to show that the checker sees what a crash does to uncommitted state
    truth, report, fleet = _run(tmp_path, emulator_factory, "memory", seed=27, faults=4, ticks=30)
    _check_harness(truth, fleet, faults=4, ticks=30)
    assert report["wrong"] + report["missing"] > 0, report
