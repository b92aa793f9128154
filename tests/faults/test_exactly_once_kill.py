"""Exactly once into tables, in real processes against the emulator, under kill -9, handovers and a zombie.

Three consumer processes (``tests.faults.eo_worker``) share four partitions through one SQLite checkpoint store
while a producer sends events with unique ids. A seeded schedule (``tests.faults.eo_kit.chaos``) kills them with
SIGKILL at random moments, stops and restarts them gracefully (handovers), makes some kill themselves between
writing their rows and committing them (the worker's hook), and pauses the busiest one with SIGSTOP past its
ownership expiry, then resumes it. Afterwards the table is compared with what the hub holds (every partition read
from the start).

Each process runs the at-least-once control beside the exactly-once sink (``jsonl_sink`` + ``hops.checkpoint`` in
a consumer group of its own), so the control is under exactly the same faults: it must show duplicates and lose
nothing, which proves the harness sees duplicates when there are some.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.faults.eo_kit import PARTITIONS, Fleet, Producer, chaos, compare, drain, hub_ledger, read_control

SEED = 26


def _run(tmp_path: Path, emulator_factory: Any, sinks: str) -> tuple[Fleet, dict[str, Any], dict[Any, str]]:
    emulator = emulator_factory(hubs={"eo": PARTITIONS}, consumer_groups=("control", "verify"))
    conn = emulator.connection_string("eo")
    fleet = Fleet(tmp_path, sinks, {"RXHUBS_TEST_EVENTHUB": conn})
    producer = Producer(conn)
    try:
        producer.start()
        done = chaos(fleet, SEED)
        producer.stop.set()
        producer.join(timeout=30)
        assert producer.error is None, producer.error
        ledger = hub_ledger(conn)
        assert len(ledger) == producer.sent and len(set(ledger.values())) == len(ledger)
        assert drain(fleet, lambda: set(ledger) <= {(p, s) for p, s, _ in read_control(tmp_path)}), (
            compare(ledger, read_control(tmp_path)).summary())
        for slot in fleet.running():
            code = fleet.stop_gracefully(slot)
            assert code == 0, (tmp_path / f"{fleet.owner[slot]}.err").read_text()[-3000:]
    finally:
        producer.stop.set()
        fleet.shutdown()
    return fleet, done, ledger


def _zombie_lost(fleet: Fleet, done: dict[str, Any], group: str) -> set[str]:
    """The paused consumer's partitions it closed as lost once resumed (its ownership had expired meanwhile)."""
    paused = done["paused"]
    assert paused and done["paused_partitions"], done
    return {f[1] for owner, f in fleet.log("CLOSE") if owner == paused and f[0] == group and f[2] == "ownership_lost"
            and f[1] in done["paused_partitions"]}


@pytest.mark.slow
def test_the_control_at_least_once_sink_shows_duplicates_under_the_faults(tmp_path: Path, emulator_factory: Any
                                                                          ) -> None:
    fleet, done, ledger = _run(tmp_path, emulator_factory, "jsonl")
    control = compare(ledger, read_control(tmp_path))
    hooks = fleet.log("HOOK")
    print(f"events={len(ledger)} kills={done['kills']} hook kills={len(hooks)} terms={done['terms']} "
          f"paused={done['paused']} control: {control.summary()}")
    # the faults were felt
    assert done["kills"] >= 2 and done["terms"] >= 1 and hooks
    assert _zombie_lost(fleet, done, "control")
    # at least once: nothing lost, nothing invented, and duplicates the harness sees
    assert control.lost == [] and control.phantoms == [] and control.wrong_ids == [], control.summary()
    assert control.duplicates > 0, control.summary()
