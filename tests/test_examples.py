"""Every script in examples/ runs to success (each starts the emulator or in-memory parts it needs), and
leaves nothing open: ResourceWarnings are shown (``-W always::ResourceWarning``, for the script's own process,
not for Spark's Python workers) and none may appear, nor asyncio's "Unclosed client session"."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = sorted((Path(__file__).parent.parent / "examples").glob("*.py"))


def test_there_are_examples() -> None:
    assert len(EXAMPLES) >= 1


def _marks(script: Path) -> list[pytest.MarkDecorator]:
    """Each example is a process of its own (seconds); those that use Spark start a JVM too."""
    uses_spark = "rxhubs.spark" in script.read_text(encoding="utf-8") or "pyspark" in script.read_text(encoding="utf-8")
    return [pytest.mark.slow, pytest.mark.spark] if uses_spark else [pytest.mark.slow]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("script", [pytest.param(p, marks=_marks(p), id=p.stem) for p in EXAMPLES])
def test_example_runs(script: Path, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "EVENTHUB_CONNECTION_STRING"}
    env["RXHUBS_EXAMPLE_OUT"] = str(tmp_path)
    result = subprocess.run(
        [sys.executable, "-W", "always::ResourceWarning", str(script)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=280,
    )
    assert result.returncode == 0, f"{script.name} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    assert "ResourceWarning" not in result.stderr and "unclosed" not in result.stderr.lower(), result.stderr[-3000:]
