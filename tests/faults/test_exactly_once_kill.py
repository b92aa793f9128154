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

from tests.faults.eo_kit import (
    PARTITIONS,
    Fleet,
    Producer,
    chaos,
    compare,
    drain,
    hub_ledger,
    read_control,
    read_table,
    table_positions,
)

SEED = 26


def _run(tmp_path: Path, emulator_factory: Any, sinks: str
         ) -> tuple[Fleet, dict[str, Any], dict[tuple[str, int], str], dict[str, int | None]]:
    """The whole run: produce under the fault schedule, read the hub back, drain, stop; the table's positions."""
    emulator = emulator_factory(hubs={"eo": PARTITIONS}, consumer_groups=("control", "verify"))
    conn = emulator.connection_string("eo")
    fleet = Fleet(tmp_path, sinks, {"RXHUBS_TEST_EVENTHUB": conn})
    kind = sinks.split(",")[-1]
    producer = Producer(conn)

    def tables() -> list[list[tuple[str, int, str | None]]]:
        return [read_control(tmp_path), *([read_table(kind, tmp_path)] if kind != "jsonl" else [])]

    try:
        producer.start()
        done = chaos(fleet, SEED)
        producer.stop.set()
        producer.join(timeout=30)
        assert producer.error is None, producer.error
        ledger = hub_ledger(conn)
        assert len(ledger) == producer.sent and len(set(ledger.values())) == len(ledger)
        assert drain(fleet, lambda: all(set(ledger) <= {(p, s) for p, s, _ in rows} for rows in tables())), [
            compare(ledger, rows).summary() for rows in tables()]
        for slot in fleet.running():
            code = fleet.stop_gracefully(slot)
            err = (tmp_path / f"{fleet.owner[slot]}.err").read_text()
            assert code == 0, err[-3000:]
    finally:
        producer.stop.set()
        fleet.shutdown()
    positions = table_positions(kind, tmp_path, conn) if kind != "jsonl" else {}
    return fleet, done, ledger, positions


def _zombie_lost(fleet: Fleet, done: dict[str, Any], group: str) -> set[str]:
    """The paused consumer's partitions it closed as lost once resumed (its ownership had expired meanwhile)."""
    paused = done["paused"]
    assert paused and done["paused_partitions"], done
    return {f[1] for owner, f in fleet.log("CLOSE") if owner == paused and f[0] == group and f[2] == "ownership_lost"
            and f[1] in done["paused_partitions"]}


@pytest.mark.slow
@pytest.mark.timeout(300)  # ~45 s on a quiet machine; minutes when it is busy (parallel runs)
@pytest.mark.parametrize("kind", ["sqlite", "delta"])
def test_exactly_once_sinks_hold_every_event_once_under_kills_handovers_and_a_zombie(
    tmp_path: Path, emulator_factory: Any, kind: str
) -> None:
    fleet, done, ledger, positions = _run(tmp_path, emulator_factory, f"jsonl,{kind}")
    table = compare(ledger, read_table(kind, tmp_path))
    control = compare(ledger, read_control(tmp_path))
    hooks = [f for _, f in fleet.log("HOOK")]
    print(f"{kind}: events={len(ledger)} kills={done['kills']} hook kills={len(hooks)} {hooks} "
          f"terms={done['terms']} paused={done['paused']}\n  table: {table.summary()}\n  control: {control.summary()}")
    # exactly once: the table holds what the hub holds, each event once, and each partition's position is the end
    assert table.lost == [] and table.phantoms == [] and table.wrong_ids == [], table.summary()
    assert table.duplicates == 0 and table.rows == len(ledger), table.summary()
    last = {p: max(s for q, s in ledger if q == p) for p in map(str, range(PARTITIONS))}
    assert positions == last
    # the control, under the same faults (the same processes), duplicated events and lost none
    assert control.lost == [] and control.phantoms == [] and control.wrong_ids == [], control.summary()
    assert control.duplicates > 0, control.summary()
    # the faults were felt: kills from outside, kills inside a commit, graceful handovers, a zombie fenced off
    assert done["kills"] >= 2 and done["terms"] >= 1
    assert fleet.died_inside(), hooks  # with the rows written, the commit not made (Delta: the file not in the log)
    reopened = [f for _, f in fleet.log("OPEN") if f[0] == "$Default"]
    assert len(reopened) > PARTITIONS, reopened
    assert _zombie_lost(fleet, done, "$Default")
    first = _zombie_first_commits(fleet, done, "$Default")
    # the zombie's late commit of what it held was filtered: none of it written, some of it dropped. A commit the
    # pause froze mid-way may have written its rows before the pause (legitimately: the table was its own then)
    late = {pid: (w, k) for pid, (w, k, in_flight) in first.items() if not in_flight}
    # it stopped itself as a commit holding rows began (eo_hooks.pause_here), so that commit ran after the resume
    assert late, first
    assert all(w == 0 for w, _ in late.values()), first
    # and the fence was felt: the zombie held rows it could no longer commit, and dropped them
    assert any(k > 0 for _, k in late.values()), first


def _zombie_first_commits(fleet: Fleet, done: dict[str, Any], group: str) -> dict[str, tuple[int, int, bool]]:
    """Paused partition -> (written, skipped, in flight) of the zombie's first commit that ended after it resumed.

    In flight: the commit began before the pause, which froze it mid-way (where is not known).

    Only commits before the zombie opened that partition again count: once resumed, it learns it lost them and
    may win one back in a later round, legitimately, from the table's position; its commits of it from then on
    write rows as any owner's do. A partition it held nothing of at the pause has no zombie commit at all.
    """
    resumed = max(t for t, action, _ in fleet.actions if action == "resume")
    paused = done["paused"]
    reopened = {}  # partition -> when the zombie opened it again
    for owner, f in fleet.log("OPEN"):
        if owner == paused and f[0] == group and float(f[2]) > resumed:
            reopened.setdefault(f[1], float(f[2]))
    pause = max(t for t, action, _ in fleet.actions if action == "pause")
    first: dict[str, tuple[int, int, bool]] = {}
    for owner, f in fleet.log("COMMIT"):
        began, ended = float(f[0]), float(f[1])
        if owner != paused or ended <= resumed:
            continue
        for part in f[2:]:
            pid, written, skipped = part.split(":")
            if pid in done["paused_partitions"] and ended < reopened.get(pid, float("inf")):
                first.setdefault(pid, (int(written), int(skipped), began < pause))
    return first
