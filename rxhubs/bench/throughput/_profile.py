"""Per-event CPU breakdown of one throughput trial, rxhubs against the raw SDK (docs/performance.md's table).

``python -m rxhubs.bench.throughput._profile`` (needs ``pip install py-spy``) starts an emulator in its own process and
Azurite, fills 4 partitions with 1 KB events, then runs the throughput scenario's tuned trial for each side
in a fresh process under py-spy (sampling, 250 Hz, idle time left out), and prints per side the microseconds
of CPU per event by where the sampled frame was: the AMQP stack (``azure.eventhub._pyamqp``), the rest of
the SDK (``EventData``, its receive loop), the blob store and HTTP (``azure.storage``, ``aiohttp``), reactivex,
rxhubs, asyncio, and everything else.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

from rxhubs.bench._procs import emulator_process
from rxhubs.bench.throughput._scenario import HUB, PARTITIONS, _prefill

RATE = 250
# py-spy names frames "function (package/module.py:line)", the path cut below site-packages/azure
GROUPS = (
    ("amqp", "_pyamqp/"),
    ("sdk", "eventhub/"),
    ("storage+http", "storage/"),
    ("storage+http", "aiohttp/"),
    ("reactivex", "reactivex/"),
    ("rxhubs", "rxhubs/"),
    ("asyncio", "asyncio/"),
)


def _group(frame: str) -> str:
    for name, marker in GROUPS:
        if marker in frame:
            return name
    return "other"


def breakdown(collapsed: str, events: int) -> dict[str, float]:
    """Microseconds of CPU per event by the group of each sample's innermost frame."""
    totals: dict[str, int] = {}
    for line in collapsed.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        leaf = stack.split(";")[-1]
        group = _group(leaf)
        totals[group] = totals.get(group, 0) + int(count)
    per_event = {k: round(v / RATE / events * 1e6, 2) for k, v in sorted(totals.items())}
    per_event["total"] = round(sum(totals.values()) / RATE / events * 1e6, 2)
    return per_event


def main() -> None:
    from rxhubs.testing._azurite import Azurite

    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(spy).exists():
        raise SystemExit("py-spy is needed: pip install py-spy")
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=100_000)
    args = parser.parse_args()
    with emulator_process({HUB: PARTITIONS}) as conns, Azurite() as azurite, tempfile.TemporaryDirectory() as tmp:
        _prefill(conns[HUB], args.events)
        env = {**os.environ, "RXHUBS_BENCH_EVENTHUB": conns[HUB], "RXHUBS_BENCH_STORAGE": azurite.connection_string}
        for impl in ("sdk", "rxhubs"):
            out = Path(tmp) / f"{impl}.txt"
            result = subprocess.run(
                [spy, "record", "--rate", str(RATE), "--format", "raw", "--output", str(out), "--",
                 sys.executable, "-m", "rxhubs.bench.throughput._worker", "--impl", impl, "--profile", "tuned",
                 "--events", str(args.events), "--container", f"profile-{uuid.uuid4().hex[:12]}"],
                env=env, capture_output=True, text=True, timeout=600,
            )
            lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
            if result.returncode != 0 or not lines:
                raise SystemExit(f"{impl} trial failed: {result.stderr[-2000:]}")
            trial = json.loads(lines[-1])
            if os.environ.get("RXHUBS_PROFILE_TOP"):
                leaves: dict[str, int] = {}
                for line in out.read_text().splitlines():
                    stack, _, count = line.rpartition(" ")
                    if count.isdigit():
                        leaves[stack.split(";")[-1]] = leaves.get(stack.split(";")[-1], 0) + int(count)
                for leaf, n in sorted(leaves.items(), key=lambda kv: -kv[1])[:12]:
                    print(f"   {n:6d} {leaf}", file=sys.stderr)
            print(json.dumps({"impl": impl, "events_per_s": round(trial["events_per_s"]),
                              "us_per_event": breakdown(out.read_text(), trial["events"])}), flush=True)


if __name__ == "__main__":
    main()
