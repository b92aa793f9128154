"""The state benchmark's figures, computed from trial records (no processes: the arithmetic)."""

from __future__ import annotations

from typing import Any

from rxhubs.bench._state import _figures
from rxhubs.bench._state_worker import CHECKPOINT_INTERVAL, CountingStore


def trial(rates: dict[str, float], *, cpu: float = 1.0, stage: float = 0.2, writes: int = 5) -> dict[str, Any]:
    return {
        "events": 1000, "seconds": 4.2, "events_per_s": 1000 / 4.2, "cpu_s": cpu, "stage_cpu_s": stage,
        "writes": dict.fromkeys(rates, writes), "intervals": 4.2, "write_rates": rates, "state_bytes": {"0": 100},
    }


def figures(state: dict[str, Any], plain: dict[str, Any]) -> dict[str, dict[str, Any]]:
    handovers = {m: [{"handover_s": 0.3, "state_bytes": 1000}] for m in ("plain", "state")}
    out = _figures({"plain": [plain], "state": [state]}, handovers, events=1000, keys=10, repeat=1)
    return {f["metric"]: f for f in out}


def test_writes_per_interval_are_measured_write_to_write_and_extra_writes_fail_the_figure() -> None:
    # 5 writes of a 4.2 s trial: 4 of them a second apart, the final flush left out
    store = CountingStore()
    for at in (0.0, 1.0, 2.0, 3.0, 4.1):
        store.times["0"].append(100.0 + at)
    assert store.rates(before=104.0) == {"0": 3 * CHECKPOINT_INTERVAL / 3.0}

    same = figures(trial({"0": 0.98}), trial({"0": 0.99}))["store_writes_per_partition_per_interval"]
    assert same["met"] and same["rxhubs"] == 0.98
    doubled = figures(trial({"0": 1.96}), trial({"0": 0.99}))["store_writes_per_partition_per_interval"]
    assert not doubled["met"]  # a state-only write between two checkpoints would show here


def test_the_counts_own_cpu_gives_the_windows_cost_per_event() -> None:
    out = figures(trial({"0": 1.0}, cpu=1.2, stage=0.3), trial({"0": 1.0}, cpu=1.0, stage=0.2))["events_per_s"]
    assert out["stage_cpu_s"] == {"plain": 0.2, "state": 0.3}
    assert out["state_us_per_event"] == 100.0  # 0.1 s more for 1,000 events
    assert out["cpu_ratio"] == round(1.0 / 1.2, 4) and out["met"] is False  # 0.83x: still judged by cpu_ratio

