"""The stores benchmark runs end to end and reports well-formed figures (the figures themselves are not judged)."""

from __future__ import annotations

import types

import pytest

from rxhubs.bench._stores import run
from rxhubs.testing._azurite import Azurite

pytestmark = pytest.mark.azurite


def test_the_stores_benchmark_reports_both_workloads(azurite: Azurite) -> None:  # azurite: fail early if missing
    figures = run(types.SimpleNamespace(quick=True))

    assert [f["metric"] for f in figures] == ["checkpoint_writes_sequential", "checkpoint_writes_partitions8"]
    for f in figures:
        assert set(f) >= {"scenario", "metric", "unit", "rxhubs", "baseline", "baseline_name", "ratio", "target", "met"}
        assert f["scenario"] == "stores" and f["unit"] == "writes/s" and f["target"] == ">= 1.0x"
        assert f["rxhubs"] > 0 and f["baseline"] > 0
        assert f["ratio"] == round(f["rxhubs"] / f["baseline"], 4)
        assert f["met"] is (f["ratio"] >= 1.0)
