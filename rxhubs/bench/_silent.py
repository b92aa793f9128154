"""Scenario ``silent``: a network path that goes silent (no FIN, no RST), rxhubs vs the official consumer.

One emulator (own process), 4 partitions, 100 events/s produced straight to it. Two consumers read the hub, each
through its own :class:`~rxhubs.testing.FaultProxy`, both with DEFAULT settings: rxhubs (``consume`` with an
in-memory store) and the official ``EventHubConsumerClient.receive_batch`` (no checkpoint store: every partition;
its own consumer group, as rxhubs' readers have an owner level).

1. At t=15 s (8 s with ``--quick``) both proxies **silence** their open connections (new ones pass). Measured:
   seconds from the fault until every partition delivers an event produced after it; watched for 45 s
   (35 s), after which a side that did not recover is reported as ``null`` (never, within the window).
2. Both sides are restarted from what they had (the official client would otherwise still be stalled), then
   both proxies **blackhole** every connection, old and new, for 30 s (20 s), then heal. Measured: seconds from
   the heal until every partition delivers an event it had not delivered before.
3. Production stops; after a drain of up to 20 s, events sent but never delivered are counted per side.

Targets for rxhubs: silent recovery <= 30 s, heal recovery <= 15 s, 0 lost.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Callable
from typing import Any, cast

from rxhubs.bench._procs import emulator_process
from rxhubs.bench._report import figure, sized

HUB = "silent"
PARTITIONS = 4
RATE = 100  # events/s, all partitions together
IDS = [str(p) for p in range(PARTITIONS)]
#: The official client reads its own consumer group: rxhubs' readers have an owner level, which shuts out
#: readers without one in the same group.
OFFICIAL_GROUP = "official"


class _Side:
    """What one consumer delivered: per partition, (sequence number, monotonic time) in arrival order."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.events: dict[str, list[tuple[int, float]]] = {p: [] for p in IDS}

    def add(self, partition: str, sequence_numbers: list[int]) -> None:
        now = time.monotonic()
        self.events[partition].extend((s, now) for s in sequence_numbers)

    def last(self) -> dict[str, int]:
        return {p: max((s for s, _ in e), default=-1) for p, e in self.events.items()}

    def recovered(self, since: float, beyond: dict[str, int]) -> float | None:
        """Seconds from ``since`` until every partition delivered a sequence number above ``beyond``'s."""
        latest = 0.0
        for p, events in self.events.items():
            found = [t for s, t in events if s > beyond[p] and t >= since]
            if not found:
                return None
            latest = max(latest, min(found) - since)
        return round(latest, 2)

    def lost(self, sent: dict[str, int]) -> int:
        return sum(n - len({s for s, _ in self.events[p] if s < n}) for p, n in sent.items())


async def _produce(conn: str, sent: dict[str, int], stop: asyncio.Event) -> None:
    import rxhubs

    async with rxhubs.EventHub.from_connection_string(conn) as hub:
        per_tick = max(1, RATE // PARTITIONS // 10)
        while not stop.is_set():
            for p in IDS:
                await hub.send([b"x"] * per_tick, partition_id=p)
                sent[p] += per_tick
            await asyncio.sleep(0.1)


class _Rxhubs:
    def __init__(self, conn: str, side: _Side) -> None:
        self.conn, self.side = conn, side
        self.task: asyncio.Task[Any] | None = None

    def start(self, start: dict[str, int] | None = None) -> None:
        import rxhubs
        from rxhubs._shutdown import Shutdown
        from rxhubs.stores import InMemoryCheckpointStore

        self.shutdown = Shutdown()
        hub = rxhubs.EventHub.from_connection_string(self.conn)  # DEFAULT liveness settings
        positions = {p: rxhubs.Position.from_sequence_number(n) for p, n in (start or {}).items() if n >= 0}
        pipeline = rxhubs.consume(hub, "$Default", InMemoryCheckpointStore(), start=positions or None)

        async def run() -> None:
            async with hub:
                await rxhubs.arun(
                    pipeline.pipe(_record(self.side)), shutdown=self.shutdown, signals=(), grace=10.0
                )

        self.task = asyncio.ensure_future(run())

    async def stop(self) -> None:
        self.shutdown.request()
        if self.task is not None:
            await asyncio.wait({self.task}, timeout=20)


def _record(side: _Side) -> Callable[[Any], Any]:
    from reactivex import operators as ops

    return ops.do_action(lambda b: side.add(b.partition_id, [e.sequence_number for e in b.events]))


class _Official:
    def __init__(self, conn: str, side: _Side) -> None:
        self.conn, self.side = conn, side
        self.client: Any = None
        self.task: asyncio.Task[Any] | None = None

    def start(self, start: dict[str, int] | None = None) -> None:
        from azure.eventhub.aio import EventHubConsumerClient

        self.client = client = EventHubConsumerClient.from_connection_string(self.conn, OFFICIAL_GROUP)
        position: Any = {p: n for p, n in (start or {}).items() if n >= 0} or "-1"
        if isinstance(position, dict):
            position = {p: position.get(p, "-1") for p in IDS}

        async def on_batch(context: Any, events: list[Any]) -> None:
            self.side.add(context.partition_id, [e.sequence_number for e in events])

        self.task = asyncio.ensure_future(client.receive_batch(on_batch, starting_position=position))

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            await asyncio.wait({self.task}, timeout=10)
        if self.client is not None:
            try:
                await asyncio.wait_for(self.client.close(), 10)
            except Exception:  # a client stuck on a dead path may not close cleanly
                pass


async def _until(condition: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:  # noqa: ASYNC110 - polling figures, no event to wait on
        await asyncio.sleep(0.1)


def _through(proxy: Any, conn: str) -> str:
    return re.sub(r"sb://[^;]+", f"sb://{proxy.address}", conn)


async def _scenario(conn: str, size: tuple[float, float, float, float]) -> list[dict[str, Any]]:
    from rxhubs.testing import FaultProxy

    warmup, window, dark, drain = size
    port = int(re.search(r"sb://[^:;/]+:(\d+)", conn).group(1))  # type: ignore[union-attr]
    sides = {"rxhubs": _Side("rxhubs"), "official": _Side("official")}
    sent = {p: 0 for p in IDS}
    stop = asyncio.Event()
    async with FaultProxy("127.0.0.1", port, seed=0) as proxy_r, FaultProxy("127.0.0.1", port, seed=1) as proxy_o:
        consumers: dict[str, Any] = {
            "rxhubs": _Rxhubs(_through(proxy_r, conn), sides["rxhubs"]),
            "official": _Official(_through(proxy_o, conn), sides["official"]),
        }
        producer = asyncio.ensure_future(_produce(conn, sent, stop))
        for consumer in consumers.values():
            consumer.start()
        await asyncio.sleep(warmup)

        # 1. silence: open connections go dead, new ones pass
        fault, at_fault = time.monotonic(), dict(sent)
        before = {p: n - 1 for p, n in at_fault.items()}  # deliver one produced after the fault
        proxy_r.silence()
        proxy_o.silence()
        await _until(lambda: all(s.recovered(fault, before) is not None for s in sides.values()), window)
        silent = {name: s.recovered(fault, before) for name, s in sides.items()}

        # 2. blackhole for `dark` seconds, then heal: both restarted first from what they delivered
        for name, consumer in consumers.items():
            await consumer.stop()
            consumer.start(sides[name].last())
        await asyncio.sleep(5.0)
        proxy_r.blackhole()
        proxy_o.blackhole()
        await asyncio.sleep(dark)
        heal, at_heal = time.monotonic(), {name: s.last() for name, s in sides.items()}
        proxy_r.heal()
        proxy_o.heal()
        await _until(lambda: all(s.recovered(heal, at_heal[n]) is not None for n, s in sides.items()), window)
        healed = {name: s.recovered(heal, at_heal[name]) for name, s in sides.items()}

        # 3. stop producing, drain, count what never arrived
        stop.set()
        await producer
        await _until(lambda: all(s.lost(sent) == 0 for s in sides.values()), drain)
        lost = {name: s.lost(sent) for name, s in sides.items()}
        for consumer in consumers.values():
            await consumer.stop()

    common = {"watched_s": window, "events_sent": sum(sent.values())}
    return [
        _recovery("silent_recovery", silent, 30.0, common),
        _recovery("heal_recovery", healed, 15.0, {**common, "blackhole_s": dark}),
        figure(
            "silent", "lost_events", "events", lost["rxhubs"], lost["official"], "official receive_batch", "0",
            higher_is_better=False, met=lost["rxhubs"] == 0, **common,
        ),
    ]


def _recovery(metric: str, seconds: dict[str, float | None], bound: float, extra: dict[str, Any]) -> dict[str, Any]:
    mine, theirs = seconds["rxhubs"], seconds["official"]
    return figure(  # null: did not recover within the watch window
        "silent", metric, "s", cast(float, mine), theirs, "official receive_batch",
        f"<= {bound:g} s", higher_is_better=False, met=mine is not None and mine <= bound,
        rxhubs_recovered=mine is not None, baseline_recovered=theirs is not None, **extra,
    )


def run(args: Any = None) -> list[dict[str, Any]]:
    """Run the scenario (about 2.5 minutes; 1.7 with ``--quick``; under a minute with ``--smoke``)."""
    # (warm-up, watch window, blackhole, drain) in seconds; a smoke run's recoveries may well be null
    size = sized(args, (15.0, 45.0, 30.0, 20.0), (8.0, 35.0, 20.0, 20.0), (3.0, 12.0, 3.0, 5.0))
    logging.getLogger("azure").setLevel(logging.CRITICAL)  # the official client's retries of a dead path
    with emulator_process({HUB: PARTITIONS}, consumer_groups=[OFFICIAL_GROUP]) as conns:
        return asyncio.run(_scenario(conns[HUB], size))
