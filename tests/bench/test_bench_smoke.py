"""Every ``rxhubs bench`` scenario runs in CI: ``rxhubs bench NAME --smoke --json``, as a user would run it.

The list is the command's own registry (``rxhubs.cli._bench.SCENARIOS``), so a scenario registered there is run
here with no other change, and a scenario module left out of it fails :func:`test_every_scenario_module_is_registered`.
``--smoke`` runs each at the least size that still goes through every step (seconds each): its wall-clock figures
are not measurements and are not checked, only their shape. Scenarios that run in virtual time (the module sets
``VIRTUAL_TIME = True``) are deterministic, so there every figure that has a target must have met it.
"""

from __future__ import annotations

import importlib
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rxhubs.bench._report import KEYS
from rxhubs.cli._bench import SCENARIOS, describe

ROOT = Path(__file__).resolve().parents[2]
# what a scenario needs beyond Python, so `-m "not spark"` and the like select as elsewhere (nothing is skipped)
NEEDS = {
    "spark": [pytest.mark.spark],
    "spark-source": [pytest.mark.spark],
    "spark-write": [pytest.mark.spark],
    "stores": [pytest.mark.azurite],
    "handover": [pytest.mark.azurite],
    "throughput": [pytest.mark.azurite],
}


def test_every_scenario_module_is_registered() -> None:
    """A module of rxhubs/bench or rxhubs/chaos with a top-level ``run(args)`` is a scenario: it must be registered."""
    modules = {
        ".".join(path.relative_to(ROOT).with_suffix("").parts)
        for room in ("bench", "chaos")
        for path in (ROOT / "rxhubs" / room).rglob("_*.py")
        if re.search(r"^def run\(", path.read_text(encoding="utf-8"), re.MULTILINE)
    }
    assert modules, "no scenario module found"
    missing = modules - set(SCENARIOS.values())
    assert not missing, f"scenario modules not in rxhubs.cli._bench.SCENARIOS: {sorted(missing)}"
    # CI runs each with --smoke: a scenario must size itself for it (bench._report.sized), or it runs full size
    unsized = [m for m in SCENARIOS.values() if "sized(" not in (ROOT / (m.replace(".", "/") + ".py")).read_text()]
    assert not unsized, f"scenarios that ignore --smoke (use rxhubs.bench._report.sized): {unsized}"


def test_help_lists_every_scenario_with_its_description() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "rxhubs.cli", "bench", "--help"],
        capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    section = result.stdout.split("scenarios:\n", 1)[1].split("\n\n", 1)[0]
    listed = dict(line.strip().split(None, 1) for line in section.splitlines())
    assert list(listed) == list(SCENARIOS)
    for name, text in listed.items():
        assert text == describe(name) and len(text) > 20, (name, text)
    assert "see below" not in result.stdout


@pytest.mark.slow
@pytest.mark.timeout(330)  # a Spark scenario starts a JVM and Python workers: slow on a busy machine
# chaos --smoke (seed 32, 60 s) is tests/bench/test_chaos_run.py, which also checks what the run felt
@pytest.mark.parametrize(
    "scenario", [pytest.param(name, marks=NEEDS.get(name, [])) for name in SCENARIOS if name != "chaos"]
)
def test_scenario_runs_in_its_smoke_form_and_prints_figures(scenario: str, tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "rxhubs.cli", "bench", scenario, "--smoke", "--json"],
        cwd=tmp_path,  # anything a scenario writes by mistake lands here
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    assert lines, f"no figures; stderr: {result.stderr[-2000:]}"
    figures = [json.loads(line) for line in lines]  # --json: every line of stdout is one JSON object
    for f in figures:
        assert isinstance(f, dict) and set(KEYS) <= set(f), f
        assert isinstance(f["scenario"], str) and isinstance(f["metric"], str) and isinstance(f["unit"], str), f
        assert f["rxhubs"] is None or _number(f["rxhubs"]), f  # None: not reached within the run (silent)
        assert f["baseline"] is None or _number(f["baseline"]), f
        assert f["baseline_name"] is None or isinstance(f["baseline_name"], str), f
        assert f["ratio"] is None or _number(f["ratio"]), f
        assert f["target"] is None or isinstance(f["target"], str), f
        assert f["met"] in (True, False, None), f
    assert len({(f["scenario"], f["metric"]) for f in figures}) == len(figures), "a figure printed twice"
    if scenario == "spark-source" and os.path.isdir("/proc"):  # Spark's CPU found and counted (its JVM's tree)
        cpu = {f["metric"]: f for f in figures if f["unit"] == "events per CPU-second"}
        assert set(cpu) == {"events_per_cpu_s_stream_noop", "events_per_cpu_s_batch_read"}, figures
        assert all(f["cpu_us_per_event"] > 0 and f["baseline_cpu_us_per_event"] > 0 for f in cpu.values()), cpu
    if getattr(importlib.import_module(SCENARIOS[scenario]), "VIRTUAL_TIME", False):
        targeted = [f for f in figures if f["target"] is not None]
        assert targeted, "a virtual-time scenario with no target to check"
        assert [f for f in targeted if f["met"] is not True] == []


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and not math.isnan(value)
