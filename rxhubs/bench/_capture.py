"""Scenario ``capture``: a backfill from Event Hubs Capture files per core, against reading the same events live.

One emulator in its own process (``rxhubs emulator``) serves two hubs of one partition: ``history`` keeps only
its newest event (``--retain-events history=1``) and Capture writes everything to a folder; ``live`` keeps all.
The same N events of 1 KB go to both (full: 200,000; ``--quick``: 50,000; ``--smoke``: 2,000). Then, in this
process: a :class:`~rxhubs.sources.BackfillHub` receiver reads ``history`` from the start (all but the last
event come from the Capture files), and a plain receiver reads ``live`` from the start (the native receive
path), each pulling ``receive_batch(1000)`` until it has them. Events per CPU-second of this process (the
reader's cost per core; the emulator's CPU is its own) and per wall second are reported, with the load
average. Target: the backfill reads at least as many events per core as the live read (it costs no throughput
units on the service, and should not cost more CPU here).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rxhubs.bench._report import figure, sized

BODY = b"x" * 1024


async def _send(connection_strings: list[str], count: int) -> None:
    from rxhubs import EventHub

    for conn in connection_strings:
        async with EventHub.from_connection_string(conn) as hub:
            for lo in range(0, count, 500):
                await hub.send([BODY] * min(500, count - lo), partition_id="0")


async def _captured(folder: Path, count: int, timeout: float = 600.0) -> None:
    from rxhubs.sources import Capture

    capture, deadline = Capture(folder), time.monotonic() + timeout
    while sum([len(e) async for e in capture.read("history", "0")]) < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"Capture did not write {count} events in {timeout:g} s")
        await asyncio.sleep(0.5)


async def _read(hub: Any, count: int) -> tuple[float, float]:
    """Read ``count`` events of partition 0 from the start; (wall seconds, CPU seconds of this process)."""
    from rxhubs import Position

    got = 0
    async with hub.receiver("0", start=Position.earliest(), prefetch=1000) as receiver:
        wall, cpu = time.perf_counter(), time.process_time()
        while got < count:
            got += len(await receiver.receive_batch(min(1000, count - got), max_wait=10.0))
        return time.perf_counter() - wall, time.process_time() - cpu


async def _measure(conns: dict[str, str], folder: Path, count: int) -> dict[str, tuple[float, float]]:
    from rxhubs import EventHub
    from rxhubs.sources import BackfillHub, Capture

    await _send([conns["history"], conns["live"]], count)
    await _captured(folder, count)
    results = {}
    async with EventHub.from_connection_string(conns["history"]) as history:
        results["backfill"] = await _read(BackfillHub(history, Capture(folder)), count - 1)  # the last: live
    async with EventHub.from_connection_string(conns["live"]) as live:
        results["live"] = await _read(live, count - 1)
    return results


def run(args: Any = None) -> list[dict[str, Any]]:
    count = sized(args, 200_000, 50_000, 2_000)
    with tempfile.TemporaryDirectory(prefix="rxhubs-bench-capture-") as tmp:
        folder = Path(tmp) / "capture"
        proc = subprocess.Popen(
            [sys.executable, "-m", "rxhubs.cli", "emulator", "--port", "0", "--hub", "history:1", "--hub", "live:1",
             "--retain-events", "history=1", "--capture", str(folder), "--capture-window", "1"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            assert proc.stdout is not None
            lines = [proc.stdout.readline().strip() for _ in range(2)]
            conns = {line.rsplit("EntityPath=", 1)[1].split(";")[0]: line for line in lines}
            results = asyncio.run(_measure(conns, folder, count))
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    load = round(os.getloadavg()[0], 2)
    (b_wall, b_cpu), (l_wall, l_cpu) = results["backfill"], results["live"]
    n = count - 1
    per_core_b, per_core_l = n / max(b_cpu, 1e-9), n / max(l_cpu, 1e-9)
    return [
        figure("capture", "backfill_events_per_core_s", "events/s", round(per_core_b), round(per_core_l),
               "rxhubs reading the same events live (native path)", ">= 1.0x", events=n, load_average=load),
        figure("capture", "backfill_events_per_wall_s", "events/s", round(n / b_wall), round(n / l_wall),
               "rxhubs reading the same events live (native path)", None, events=n, load_average=load),
    ]
