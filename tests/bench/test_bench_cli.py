"""``rxhubs bench`` as a user runs it: JSON lines with the documented keys, and the plots of docs/performance.md.

Benchmarks measure; these tests only check that the scenarios run end to end and report what they claim to
(the simulated rebalance is deterministic, so its intervals are asserted; wall-clock figures never are).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
KEYS = {"scenario", "metric", "unit", "rxhubs", "baseline", "baseline_name", "ratio", "target", "met"}


def bench(*args: str, cwd: Path) -> list[dict[str, Any]]:
    result = subprocess.run(
        [sys.executable, "-m", "rxhubs.cli", "bench", *args, "--json"],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    figures = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert figures and all(set(f) >= KEYS for f in figures)
    return figures


@pytest.mark.slow
def test_rebalance_scenario_reports_convergence_against_the_official_rules_and_draws_the_plots(
    tmp_path: Path,
) -> None:
    figures = bench("rebalance", "--smoke", "--plot", str(tmp_path / "img"), cwd=tmp_path)
    join = next(f for f in figures if f["scenario"] == "rebalance 32 partitions 1 -> 2" and f["unit"] == "intervals")
    assert join["rxhubs"] <= 2.0 and join["met"] is True
    assert join["baseline"] > 8.0  # the official rules take one partition per interval: 16 moves
    assert join["ratio"] == round(join["baseline"] / join["rxhubs"], 4)
    png = (tmp_path / "img" / "rebalance_timeline.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.azurite
def test_stores_scenario_reports_both_workloads(tmp_path: Path) -> None:
    figures = bench("stores", "--smoke", cwd=tmp_path)
    assert [f["metric"] for f in figures] == ["checkpoint_writes_sequential", "checkpoint_writes_partitions8"]
    for f in figures:
        assert f["scenario"] == "stores" and f["unit"] == "writes/s" and f["target"] == ">= 1.0x"
        assert f["rxhubs"] > 0 and f["baseline"] > 0
        assert f["ratio"] == round(f["rxhubs"] / f["baseline"], 4)
        assert f["met"] is (f["ratio"] >= 1.0)
