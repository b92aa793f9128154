"""The real command line: help, version, and one-line errors with exit code 2."""

from __future__ import annotations

import subprocess
import sys

import pytest


def rxhubs_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rxhubs.cli", *args], capture_output=True, text=True, timeout=timeout
    )


def test_version_and_help() -> None:
    assert rxhubs_cli("--version").stdout.startswith("rxhubs ")
    help_text = rxhubs_cli("--help").stdout
    for command in ("bench",):
        assert command in help_text


def test_no_command_prints_help_and_exits_2() -> None:
    result = rxhubs_cli()
    assert result.returncode == 2
    assert "usage:" in result.stdout


@pytest.mark.parametrize(
    "args",
    [
        ("bench", "no-such-scenario"),
        ("no-such-command",),
        ("bench",),
    ],
)
def test_bad_input_is_one_line_exit_2_no_traceback(args: tuple[str, ...]) -> None:
    result = rxhubs_cli(*args)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "error" in lines[0]
    assert "Traceback" not in result.stderr


def test_bench_overhead_prints_json_lines_with_the_promised_keys() -> None:
    import json

    result = rxhubs_cli("bench", "overhead", "--json", "--quick", timeout=300)
    assert result.returncode == 0, result.stderr
    figures = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
    assert figures
    keys = {"scenario", "metric", "unit", "rxhubs", "baseline", "baseline_name", "ratio", "target", "met"}
    for figure in figures:
        assert keys <= set(figure)
        assert figure["scenario"] == "overhead" and figure["rxhubs"] > 0 and figure["baseline"] > 0
