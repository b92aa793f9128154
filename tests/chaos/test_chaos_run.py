"""``rxhubs bench chaos`` end to end, short: real processes, real proxies, real emulator faults; it must PASS.

Seed 6 over 60 s plans a geo-replication promotion (every connection closed, offsets of a new segment), a hub
path cut mid-frame for one consumer and a forced close of every connection
(``rxhubs.chaos._plan.make_schedule(6, 60)``); the eight-minute runs of docs/performance.md inject every fault
type.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rxhubs.chaos._plan import make_schedule
from rxhubs.chaos._scenario import SMOKE_SEED

ROOT = Path(__file__).resolve().parents[2]
SEED = SMOKE_SEED  # what --smoke runs, over 60 s


@pytest.mark.slow
@pytest.mark.azurite
@pytest.mark.timeout(420)  # the run is bounded by the subprocess's 400 s
def test_a_short_chaos_run_injects_its_faults_and_passes(tmp_path: Path) -> None:
    planned = {f.type for f in make_schedule(SEED, 60)}
    assert planned == {"promote", "hub_cut", "force_close"}
    (tmp_path / "work").mkdir()
    (tmp_path / "tmp").mkdir()
    result = subprocess.run(  # no --out: the ledgers go to a temporary folder, never the current one
        [sys.executable, "-m", "rxhubs.cli", "bench", "chaos", "--smoke", "--json"],
        cwd=tmp_path / "work", capture_output=True, text=True, timeout=400,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "TMPDIR": str(tmp_path / "tmp")},
    )
    assert list((tmp_path / "work").iterdir()) == []
    [out] = (tmp_path / "tmp").glob(f"rxhubs-chaos-{SEED}-*")
    assert f"go to {out}" in result.stderr
    report = json.loads((out / "chaos_report.json").read_text())
    assert result.returncode == 0, (report["failures"], result.stderr[-3000:])
    assert result.stdout.splitlines()[0].startswith(f"PASS seed {SEED}")
    figures = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert {f["metric"] for f in figures} >= {"events_lost", "duplicates_unexplained", "verdict"}
    assert all(f["scenario"] == "chaos" and f["met"] is not False for f in figures)
    assert report["verdict"] == "PASS" and report["lost"] == 0 and report["stored"] > 3000
    assert report["faults_by_type"] == {"promote": 1, "hub_cut": 1, "force_close": 1}
    # each fault was felt: the proxy cut connections, the emulator detached links with the fault's condition
    run = json.loads((out / "run.json").read_text())
    assert run["readers_attached"], "the schedule began before a consumer read every partition"
    cut = next(f for f in run["faults"] if f["type"] == "hub_cut")
    assert run["proxy_stats"][f"hub-{cut['target']}"]["connections_cut"] > 0
    conditions = {json.loads(line)["cond"] for line in (out / "links.jsonl").read_text().splitlines()}
    assert "amqp:connection:forced" in conditions
    promoted = next(f for f in run["faults"] if f["type"] == "promote")
    assert "'segment': 1" in str(promoted["result"]), promoted  # the namespace moved to a new segment
    assert (out / "chaos_lag.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads((out / "schedule.json").read_text())["seed"] == SEED
