"""The demo's conductor: emulator, producer, consumer processes, live view, and the final proof."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rxhubs.demo._view import DemoSummary, Snapshot, render_live, render_summary
from rxhubs.errors import ConfigurationError

MARKER = ".rxhubs-demo"
HUB = "telemetry"
CONSUMER_GROUP = "$Default"
OWNER_PREFIX = "demo"  # worker i of the consumer pool is demo-w{i}


@dataclass
class DemoOptions:
    """What ``rxhubs demo`` runs.

    Attributes:
        duration: Seconds of production; the demo then drains and verifies.
        partitions: Partitions of the hub.
        consumers: Consumer processes in all (at least 1); with 2 or more, the last joins at a third of
            the run and the first stops gracefully at two thirds.
        rate: Events per second produced.
        out: Output folder (Parquet or JSON lines, the SQLite store, logs).
        spark: Write through Spark into Parquet (else JSON lines).
        delta: Write exactly once into the Delta table at this path instead (``rxhubs.tables.DeltaSink``,
            no Spark needed): duplicates are then 0 even across handovers.
        interval: Load-balancing interval, seconds.
        expiry: Ownership expiry, seconds.
        live: Redraw a live view (default: when stdout is a terminal); else print a line every few seconds.
    """

    duration: float = 60.0
    partitions: int = 8
    consumers: int = 3
    rate: int = 1000
    out: Path = field(default_factory=lambda: Path("demo-out"))
    spark: bool = True
    delta: Path | None = None
    interval: float = 2.0
    expiry: float = 6.0
    live: bool | None = None

    def check(self) -> None:
        """Raise :class:`ConfigurationError` for impossible options."""
        if self.duration <= 0:
            raise ConfigurationError("--duration must be > 0")
        if not 1 <= self.partitions <= 1024:
            raise ConfigurationError("--partitions must be between 1 and 1024")
        if not 1 <= self.consumers <= 16:
            raise ConfigurationError("--consumers must be between 1 and 16")
        if not 1 <= self.rate <= 100_000:
            raise ConfigurationError("--rate must be between 1 and 100000 events/s")


def prepare_out(out: Path) -> None:
    """Create or reuse the output folder; refuse a non-empty folder the demo did not make."""
    try:
        if out.exists() and any(out.iterdir()) and not (out / MARKER).exists():
            raise ConfigurationError(f"{out} is not empty and was not made by the demo: choose another --out")
        if out.exists():
            import shutil

            shutil.rmtree(out)
        out.mkdir(parents=True)
        (out / MARKER).write_text("made by rxhubs demo; deleted by the next run\n")
        (out / "logs").mkdir()
    except OSError as exc:
        raise ConfigurationError(f"cannot use {out} as the output folder: {exc.strerror or exc}") from exc


class Worker:
    """One worker of the consumer pool, seen from the orchestrator (its pid comes from its ready file)."""

    def __init__(self, index: int, options: DemoOptions, *, late: bool = False) -> None:
        self.owner_id = f"{OWNER_PREFIX}-w{index}"
        self.options = options
        self.late = late

    def go(self) -> None:
        """Let the late worker, warmed up and waiting, start consuming."""
        go = self.options.out / "go" / self.owner_id
        go.parent.mkdir(exist_ok=True)
        go.write_text("go\n")

    @property
    def ready(self) -> bool:
        """True once the worker built its pipeline (its Spark session is up) and is about to consume."""
        return self.pid is not None

    @property
    def pid(self) -> int | None:
        try:
            return int((self.options.out / "ready" / self.owner_id).read_text())
        except (OSError, ValueError):
            return None

    @property
    def running(self) -> bool:
        pid = self.pid
        if pid is None:
            return False
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True

    async def stop(self, timeout: float = 90.0) -> None:
        """SIGTERM this worker only (graceful: flush, checkpoint, release); the pool does not restart it."""
        pid = self.pid
        if pid is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        for _ in range(int(timeout / 0.2)):
            if not self.running:
                return
            await asyncio.sleep(0.2)


class Pool:
    """The consumer processes: one ``rxhubs.run_workers`` pool (``python -m rxhubs.demo._consumer``)."""

    def __init__(self, options: DemoOptions, connection_string: str) -> None:
        self.options = options
        self.connection_string = connection_string
        n = options.consumers
        self.workers = [Worker(i, options, late=n > 1 and i == n - 1) for i in range(n)]
        self.process: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        o = self.options
        log = (o.out / "logs" / "consumers.log").open("wb")
        env = dict(os.environ, RXHUBS_CONNECTION_STRING=self.connection_string, PYTHONUNBUFFERED="1")
        late = len(self.workers) - 1 if len(self.workers) > 1 else -1
        args = [
            sys.executable, "-m", "rxhubs.demo._consumer", "--hub", HUB, "--store", str(o.out / "checkpoints.sqlite"),
            "--out", str(o.out), "--workers", str(len(self.workers)), "--late", str(late),
            "--owner-prefix", OWNER_PREFIX, "--interval", str(o.interval), "--expiry", str(o.expiry),
        ]
        if o.delta is not None:
            args += ["--delta", str(o.delta)]
        elif o.spark:
            args.append("--spark")
        self.process = await asyncio.create_subprocess_exec(*args, stdout=log, stderr=log, env=env)
        log.close()

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.returncode is None

    async def wait_ready(self, timeout: float = 300.0) -> None:
        """Wait until every worker is ready; raise if the pool died or took too long."""
        deadline = time.monotonic() + timeout
        while not all(w.ready for w in self.workers):
            if not self.running:
                raise ConfigurationError(
                    f"the consumers exited before they were ready; see {self.options.out / 'logs' / 'consumers.log'}"
                )
            if time.monotonic() > deadline:
                raise ConfigurationError(f"the consumers were not ready after {timeout:.0f} s")
            await asyncio.sleep(0.2)

    async def stop(self, timeout: float = 120.0) -> int | None:
        """SIGTERM the pool (it stops every worker gracefully), then SIGKILL after ``timeout``."""
        process = self.process
        if process is None or process.returncode is not None:
            return None if process is None else process.returncode
        process.send_signal(signal.SIGTERM)
        try:
            return await asyncio.wait_for(process.wait(), timeout)
        except TimeoutError:
            process.kill()
            return await process.wait()


async def _produce(hub: Any, partition_ids: list[str], rate: int, stop: asyncio.Event, sent: list[int]) -> None:
    tick = 0.1
    per_tick = max(1, round(rate * tick))
    counter = 0
    next_time = time.monotonic()
    while not stop.is_set():
        chunks: dict[str, list[bytes]] = {p: [] for p in partition_ids}
        for i in range(per_tick):
            p = partition_ids[(counter + i) % len(partition_ids)]
            chunks[p].append(json.dumps({"n": counter + i, "device": f"sensor-{(counter + i) % 97}",
                                         "temperature": 20 + (counter + i) % 10 / 2}).encode())
        counter += per_tick
        await asyncio.gather(*(hub.send(b, partition_id=p) for p, b in chunks.items() if b))
        sent[0] = counter
        next_time += tick
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), max(0.0, next_time - time.monotonic()))


async def _snapshot(hub: Any, store: Any, partition_ids: list[str], started: float) -> Snapshot:
    ns, name = hub.fully_qualified_namespace, hub.eventhub_name
    ownership = {o.partition_id: o for o in await store.list_ownership(ns, name, CONSUMER_GROUP)}
    checkpoints = {c.partition_id: c for c in await store.list_checkpoints(ns, name, CONSUMER_GROUP)}
    props = await asyncio.gather(*(hub.get_partition_properties(p) for p in partition_ids))
    return Snapshot(
        elapsed=time.monotonic() - started,
        owners={p: (ownership[p].owner_id if p in ownership else "") for p in partition_ids},
        checkpoints={p: (checkpoints[p].sequence_number if p in checkpoints else -1) for p in partition_ids},
        last_enqueued={p.partition_id: p.last_enqueued_sequence_number for p in props},
    )


def _read_back(options: DemoOptions) -> tuple[dict[str, set[int]], int]:
    seen: dict[str, set[int]] = {}
    pairs: list[tuple[str, int]] = []
    table: Any = None
    if options.delta is not None:
        import deltalake

        from rxhubs.tables import read_delta  # not DeltaTable.to_pyarrow_table(): it can abort the exit

        if deltalake.DeltaTable.is_deltatable(str(options.delta)):
            table = read_delta(options.delta, ["partition", "sequenceNumber"])
    elif options.spark:
        import pyarrow.parquet as pq

        folder = options.out / "parquet"
        if folder.exists():
            table = pq.read_table(folder, columns=["partition", "sequenceNumber"])
    else:
        for path in sorted((options.out / "jsonl").glob("*.jsonl")):
            for line in path.read_text(encoding="utf-8").splitlines():
                record = json.loads(line)
                pairs.append((record["partition"], record["sequenceNumber"]))
    if table is not None:
        pairs = list(zip(table.column("partition").to_pylist(), table.column("sequenceNumber").to_pylist(),
                         strict=True))
    for partition, seq in pairs:
        seen.setdefault(partition, set()).add(seq)
    return seen, len(pairs)


async def run_demo(options: DemoOptions, emit: Callable[[str], None] = print) -> DemoSummary:
    """Run the whole demo and return what it proved."""
    from rxhubs.emulator import Emulator
    from rxhubs.stores import SqliteCheckpointStore
    from rxhubs.transport import EventHub

    options.check()
    prepare_out(options.out)
    live = sys.stdout.isatty() if options.live is None else options.live
    timeline: list[tuple[float, str]] = []
    started = time.monotonic()

    def note(text: str) -> None:
        timeline.append((time.monotonic() - started, text))
        if not live:
            emit(f"[{time.monotonic() - started:6.1f}s] {text}")

    async with Emulator(hubs={HUB: options.partitions}) as emulator:
        connection_string = emulator.connection_string(HUB)
        hub = EventHub.from_connection_string(connection_string, eventhub_name=HUB)
        store = SqliteCheckpointStore(options.out / "checkpoints.sqlite")
        partition_ids = list(await hub.get_partition_ids())
        note(f"emulator on 127.0.0.1:{emulator.port}, hub {HUB!r} with {len(partition_ids)} partitions")
        pool = Pool(options, connection_string)
        consumers = pool.workers
        await pool.start()  # every worker starts now, so every JVM warms up before the timeline begins
        note(f"{len(consumers)} consumer processes starting (rxhubs.run_workers, pool pid "
             f"{pool.process.pid if pool.process else '?'})"
             + (f"; {consumers[-1].owner_id} held back until a third of the run" if len(consumers) > 1 else ""))
        if options.spark and options.delta is None:
            note("waiting for the consumers' Spark sessions")
        await pool.wait_ready()
        note("consumers ready")
        stop_producing = asyncio.Event()
        sent = [0]
        producer = asyncio.create_task(_produce(hub, partition_ids, options.rate, stop_producing, sent))
        production_started = time.monotonic()
        note(f"producing {options.rate} events/s for {options.duration:.0f} s")

        joined = stopped = options.consumers == 1
        last_draw = 0.0
        history: list[tuple[float, int]] = []
        try:
            while True:
                await asyncio.sleep(0.5)
                elapsed = time.monotonic() - production_started  # the schedule counts from the first event
                if not joined and elapsed >= options.duration / 3:
                    joined = True
                    consumers[-1].go()
                    note(f"{consumers[-1].owner_id} joins: partitions move to it at a clean checkpoint")
                if not stopped and elapsed >= 2 * options.duration / 3:
                    stopped = True
                    note(f"{consumers[0].owner_id} stops gracefully: flushes, checkpoints, releases")
                    asyncio.get_running_loop().create_task(consumers[0].stop())
                if producer.done():
                    producer.result()
                if elapsed >= options.duration and not stop_producing.is_set():
                    stop_producing.set()
                    await producer
                    note(f"producer stopped after {sent[0]:,} events; draining")
                snap = await _snapshot(hub, store, partition_ids, started)
                history.append((snap.elapsed, snap.written))
                if time.monotonic() - last_draw >= (0.5 if live else 5.0):
                    last_draw = time.monotonic()
                    emit(render_live(snap, history, sent[0], [c.owner_id for c in consumers if c.running],
                                     timeline, live))
                if stop_producing.is_set() and snap.caught_up:
                    note("every partition checkpointed up to its last event")
                    break
                if stop_producing.is_set() and elapsed > options.duration + 120:
                    note("drain timed out")
                    break
                if not any(c.running for c in consumers):
                    note("no consumer is running")
                    break
        finally:
            stop_producing.set()
            if not producer.done():
                producer.cancel()
            await pool.stop()
            await hub.close()
        note("consumers stopped")
        with contextlib.suppress(OSError):
            emit("events per consumer process (rxhubs.run_workers):\n" + (options.out / "workers.txt").read_text())

    seen, rows = _read_back(options)
    summary = DemoSummary(
        sent={p: snap.last_enqueued[p] + 1 for p in partition_ids},
        distinct={p: len(s) for p, s in seen.items()},
        rows=rows,
        seconds=time.monotonic() - started,
        timeline=timeline,
        sink=f"Delta table {options.delta}, exactly once" if options.delta is not None
        else "Parquet via Spark" if options.spark else "JSON lines",
    )
    emit(render_summary(summary))
    return summary
