"""Scenario ``chaos``: a seeded chaos run of three consumer processes, checked from their ledgers; PASS/FAIL.

``rxhubs bench chaos --seed N --duration S --out DIR``. Topology (everything on 127.0.0.1): the rxhubs emulator
(in this process, durable: ``data_dir``; hub ``chaos`` with 4 partitions, grown to 6 once), Azurite, a producer
of numbered events (about 120 events/s, straight to the emulator; each body ``{"id", "p"}`` carries a unique id
and the partition it is meant for), and three consumer processes (``_worker``: ``rxhubs.consume`` +
``hops.checkpoint`` on a ``BlobCheckpointStore``; balancing every 2 s, expiry 12 s, a checkpoint a second),
each behind its own ``FaultProxy`` toward the hub and another toward the store. The seed's schedule
(``_plan``) is printed and written to ``schedule.json``; the nemesis (``_nemesis``) follows it.
After the chaos phase every fault is healed, the producer stops, the consumers drain and stop gracefully, the
hub's contents are read back, and the checker (``_report``) writes ``chaos_report.json`` and
``chaos_lag.png``, prints the report and one ``PASS`` or ``FAIL`` line.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import random
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, TextIO

from rxhubs.bench._report import sized
from rxhubs.chaos._nemesis import ACTIONS, Consumer, Rig, heal_all
from rxhubs.chaos._plan import CONSUMERS, Fault, describe, make_schedule
from rxhubs.chaos._report import figures, report_dir

HUB = "chaos"
RATE = 120  # events/s
#: ``--smoke``'s seed (with its 60 s): a geo-replication promotion, a hub path cut mid-frame and a forced close.
SMOKE_SEED = 6
DRAIN_TIMEOUT = 120.0
READY_TIMEOUT = 120.0  # how long the consumers may take to start reading before the schedule starts


class Producer:
    """Numbered events to every current partition, round robin, ~RATE/s; a ledger line per event sent."""

    def __init__(self, conn: str, seed: int, rig: Rig, ledger: TextIO) -> None:
        self.conn, self.seed, self.rig, self.ledger = conn, seed, rig, ledger
        self.sent = 0
        self.failed = 0

    async def run(self, stop: asyncio.Event) -> None:
        from azure.eventhub.aio import EventHubProducerClient

        tick = 0.1
        next_at = time.monotonic()
        client: Any = None
        known = 0
        while not stop.is_set():
            count = self.rig.partitions[-1]
            if client is None or count != known:
                # the SDK's producer checks partition ids against those it read once: a new client sees new ones
                if client is not None:
                    await client.close()
                client, known = EventHubProducerClient.from_connection_string(self.conn, retry_total=10), count
            await self._tick(client, count, max(1, round(RATE * tick)))
            next_at += tick
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
        if client is not None:
            await client.close()
        self.ledger.flush()

    async def _tick(self, client: Any, count: int, events: int) -> None:
        """Send the next ``events`` numbered events, one batch per partition; a ledger line per event."""
        from azure.eventhub import EventData

        first = self.sent
        self.sent += events
        for pid in sorted({str(n % count) for n in range(first, first + events)}, key=int):
            ids = [f"{self.seed}-{n}" for n in range(first, first + events) if str(n % count) == pid]
            now = time.time()
            ok = True
            try:
                batch = await client.create_batch(partition_id=pid)
                for eid in ids:
                    batch.add(EventData(json.dumps({"id": eid, "p": pid})))
                await asyncio.wait_for(client.send_batch(batch), 30.0)
            except Exception:  # recorded as not acknowledged; the hub may still have stored it
                ok = False
                self.failed += len(ids)
            self.ledger.write("".join(json.dumps({"id": i, "p": pid, "t": round(now, 4), "ok": ok}) + "\n"
                                      for i in ids))


async def _inject(rig: Rig, fault: Fault, t0: float, record: dict[str, Any]) -> None:
    begin, end = ACTIONS[fault.type]
    await asyncio.sleep(max(0.0, t0 + fault.start - time.time()))
    record["start"] = time.time()
    try:
        result = await begin(rig, fault)
        record["injected"], record["result"] = True, result if isinstance(result, int | str | None) else str(result)
    except Exception as exc:
        record["injected"], record["error"] = False, f"{type(exc).__name__}: {exc}"
        record["end"] = time.time()
        return
    await asyncio.sleep(max(0.0, t0 + fault.end - time.time()))
    try:
        await end(rig, fault)
    except Exception as exc:
        record["end_error"] = f"{type(exc).__name__}: {exc}"
    record["end"] = time.time()


def _processed_ids(out: Path, offsets: dict[Path, int], seen: set[str]) -> None:
    """Read what the ledgers gained since the last call (ids of processed events)."""
    for path in out.glob("ledger-*.jsonl"):
        with open(path) as f:
            f.seek(offsets.get(path, 0))
            while True:
                line = f.readline()
                if not line.endswith("\n"):
                    break
                offsets[path] = f.tell()
                if '"k":"ev"' in line:
                    try:
                        seen.add(json.loads(line)["id"])
                    except (ValueError, KeyError):
                        pass


async def _drain(out: Path, producer_ledger: Path, timeout: float) -> float:
    """Wait until every acknowledged event was processed (or ``timeout``); seconds waited."""
    began = time.time()
    acked = {json.loads(line)["id"] for line in producer_ledger.read_text().splitlines()  # noqa: ASYNC240
             if line.endswith("true}")}
    seen: set[str] = set()
    offsets: dict[Path, int] = {}
    while time.time() - began < timeout:
        _processed_ids(out, offsets, seen)
        if acked <= seen:
            break
        await asyncio.sleep(1.0)
    return time.time() - began


async def _read_back(conn: str, out: Path, partitions: int) -> tuple[int, int]:
    """Every event the hub stored, read in the consumer group ``verify`` (no owner level), to stored.jsonl.

    Returns how many were read and how many the partitions' properties say there are.
    """
    import rxhubs
    from rxhubs import Position

    total = expected = 0
    hub = rxhubs.EventHub.from_connection_string(conn)
    with open(out / "stored.jsonl", "w") as sink:  # noqa: ASYNC230 - a local file, written line by line
        async with hub:
            for pid in map(str, range(partitions)):
                props = await hub.get_partition_properties(pid)
                last = props.last_enqueued_sequence_number
                if props.is_empty or last is None or last < 0:
                    continue
                expected += last + 1 - props.beginning_sequence_number
                async with hub.receiver(pid, consumer_group="verify", start=Position.earliest(),
                                        owner_level=None) as receiver:
                    got, empty = -1, 0
                    while got < last and empty < 15:  # 30 s without an event: give up (the report says so)
                        batch = await receiver.receive_batch(500, 2.0)
                        empty = 0 if batch else empty + 1
                        for e in batch:
                            got = e.sequence_number
                            try:
                                body = json.loads(e.body)
                            except ValueError:
                                body = {}
                            sink.write(json.dumps({"p": pid, "s": e.sequence_number, "id": body.get("id"),
                                                   "ip": body.get("p")}) + "\n")
                            total += 1
    return total, expected


def _prepare(out: Path) -> None:
    """Create the output folder; remove the ledgers and logs of an earlier run there."""
    out.mkdir(parents=True, exist_ok=True)
    for stale in (*out.glob("ledger-*.jsonl"), *out.glob("consumer-*.log")):
        stale.unlink()


def _link_dict(r: Any) -> dict[str, Any]:
    def get(*names: str) -> Any:
        for name in names:
            if hasattr(r, name):
                return getattr(r, name)
        return None

    return {"t": get("time", "t"), "conn": get("connection_id", "connection", "conn"), "hub": get("hub"),
            "cg": get("consumer_group"), "p": str(get("partition_id")), "level": get("owner_level"),
            "event": get("event"), "cond": get("condition")}


async def chaos(seed: int, duration: float, out: Path, plan: list[Fault] | None = None) -> dict[str, Any]:
    """One chaos run into ``out``; returns the report. ``plan`` replaces the seed's schedule (tests)."""
    from azure.storage.blob.aio import ContainerClient

    from rxhubs.emulator import Emulator
    from rxhubs.testing import FaultProxy  # type: ignore[attr-defined,unused-ignore]
    from rxhubs.testing._azurite import Azurite

    _prepare(out)
    plan = make_schedule(seed, duration) if plan is None else plan
    (out / "schedule.json").write_text(json.dumps({"seed": seed, "duration": duration,
                                                   "faults": [f.to_json() for f in plan]}, indent=1))
    print(f"chaos seed {seed}, {duration:.0f} s, {len(plan)} faults (schedule.json):\n{describe(plan)}",
          file=sys.stderr, flush=True)
    procs: list[dict[str, Any]] = []

    def log(event: str, consumer: Consumer, **extra: Any) -> None:
        procs.append({"c": consumer.name, "i": consumer.incarnation, "event": event, "t": time.time(), **extra})

    container = f"chaos-{seed}-{uuid.uuid4().hex[:8]}"
    emulator = Emulator(hubs={HUB: 4}, data_dir=out / "emulator-data", consumer_groups=["verify"])
    with Azurite() as azurite:
        async with emulator, ContainerClient.from_connection_string(azurite.connection_string, container) as cc:
            await cc.create_container()
            hub_proxies = {c: await FaultProxy("127.0.0.1", emulator.port, seed=seed).start() for c in CONSUMERS}
            store_proxies = {c: await FaultProxy("127.0.0.1", azurite.port, seed=seed).start() for c in CONSUMERS}
            conn = emulator.connection_string(HUB)
            consumers = {}
            for c in CONSUMERS:
                env = {"RXHUBS_CHAOS_EVENTHUB": conn, "RXHUBS_CHAOS_ENDPOINT": f"sb://{hub_proxies[c].address}",
                       "RXHUBS_CHAOS_STORAGE": azurite.connection_string.replace(
                           f":{azurite.port}/", f":{store_proxies[c].port}/")}
                consumers[c] = Consumer(c, out, container, env, log)
            rig = Rig(emulator, HUB, hub_proxies, store_proxies, consumers)
            for consumer in consumers.values():
                consumer.start()
            # the schedule's clock starts once every partition is being read: at load 16 the consumer processes
            # took 11.5 s to import and attach, and a fault planned at 11 s hit no reader (nothing was felt)
            ready, ready_wait = await _readers_attached(emulator, 4, READY_TIMEOUT)
            t0 = time.time()
            rig.partitions_at.append((t0, 4))
            records = [{**f.to_json(), "injected": False} for f in plan]
            stop = asyncio.Event()
            with open(out / "producer.jsonl", "w") as producer_ledger:  # noqa: ASYNC230 - a local ledger
                producer = Producer(conn, seed, rig, producer_ledger)
                producing = asyncio.create_task(producer.run(stop))
                nemesis = [asyncio.create_task(_inject(rig, f, t0, r)) for f, r in zip(plan, records, strict=True)]
                await asyncio.sleep(max(0.0, t0 + duration - time.time()))
                for task in nemesis:
                    task.cancel()
                await asyncio.gather(*nemesis, return_exceptions=True)
                await heal_all(rig)
                stop.set()
                await producing
            producer_stop = time.time()
            drained = await _drain(out, out / "producer.jsonl", DRAIN_TIMEOUT)
            await asyncio.gather(*(consumer.terminate() for consumer in consumers.values()))
            stats = {f"{kind}-{c}": _stats(p) for kind, group in (("hub", hub_proxies), ("store", store_proxies))
                     for c, p in group.items()}
            for proxy in (*hub_proxies.values(), *store_proxies.values()):
                await proxy.stop()
            stored, expected = await _read_back(conn, out, rig.partitions[-1])
            link_log = getattr(emulator, "link_log", None)
            with open(out / "links.jsonl", "w") as links:  # noqa: ASYNC230
                links.writelines(json.dumps(_link_dict(r)) + "\n" for r in link_log or ())
    run = {"seed": seed, "duration": duration, "t0": t0, "readers_attached": ready,
           "ready_wait_s": round(ready_wait, 2), "producer_stop": producer_stop, "faults": records,
           "procs": procs, "partitions_at": rig.partitions_at, "drain_wait_s": round(drained, 2),
           "produced": producer.sent, "send_failures": producer.failed, "stored": stored,
           "stored_expected": expected, "proxy_stats": stats,
           "link_log": link_log is not None}
    (out / "run.json").write_text(json.dumps(run, indent=1, default=str))
    return report_dir(out)


async def _readers_attached(emulator: Any, partitions: int, timeout: float) -> tuple[bool, float]:
    """Wait until a consumer link was attached to each of ``partitions`` (or ``timeout``): attached?, seconds.

    ``link_log`` is a copy taken when read: it is read again each time (a copy taken once, before the loop,
    stayed empty, so every run waited the whole timeout and none knew whether its readers were there).
    """
    began = time.time()
    while getattr(emulator, "link_log", None) is not None:
        attached = {r.partition_id for r in emulator.link_log
                    if r.event == "attach" and r.consumer_group.lower() == "$default"}
        if len(attached) >= partitions:
            return True, time.time() - began
        if time.time() - began >= timeout:
            break
        await asyncio.sleep(0.2)
    return False, time.time() - began


def _stats(proxy: Any) -> dict[str, Any]:
    s = proxy.stats
    return dataclasses.asdict(s) if dataclasses.is_dataclass(s) and not isinstance(s, type) else {"stats": str(s)}


def run(args: Any = None) -> list[dict[str, Any]]:
    """The ``rxhubs bench chaos`` entry: prints the report and PASS/FAIL; returns the bench figures."""
    seed = getattr(args, "seed", None)
    if seed is None and getattr(args, "smoke", False):
        seed = SMOKE_SEED  # a known short schedule (tests/chaos/test_chaos_run.py runs exactly this)
    seed = int(seed) if seed is not None else random.randrange(1, 10_000)
    duration = float(getattr(args, "duration", None) or sized(args, 480.0, 180.0, 60.0))
    # not the current folder: a chaos-SEED/ folder appeared in the user's repository
    out = Path(getattr(args, "out", None) or tempfile.mkdtemp(prefix=f"rxhubs-chaos-{seed}-"))
    print(f"chaos: ledgers, logs and the report go to {out}", file=sys.stderr, flush=True)
    report = asyncio.run(chaos(seed, duration, out))
    brief = {k: v for k, v in report.items() if k not in ("series", "recoveries")}
    stream = sys.stderr if getattr(args, "json", False) else sys.stdout
    print(json.dumps(brief, indent=2), file=stream, flush=True)
    print(f"{report['verdict']} seed {seed}: {'; '.join(report['failures']) or 'every check held'} ({out})",
          flush=True)
    return figures(report)
