"""Scenario ``emulator``: the emulator must never be what limits a test or a demo.

The emulator runs in its own process (``rxhubs emulator``). Two figures, 1 KB events:

* ``ingest``: a lean raw AMQP client replays a pre-encoded batch transfer (500 events) on 2 connections and
  counts the Accepted dispositions: the server's ingest rate. Baseline: the official ``EventHubProducerClient``
  sending batches of 1,000 events from this one process against the same emulator.
* ``delivery``: a raw client grants large credit on one partition holding the events and counts transfer
  frames as they arrive: the server's delivery rate. Baseline: ``EventHubConsumerClient.receive_batch``
  (prefetch 1,000, batches of 1,000) from this one process. ``delivery_runtime_metrics`` is the same with the
  receiver runtime metric asked for at attach, as rxhubs receivers do by default (the emulator then adds the
  last-enqueued annotations to every delivery).
* ``*_cpu``: the emulator process's CPU time (user + system) per event during each of those runs, and the
  events one emulator core would serve at that cost: the rate that does not depend on how busy the shared
  machine is.

Target: the server handles at least 2x what one SDK client process reaches. Every figure carries the load
average of the machine (``load_average``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Coroutine, Iterator
from typing import Any

from rxhubs.bench._report import figure, sized
from rxhubs.emulator import _frames as fr
from rxhubs.emulator._codec import Described, Symbol, UInt, ULong, encode_value

SCENARIO = "emulator"
EVENT = b"x" * 1024
BATCH = 500
_HDR = struct.Struct(">IBBH")
TARGET = ">= 2x"


@contextlib.contextmanager
def _emulator_process(partitions: int) -> Iterator[tuple[str, int]]:
    cmd = [sys.executable, "-m", "rxhubs.cli", "emulator", "--hub", f"bench:{partitions}", "--port", "0"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None
        conn = proc.stdout.readline().strip()
        if not conn.startswith("Endpoint="):
            raise RuntimeError("the emulator process did not start")
        yield conn, proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _port(conn: str) -> int:
    return int(conn.split("sb://", 1)[1].split(";", 1)[0].rsplit(":", 1)[1])


# ------------------------------------------------------------------------------------------ raw client
def _terminus(code: int, address: str, size: int) -> Described:
    return Described(ULong(code), [address, *([None] * (size - 1))])


class _Raw:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, port: int) -> _Raw:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        raw = cls(reader, writer)
        writer.write(fr.AMQP_HEADER)
        await reader.readexactly(8)
        raw.send(fr.OPEN, ["bench", None, UInt(1024 * 1024)])
        raw.send(fr.BEGIN, [None, UInt(0), UInt(2**31 - 1), UInt(2**31 - 1)])
        await raw.expect(fr.BEGIN)
        return raw

    def send(self, code: int, fields: list[Any], payload: bytes = b"") -> None:
        self.writer.write(fr.frame(0, fr.performative(code, fields) + payload))

    async def frame(self) -> tuple[int, fr.Performative | None]:
        size, doff, _, _ = _HDR.unpack(await self.reader.readexactly(8))
        body = (await self.reader.readexactly(size - 8))[doff * 4 - 8 :]
        return (body[2] if len(body) > 2 else -1), (fr.decode_performative(body) if body else None)

    async def expect(self, code: int) -> fr.Performative:
        while True:
            got, perf = await self.frame()
            if got == code and perf is not None:
                return perf

    def close(self) -> None:
        self.writer.close()


def _batch_payload() -> bytes:
    inner = b"\x00\x53\x75" + encode_value(EVENT)
    return b"".join(b"\x00\x53\x75" + encode_value(inner) for _ in range(BATCH))


def _cpu_seconds(pid: int) -> float:
    import psutil

    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


def _timed(pid: int, run: Coroutine[Any, Any, tuple[float, int]]) -> tuple[float, float]:
    """Run a measurement; returns its rate and the emulator's CPU microseconds per event during it."""
    before = _cpu_seconds(pid)
    rate, events = asyncio.run(run)
    return rate, (_cpu_seconds(pid) - before) * 1e6 / max(events, 1)


async def _ingest(port: int, seconds: float, connections: int = 2) -> tuple[float, int]:
    payload = _batch_payload()
    accepted = 0
    stop = time.perf_counter() + seconds

    async def one(index: int) -> None:
        nonlocal accepted
        raw = await _Raw.open(port)
        raw.send(fr.ATTACH, [f"s{index}", UInt(0), False, None, None, _terminus(fr.SOURCE, "bench", 11),
                             _terminus(fr.TARGET, f"/bench/Partitions/{index}", 7), None, None, UInt(0)])
        await raw.expect(fr.ATTACH)
        delivery, in_flight = 0, 0
        while time.perf_counter() < stop:
            while in_flight < 8:  # a few batches in flight, as a pipelining client would
                raw.send(fr.TRANSFER, [UInt(0), UInt(delivery), struct.pack(">I", delivery),
                                       UInt(fr.BATCH_FORMAT), False, False], payload)
                delivery += 1
                in_flight += 1
            await raw.writer.drain()
            await raw.expect(fr.DISPOSITION)
            in_flight -= 1
            accepted += BATCH
        raw.close()

    start = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(connections)))
    return accepted / (time.perf_counter() - start), accepted


async def _delivery(port: int, events: int, runtime_metrics: bool = False) -> tuple[float, int]:
    raw = await _Raw.open(port)
    selector = Symbol("apache.org:selector-filter:string")
    source = Described(ULong(fr.SOURCE), ["/bench/ConsumerGroups/$Default/Partitions/0", None, None, None, None,
                                          None, None, {selector: Described(selector,
                                                                            "amqp.annotation.x-opt-offset > '-1'")},
                                          None, None, None])
    desired = fr.symbols(["com.microsoft:enable-receiver-runtime-metric"]) if runtime_metrics else None
    raw.send(fr.ATTACH, ["r", UInt(0), True, None, None, source, _terminus(fr.TARGET, "bench", 7), None, None,
                         None, None, None, desired])
    await raw.expect(fr.ATTACH)
    credit = 5000
    raw.send(fr.FLOW, [UInt(0), UInt(2**31 - 1), UInt(0), UInt(2**31 - 1), UInt(0), UInt(0), UInt(credit)])
    received, granted = 0, credit
    buffer = b""
    start = time.perf_counter()
    while received < events:
        buffer += await raw.reader.read(1 << 20)
        pos = 0
        while len(buffer) - pos >= 8:  # count whole transfer frames without decoding them
            size = int.from_bytes(buffer[pos : pos + 4], "big")
            if len(buffer) - pos < size:
                break
            if size > 10 and buffer[pos + 10] == fr.TRANSFER:
                received += 1
            pos += size
        buffer = buffer[pos:]
        if granted - received < credit // 2:
            granted = received + credit
            raw.send(fr.FLOW, [UInt(0), UInt(2**31 - 1), UInt(0), UInt(2**31 - 1), UInt(0), UInt(received),
                               UInt(credit)])
    elapsed = time.perf_counter() - start
    raw.close()
    return received / elapsed, received


async def _fill(port: int, events: int) -> None:
    raw = await _Raw.open(port)
    raw.send(fr.ATTACH, ["fill", UInt(0), False, None, None, _terminus(fr.SOURCE, "bench", 11),
                         _terminus(fr.TARGET, "/bench/Partitions/0", 7), None, None, UInt(0)])
    await raw.expect(fr.ATTACH)
    payload = _batch_payload()
    for delivery in range(events // BATCH):
        raw.send(fr.TRANSFER, [UInt(0), UInt(delivery), struct.pack(">I", delivery), UInt(fr.BATCH_FORMAT),
                               False, False], payload)
        await raw.expect(fr.DISPOSITION)
    raw.close()


# ------------------------------------------------------------------------------------------ SDK baselines
def _sdk_send(conn: str, seconds: float) -> float:
    from azure.eventhub import EventData, EventHubProducerClient

    def batch() -> Any:
        events = producer.create_batch(partition_id="0")
        for _ in range(1000):
            events.add(EventData(EVENT))
        return events

    sent = 0
    with EventHubProducerClient.from_connection_string(conn) as producer:
        producer.send_batch(batch())  # warm up the link
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:  # new events every time, as a real producer sends
            producer.send_batch(batch())
            sent += 1000
        return sent / (time.perf_counter() - start)


def _sdk_receive(conn: str, events: int, timeout: float) -> float:
    from azure.eventhub import EventHubConsumerClient

    client = EventHubConsumerClient.from_connection_string(conn, consumer_group="$Default")
    count = 0
    first: float | None = None
    done = threading.Event()

    def on_batch(_ctx: Any, batch: list[Any]) -> None:
        nonlocal count, first
        if first is None:
            first = time.perf_counter()
        count += len(batch)
        if count >= events:
            done.set()

    thread = threading.Thread(target=client.receive_batch, daemon=True, kwargs={
        "on_event_batch": on_batch, "partition_id": "0", "starting_position": "-1", "max_batch_size": 1000,
        "prefetch": 1000, "max_wait_time": 1})
    thread.start()
    done.wait(timeout)
    end = time.perf_counter()
    client.close()
    thread.join(10)
    return count / (end - first) if first is not None and end > first else 0.0


def _cpu_figure(metric: str, cpu_us: float, **extra: Any) -> dict[str, Any]:
    return figure(SCENARIO, metric, "emulator CPU us/event", round(cpu_us, 2), None, None, None,
                  events_per_core_s=round(1e6 / cpu_us) if cpu_us > 0 else None, **extra)


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Measure the emulator's ingest and delivery rates against one SDK client process (1 KB events)."""
    seconds = sized(args, 5.0, 2.0, 0.5)
    events = sized(args, 150_000, 50_000, 5_000)
    figures: list[dict[str, Any]] = []
    with _emulator_process(partitions=2) as (conn, pid):
        port = _port(conn)
        server_ingest, ingest_cpu = _timed(pid, _ingest(port, seconds))
        sdk_ingest = _sdk_send(conn, seconds)
        figures.append(figure(SCENARIO, "ingest", "events/s", round(server_ingest), round(sdk_ingest),
                              "azure-eventhub producer, one process", TARGET))
        figures.append(_cpu_figure("ingest_cpu", ingest_cpu))
    with _emulator_process(partitions=1) as (conn, pid):
        port = _port(conn)
        asyncio.run(_fill(port, events))
        server_delivery, delivery_cpu = _timed(pid, _delivery(port, events))
        metrics_delivery, metrics_cpu = _timed(pid, _delivery(port, events, runtime_metrics=True))
        sdk_delivery = _sdk_receive(conn, events, timeout=seconds * 12)
        for metric, rate in (("delivery", server_delivery), ("delivery_runtime_metrics", metrics_delivery)):
            figures.append(figure(SCENARIO, metric, "events/s", round(rate), round(sdk_delivery),
                                  "azure-eventhub consumer, one process", TARGET))
        figures.append(_cpu_figure("delivery_cpu", delivery_cpu))
        figures.append(_cpu_figure("delivery_runtime_metrics_cpu", metrics_cpu))
    load = round(os.getloadavg()[0], 2)
    return [{**f, "load_average": load} for f in figures]
