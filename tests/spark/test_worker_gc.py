"""A reused Spark Python worker freezes its long-lived objects for each read task (``rxhubs/spark/_worker_gc.py``).

pyspark's daemon collects garbage after every task of a reused worker; the source's read keeps the worker's
imports out of that collection, and unfreezes every ``SWEEP`` tasks so that late garbage is still collected.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator
from typing import Any

import pytest

from rxhubs.spark import _worker_gc

pytestmark = pytest.mark.spark


def _task(seen: list[int]) -> Iterator[int]:
    seen.append(gc.get_freeze_count())  # during the task
    yield 1


@pytest.fixture
def worker(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("SPARK_REUSE_WORKER", "1")  # what Spark sets in its workers (checked below)
    monkeypatch.delenv(_worker_gc.ENV, raising=False)
    monkeypatch.setattr(_worker_gc, "_tasks", 0)
    gc.unfreeze()
    try:
        yield
    finally:
        gc.unfreeze()


@pytest.mark.usefixtures("worker")
def test_a_read_task_runs_with_the_workers_objects_frozen_and_every_sweep_th_task_unfreezes_after_it() -> None:
    before = len(gc.get_objects())
    for task in range(1, 2 * _worker_gc.SWEEP + 1):
        seen: list[int] = []
        assert list(_worker_gc.freezing(_task(seen))) == [1]
        assert seen[0] >= before // 2  # the objects alive at the task's start are out of the collections
        after = gc.get_freeze_count()
        if task % _worker_gc.SWEEP == 0:
            assert after == 0, f"task {task}: still frozen after a sweeping task"
        else:
            assert after > 0, f"task {task}: unfrozen before its sweep"
    assert gc.collect() >= 0


@pytest.mark.usefixtures("worker")
def test_the_freeze_can_be_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(_worker_gc.ENV, "0")
    seen: list[int] = []
    assert list(_worker_gc.freezing(_task(seen))) == [1]
    assert seen == [0]


def test_outside_a_reused_worker_nothing_is_frozen(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPARK_REUSE_WORKER", raising=False)
    gc.unfreeze()
    seen: list[int] = []
    assert list(_worker_gc.freezing(_task(seen))) == [1]
    assert seen == [0]


def _worker_state(_: Any) -> Iterator[tuple[bool, int]]:
    from rxhubs.spark import _worker_gc as in_worker

    yield in_worker.active(), os.getpid()


def test_sparks_python_workers_are_reused_workers_where_the_freeze_is_on(spark: Any) -> None:
    states = spark.sparkContext.parallelize(range(2), 2).mapPartitions(_worker_state).collect()
    assert states and all(active for active, _ in states), states
    assert all(pid != os.getpid() for _, pid in states)
