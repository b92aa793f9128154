"""The state benchmark's figures, computed from trial records (no processes: the arithmetic)."""

from __future__ import annotations

import gc
from typing import Any

from reactivex import operators as ops
from reactivex.subject import Subject

from rxhubs.bench.state._scenario import _figures
from rxhubs.bench.state._worker import CHECKPOINT_INTERVAL, CountingStore, CpuSplit


def trial(rates: dict[str, float], *, cpu: float = 1.0, stage: float = 0.2, writes: int = 5,
          split: tuple[float, float, float] | None = None) -> dict[str, Any]:
    """A trial record; ``split`` is (pipeline, gc, source) CPU seconds, as the worker reports them."""
    record = {
        "events": 1000, "seconds": 4.2, "events_per_s": 1000 / 4.2, "cpu_s": cpu, "stage_cpu_s": stage,
        "writes": dict.fromkeys(rates, writes), "intervals": 4.2, "write_rates": rates, "state_bytes": {"0": 100},
    }
    if split is not None:
        record.update(pipeline_cpu_s=split[0], gc_s=split[1], source_cpu_s=split[2])
    return record


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


def test_the_verdict_takes_each_trials_machine_speed_out_by_its_source_path() -> None:
    plain = trial({"0": 1.0}, cpu=1.0, split=(0.2, 0.1, 0.7))  # 1 + 0.3 / 0.7 = 1.43 per unit of source
    # the same pipeline cost on a machine running twice as slow: whole-process CPU says 0.48x
    slow = figures(trial({"0": 1.0}, cpu=2.1, stage=0.5, split=(0.5, 0.2, 1.4)), plain)["events_per_s"]
    assert slow["state_us_per_event"] == 50.0  # its count took 0.25 s at the plain trial's speed, 0.05 s more
    assert slow["cpu_ratio"] == round(1.0 / 2.1, 4)
    assert slow["judged_by"] == "normalised_ratio"
    assert slow["normalised_ratio"] == round((1 + 0.3 / 0.7) / (1 + 0.7 / 1.4), 4) and slow["met"]  # 0.95x
    assert slow["source_cpu_s"] == {"plain": 0.7, "state": 1.4} and slow["gc_s"] == {"plain": 0.1, "state": 0.2}
    # at the same speed, a pipeline that costs more fails, and so does garbage collection that ran in the source
    # path (it counts as the side's own cost): both 1 + 0.55 / 0.7, 0.80x
    for split in ((0.4, 0.15, 0.7), (0.2, 0.35, 0.7)):
        costly = figures(trial({"0": 1.0}, cpu=1.25, split=split), plain)["events_per_s"]
        assert costly["normalised_ratio"] == round((1 + 0.3 / 0.7) / (1 + 0.55 / 0.7), 4)
        assert not costly["met"]


def test_the_split_counts_collections_as_gc_not_pipeline_and_only_between_start_and_stop() -> None:
    split, batches = CpuSplit(), Subject[str]()
    batches.pipe(split.probed(ops.do_action(lambda _: gc.collect()))).subscribe()
    enabled = gc.isenabled()
    gc.disable()  # (only the collections the stage makes)
    try:
        with split:
            batches.on_next("before")
            split.start()
            batches.on_next("counted")
            split.stop()
            batches.on_next("after")
    finally:
        if enabled:
            gc.enable()
    out = split.figures(cpu_s=10.0)
    assert out["gc_collections"] == 1
    assert out["gc_s"] > 0 and out["pipeline_cpu_s"] < out["gc_s"]  # the full collection is GC, not the stage
    assert out["source_cpu_s"] == 10.0 - out["pipeline_cpu_s"] - out["gc_s"]
    assert split._collected not in gc.callbacks
