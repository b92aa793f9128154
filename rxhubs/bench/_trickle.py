"""Scenario ``trickle``: how soon a trickle of events is handed out, native receive path against the pure one.

One emulator in its own process, one partition, one event sent every second (``--quick``: 4 per second;
``--smoke``: a few). A receiver pulls it with ``receive_batch(100, max_wait=5)`` in a loop; the latency of an
event is the time from just before its send to the moment a pull returns it. The same run measures the default
(native) path and the pure-Python one (``RXHUBS_NO_EXTENSIONS=1``: the direct path over pyamqp's reads), on
fresh receivers, in four alternating rounds; one event sent first opens the producer's connection before the
clock runs. Target: the native path no later than the pure one (median and p99).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from typing import Any

from rxhubs.bench._procs import emulator_process
from rxhubs.bench._report import figure, sized

HUB = "trickle"
ROUNDS = 4


async def _latencies(connection_string: str, count: int, every: float, pure: bool) -> list[float]:
    from rxhubs import EventHub, Position

    os.environ["RXHUBS_NO_EXTENSIONS"] = "1" if pure else ""  # read when each receiver opens
    latencies: list[float] = []
    async with EventHub.from_connection_string(connection_string) as hub:
        await hub.send([b"warm-up"], partition_id="0")  # the producer's connection is open before the clock runs
        props = await hub.get_partition_properties("0")
        start = Position.from_sequence_number(props.last_enqueued_sequence_number)
        async with hub.receiver("0", start=start) as receiver:
            await receiver.receive_batch(1, max_wait=0.5)  # attached
            async def produce() -> None:
                for _ in range(count):  # each body carries its send time (this process's clock)
                    await hub.send([b"%.9f " % time.perf_counter() + b"x" * 1000], partition_id="0")
                    await asyncio.sleep(every)

            producer = asyncio.create_task(produce())
            while len(latencies) < count:
                for event in await receiver.receive_batch(100, max_wait=5):
                    latencies.append(time.perf_counter() - float(event.body.split(b" ", 1)[0]))
            await producer
    return latencies


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


def run(args: Any = None) -> list[dict[str, Any]]:
    count = sized(args, 60, 40, 4) // ROUNDS * ROUNDS
    every = sized(args, 1.0, 0.25, 0.1)
    previous = os.environ.get("RXHUBS_NO_EXTENSIONS")
    try:
        native: list[float] = []
        pure: list[float] = []
        with emulator_process({HUB: 1}) as conns:
            for _ in range(ROUNDS):  # alternating, so that load that comes and goes weighs on both alike
                native += asyncio.run(_latencies(conns[HUB], count // ROUNDS, every, pure=False))
                pure += asyncio.run(_latencies(conns[HUB], count // ROUNDS, every, pure=True))
    finally:
        if previous is None:
            os.environ.pop("RXHUBS_NO_EXTENSIONS", None)
        else:
            os.environ["RXHUBS_NO_EXTENSIONS"] = previous
    load = round(os.getloadavg()[0], 2)
    figures = []
    for metric, pick in (("median", statistics.median), ("p99", _p99)):
        ours, theirs = pick(native) * 1000, pick(pure) * 1000
        figures.append(figure(
            "trickle", f"latency_ms_{metric}", "ms", round(ours, 2), round(theirs, 2),
            "rxhubs pure-Python path (RXHUBS_NO_EXTENSIONS=1)", None, higher_is_better=False,
            met=ours <= theirs * 1.1 + 1.0,  # no later, within noise (10% and a millisecond)
            events=count, every_s=every, load_average=load,
        ))
    return figures
