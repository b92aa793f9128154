"""``rxhubs bench scale --real --smoke``: real consumer processes join and leave a hub on the emulator, with the
fenced blob store on Azurite; every change converges and nothing is lost.

Speed is not asserted here (the figures are the benchmark's, on a machine that may be loaded): only that each
change converged at all, that every event sent was processed, and that the figures are there. Events processed
by two owners are a figure, not an assertion: on a starved machine a store call past its timeout lets an
ownership expire, and a partition taken over on expiry is read twice by design (the old owner is fenced).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.azurite
@pytest.mark.timeout(600)
def test_real_processes_join_and_leave_without_loss_or_double_owners(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "rxhubs.cli", "bench", "scale", "--real", "--smoke", "--json"],
        cwd=tmp_path, capture_output=True, text=True, timeout=580,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    figures = {f["metric"]: f for f in map(json.loads, (line for line in result.stdout.splitlines()
                                                          if line.startswith("{")))}
    assert set(figures) == {"converge_1", "converge_4", "converge_2", "store_requests_per_interval",
                            "memory_per_partition", "cpu_per_partition", "owned_twice", "events_lost"}
    for change in ("converge_1", "converge_4", "converge_2"):
        assert figures[change]["rxhubs"] >= 0, f"{change}: the group never settled"  # -1: not within 30 intervals
        # from the change to the last write that moved a partition, which a listing saw converged after it
        assert 0 <= figures[change]["rxhubs"] <= figures[change]["seen_converged"], figures[change]
        churn = figures[change]["moved_after_seen"]  # moves after it settled, before the next change (reported)
        assert isinstance(churn, int) and churn >= 0 and (churn == 0 or not figures[change]["met"]), figures[change]
    lost = figures["events_lost"]
    assert lost["rxhubs"] == 0 and lost["processed"] >= lost["sent"] > 0, lost
    assert figures["owned_twice"]["rxhubs"] >= 0 and "changes" in figures["owned_twice"]
    requests = figures["store_requests_per_interval"]
    assert requests["rxhubs"] > 0 and len(requests["steady"]) == 2 and requests["official_steady"] > 0, requests
    assert figures["cpu_per_partition"]["rxhubs"] > 0
    assert all(f["partitions"] == 32 and f["consumers"] == "1 -> 4 -> 2" for f in figures.values())
