"""The README's first command, shortened: the demo runs end to end and proves nothing was lost."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.timeout(240)
def test_demo_runs_end_to_end_and_loses_nothing(tmp_path: Path) -> None:
    out = tmp_path / "demo-out"
    result = subprocess.run(
        [sys.executable, "-m", "rxhubs.cli", "demo", "--duration", "12", "--no-spark", "--partitions", "4",
         "--consumers", "3", "--rate", "400", "--interval", "1", "--expiry", "3", "--plain", "--out", str(out)],
        capture_output=True, text=True, timeout=230,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "RESULT: no event lost" in result.stdout
    sent = int(re.search(r"events sent: ([\d,]+)", result.stdout).group(1).replace(",", ""))  # type: ignore[union-attr]
    assert sent > 1000
    for step in ("joins", "stops gracefully", "every partition checkpointed"):
        assert step in result.stdout
    assert (out / "checkpoints.sqlite").exists() and list((out / "jsonl").glob("*.jsonl"))


def test_demo_refuses_a_folder_it_did_not_make(tmp_path: Path) -> None:
    (tmp_path / "precious.txt").write_text("keep me")
    result = subprocess.run(
        [sys.executable, "-m", "rxhubs.cli", "demo", "--no-spark", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 2
    assert "not empty" in result.stderr and "Traceback" not in result.stderr
    assert (tmp_path / "precious.txt").read_text() == "keep me"
