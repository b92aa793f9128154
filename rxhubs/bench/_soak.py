"""Scenario ``soak``: memory under a sustained load; RSS growth after warm-up (target < 10%).

The emulator runs in its own process; a producer in this process sends a steady stream to every partition.
Two consumer processes read the same stream side by side, each through its own consumer group:

* rxhubs: ``consume`` + ``hops.checkpoint`` with a SQLite checkpoint store;
* the baseline: the raw azure-eventhub ``EventHubConsumerClient.receive_batch`` (no checkpoint store).

Each consumer's RSS is sampled every second (psutil). The first 20% of the run is warm-up; growth is the
median RSS of the last 10% of the run against the median of the 10% right after warm-up, in percent.

Known limit (measured 2026-11-22, azure-eventhub 5.15.1): both sides grow linearly, about 60 bytes per
event received, because the SDK's AMQP receiver (``azure.eventhub._pyamqp`` ``ReceiverLink``) adds every
delivery tag to ``_received_delivery_tags`` and removes it only when it sends a disposition, which an Event
Hubs receiver never does. With that set neutralised the same 100 s run grows 0.0% instead of 28.7%.

Run a worker alone: ``python -m rxhubs.bench._soak --worker rxhubs|sdk --seconds S`` with the hub's
connection string in ``RXHUBS_BENCH_EVENTHUB`` (and ``RXHUBS_BENCH_SQLITE`` for rxhubs); it prints
``ready``, then one JSON object (events, seconds) when the time is up.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from rxhubs.bench._procs import emulator_process
from rxhubs.bench._report import figure, sized
from rxhubs.errors import ConfigurationError

HUB = "soak"
PARTITIONS = 4
SDK_GROUP = "soak-sdk"
RATE = 2000  # events/s, all partitions together
BODY = b"x" * 512
WARMUP = 0.2
DEFAULT_DURATION = 600.0
QUICK_DURATION = 60.0
SMOKE_DURATION = 12.0  # the least that gives growth_percent its 10 samples
BASELINE = "azure-eventhub EventHubConsumerClient.receive_batch (raw SDK)"


# -- the consumers (each in its own process) --------------------------------------------------------------


async def _rxhubs_worker(seconds: float) -> dict[str, Any]:
    from reactivex import operators as ops

    import rxhubs
    from rxhubs import operators as hops
    from rxhubs._shutdown import Shutdown
    from rxhubs.stores import SqliteCheckpointStore

    hub = rxhubs.EventHub.from_connection_string(os.environ["RXHUBS_BENCH_EVENTHUB"])
    store = SqliteCheckpointStore(os.environ["RXHUBS_BENCH_SQLITE"])
    count = [0]

    def handle(batch: rxhubs.EventBatch) -> None:
        count[0] += sum(len(e.body) > 0 for e in batch.events)

    stop = Shutdown()
    pipeline: Any = rxhubs.consume(hub, "$Default", store).pipe(
        ops.do_action(handle), hops.checkpoint(store, max_interval=5.0)
    )
    started = time.perf_counter()
    asyncio.get_running_loop().call_later(seconds, stop.request)
    print("ready", flush=True)
    await rxhubs.arun(pipeline, shutdown=stop, signals=())
    elapsed = time.perf_counter() - started
    await hub.close()
    await store.close()
    return {"events": count[0], "seconds": elapsed}


async def _sdk_worker(seconds: float) -> dict[str, Any]:
    from azure.eventhub.aio import EventHubConsumerClient

    client = EventHubConsumerClient.from_connection_string(
        os.environ["RXHUBS_BENCH_EVENTHUB"], consumer_group=SDK_GROUP
    )
    count = [0]

    async def on_batch(context: Any, events: list[Any]) -> None:
        count[0] += sum(len(b"".join(e.body)) > 0 for e in events)

    started = time.perf_counter()
    task = asyncio.create_task(client.receive_batch(on_batch, starting_position="-1"))
    print("ready", flush=True)
    await asyncio.sleep(seconds)
    await client.close()
    task.cancel()
    elapsed = time.perf_counter() - started
    return {"events": count[0], "seconds": elapsed}


def _worker_main(argv: list[str]) -> None:
    import logging

    logging.basicConfig(level=logging.ERROR)
    parser = argparse.ArgumentParser()
    parser.add_argument("--worker", choices=["rxhubs", "sdk"], required=True)
    parser.add_argument("--seconds", type=float, required=True)
    args = parser.parse_args(argv)
    work = _rxhubs_worker if args.worker == "rxhubs" else _sdk_worker
    print(json.dumps(asyncio.run(work(args.seconds))), flush=True)


# -- the load and the sampling (this process) -------------------------------------------------------------


class _Producer(threading.Thread):
    """Sends ``RATE`` events/s, spread over the partitions, in 10 rounds a second."""

    def __init__(self, connection_string: str) -> None:
        super().__init__(daemon=True)
        self.connection_string = connection_string
        self.stop = threading.Event()
        self.sent = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        from azure.eventhub import EventData, EventHubProducerClient

        per_round = max(1, RATE // 10 // PARTITIONS)
        try:
            with EventHubProducerClient.from_connection_string(self.connection_string) as producer:
                next_round = time.monotonic()
                while not self.stop.is_set():
                    for pid in range(PARTITIONS):
                        batch = producer.create_batch(partition_id=str(pid))
                        for _ in range(per_round):
                            batch.add(EventData(BODY))
                        producer.send_batch(batch)
                        self.sent += per_round
                    next_round += 0.1
                    self.stop.wait(max(0.0, next_round - time.monotonic()))
        except BaseException as exc:  # reported by run()
            self.error = exc


def _start_worker(kind: str, seconds: float, env: dict[str, str]) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "rxhubs.bench._soak", "--worker", kind, "--seconds", str(seconds)],
        env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    assert proc.stdout is not None
    if proc.stdout.readline().strip() != "ready":
        proc.kill()
        _, err = proc.communicate()
        raise RuntimeError(f"soak worker {kind} did not start: {err[-2000:]}")
    return proc


def _finish(proc: subprocess.Popen[str], kind: str, timeout: float) -> dict[str, Any]:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    lines = [line for line in out.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"soak worker {kind} failed ({proc.returncode}): {err[-2000:]}")
    parsed: dict[str, Any] = json.loads(lines[-1])
    return parsed


def growth_percent(samples: list[float], warmup: float = WARMUP) -> float:
    """RSS growth after warm-up, in percent: median of the last 10% vs median of the 10% after warm-up.

    Example:
        >>> growth_percent([50.0] * 20 + [100.0] * 10 + [100.0] * 60 + [110.0] * 10)
        10.0
    """
    n = len(samples)
    if n < 10:
        raise ValueError("too few RSS samples for a growth figure")
    start = int(n * warmup)
    window = max(1, n // 10)
    base = statistics.median(samples[start : start + window])
    end = statistics.median(samples[-window:])
    return round(100.0 * (end - base) / base, 2)


def run(args: Any = None) -> list[dict[str, Any]]:
    """Run the soak for ``args.duration`` seconds (default 600, ``--quick`` 60, ``--smoke`` 12); return its figures."""
    import psutil

    duration = getattr(args, "duration", None)
    if duration is None:
        duration = sized(args, DEFAULT_DURATION, QUICK_DURATION, SMOKE_DURATION)
    duration = float(duration)
    if not duration > 0:
        raise ConfigurationError(f"--duration must be > 0, got {duration:g}")
    samples: dict[str, list[float]] = {"rxhubs": [], "sdk": []}
    with tempfile.TemporaryDirectory(prefix="rxhubs-soak-") as tmp, emulator_process(
        {HUB: PARTITIONS}, consumer_groups=[SDK_GROUP]
    ) as conns:
        env = {"RXHUBS_BENCH_EVENTHUB": conns[HUB], "RXHUBS_BENCH_SQLITE": str(Path(tmp) / "soak.sqlite")}
        producer = _Producer(conns[HUB])
        procs: dict[str, subprocess.Popen[str]] = {}
        try:
            for kind in ("rxhubs", "sdk"):
                procs[kind] = _start_worker(kind, duration, env)
            producer.start()
            watched = {kind: psutil.Process(proc.pid) for kind, proc in procs.items()}
            started = time.monotonic()
            tick = started
            while time.monotonic() - started < duration and all(p.poll() is None for p in procs.values()):
                for kind, process in watched.items():
                    try:
                        samples[kind].append(process.memory_info().rss / 2**20)
                    except psutil.Error:
                        pass
                tick += 1.0
                time.sleep(max(0.0, tick - time.monotonic()))
            results = {kind: _finish(proc, kind, timeout=60.0) for kind, proc in procs.items()}
        finally:
            producer.stop.set()
            producer.join(timeout=30)
            for proc in procs.values():
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        if producer.error is not None:
            raise RuntimeError(f"the soak producer failed: {producer.error!r}")
    ours, theirs = growth_percent(samples["rxhubs"]), growth_percent(samples["sdk"])
    common: dict[str, Any] = {
        "duration_s": duration,
        "rate_events_per_s": RATE,
        "partitions": PARTITIONS,
        "events_sent": producer.sent,
        "rss_mb_rxhubs": [round(samples["rxhubs"][int(len(samples["rxhubs"]) * WARMUP)], 1),
                          round(samples["rxhubs"][-1], 1)],
        "rss_mb_baseline": [round(samples["sdk"][int(len(samples["sdk"]) * WARMUP)], 1),
                            round(samples["sdk"][-1], 1)],
    }
    rates = {kind: r["events"] / r["seconds"] if r["seconds"] else 0.0 for kind, r in results.items()}
    return [
        figure(
            "soak", "rss_growth_after_warmup", "%", ours, theirs, BASELINE, "< 10%",
            higher_is_better=False, met=ours < 10.0, **common,
        ),
        figure(
            "soak", "events_per_s", "events/s", round(rates["rxhubs"]), round(rates["sdk"]), BASELINE, None,
            events_rxhubs=results["rxhubs"]["events"], events_baseline=results["sdk"]["events"], **common,
        ),
    ]


if __name__ == "__main__":
    _worker_main(sys.argv[1:])
