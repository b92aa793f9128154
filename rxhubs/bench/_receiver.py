"""Scenario ``receiver``: events/s of rxhubs' pull receiver against the raw azure-eventhub callback.

One emulator in its own process holds one partition of 1 KB events (100,000; 20,000 with ``--quick``).
Trials alternate between the two readers, each a fresh client reading the whole partition from the start,
on the same machine in the same run:

* baseline: ``EventHubConsumerClient.receive_batch(on_event_batch=...)`` (aio), the callback touching
  each event's body bytes;
* rxhubs: ``EventHub.receiver(...)`` pulled with ``receive_batch(batch, max_wait=1.0)`` in a loop, doing the
  same per event (the receiver converts each ``EventData`` to an :class:`~rxhubs.Event` on the way).

The clock runs from the first event to the last, so the SDK's connection set-up (about a second, the same
code on both sides) does not dilute the comparison. Two settings, as the SDK's throughput depends on them
(its receive loop sleeps 50 ms after every read): prefetch 300 / batch 300 (the defaults) and prefetch
2000 / batch 1000; each with last-enqueued-event tracking off on both sides (the target: >= 0.95x) and on
on both sides (rxhubs' default; the SDK pays for decoding the extra annotations on every event). Process
CPU time per event is reported too: on a busy machine it is the steadier sign of overhead.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

from azure.eventhub.aio import EventHubConsumerClient

from rxhubs.bench._procs import emulator_process
from rxhubs.bench._report import figure, sized
from rxhubs.transport._azure import EventHub

HUB = "bench-receiver"
PROFILES = ((300, 300), (2000, 1000))
BASELINE = "azure-eventhub aio receive_batch callback"


async def _prefill(conn_str: str, events: int) -> None:
    body = b"x" * 1024
    async with EventHub.from_connection_string(conn_str) as hub:
        for start in range(0, events, 10_000):
            await hub.send([body] * min(10_000, events - start), partition_id="0")


async def _sdk(conn_str: str, events: int, prefetch: int, batch: int, track: bool) -> tuple[float, float]:
    client = EventHubConsumerClient.from_connection_string(conn_str, "$Default")
    done = asyncio.Event()
    seen = 0
    size = 0
    first: tuple[float, float] | None = None
    last: tuple[float, float] | None = None

    async def on_batch(_context: Any, batch_: list[Any]) -> None:
        nonlocal seen, size, first, last
        if first is None and batch_:
            first = (time.perf_counter(), time.process_time())
        for event in batch_:
            size += len(b"".join(event.body))
        seen += len(batch_)
        if seen >= events and last is None:
            last = (time.perf_counter(), time.process_time())
            done.set()

    task = asyncio.create_task(
        client.receive_batch(
            on_batch,
            partition_id="0",
            starting_position="-1",
            max_batch_size=batch,
            prefetch=prefetch,
            track_last_enqueued_event_properties=track,
        )
    )
    try:
        await asyncio.wait_for(done.wait(), 600)
    finally:
        await client.close()
        # after close() the SDK's receive task goes on until its own timeout (10 s): cancel what is left
        _, pending = await asyncio.wait({task}, timeout=1)
        for leftover in pending:
            leftover.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
    assert first is not None and last is not None
    return _rates(events, first, last)


async def _rxhubs(conn_str: str, events: int, prefetch: int, batch: int, track: bool) -> tuple[float, float]:
    seen = 0
    size = 0
    first: tuple[float, float] | None = None
    async with (
        EventHub.from_connection_string(conn_str, track_last_enqueued_event_properties=track) as hub,
        hub.receiver("0", prefetch=prefetch) as receiver,
    ):
        while seen < events:
            got = await receiver.receive_batch(batch, max_wait=1.0)
            if first is None and got:
                first = (time.perf_counter(), time.process_time())
            for event in got:
                size += len(event.body)
            seen += len(got)
        last = (time.perf_counter(), time.process_time())
    assert first is not None
    return _rates(events, first, last)


def _rates(events: int, first: tuple[float, float], last: tuple[float, float]) -> tuple[float, float]:
    """(events/s, CPU microseconds per event) between the first and the last event."""
    wall = max(last[0] - first[0], 1e-9)
    cpu = last[1] - first[1]
    return events / wall, cpu / events * 1e6


def run(args: Any = None) -> list[dict[str, Any]]:
    """Alternate SDK and rxhubs trials for each profile; report medians.

    Example:
        >>> figures = run(type("Args", (), {"quick": True})())  # doctest: +SKIP
        >>> sorted(figures[0])  # doctest: +SKIP
        ['baseline', 'baseline_name', 'met', 'metric', 'ratio', 'rxhubs', 'scenario', 'target', 'unit']
    """
    events = sized(args, 100_000, 20_000, 2_000)
    trials = sized(args, 5, 2, 1)
    tracked_trials = sized(args, 3, 2, 1)
    figures: list[dict[str, Any]] = []
    with emulator_process({HUB: 1}) as conn_strs:
        conn_str = conn_strs[HUB]
        asyncio.run(_prefill(conn_str, events))
        for track in (False, True):
            for prefetch, batch in sized(args, PROFILES, PROFILES, PROFILES[:1]):
                sdk: list[tuple[float, float]] = []
                ours: list[tuple[float, float]] = []
                for _ in range(trials if not track else tracked_trials):  # alternate: drift hits both alike
                    sdk.append(asyncio.run(_sdk(conn_str, events, prefetch, batch, track)))
                    ours.append(asyncio.run(_rxhubs(conn_str, events, prefetch, batch, track)))
                name = f"prefetch{prefetch}_batch{batch}_tracking_{'on' if track else 'off'}"
                figures.append(
                    figure(
                        "receiver",
                        f"events_per_s_{name}",
                        "events/s",
                        round(statistics.median(r for r, _ in ours)),
                        round(statistics.median(r for r, _ in sdk)),
                        BASELINE,
                        ">= 0.95x",
                    )
                )
                figures.append(
                    figure(
                        "receiver",
                        f"cpu_us_per_event_{name}",
                        "us/event",
                        round(statistics.median(c for _, c in ours), 1),
                        round(statistics.median(c for _, c in sdk), 1),
                        BASELINE,
                        None,
                        higher_is_better=False,
                    )
                )
    return figures
