"""One trial of the ``state`` scenario in a fresh process; prints one JSON object.

``python -m rxhubs.bench.state._worker throughput --mode state|plain --events N`` reads the hub of
``RXHUBS_BENCH_EVENTHUB`` from the start and counts events per device and minute of event time: ``state`` with
``hops.window`` (its state committed with each checkpoint), ``plain`` with the same count in a dict that is never
saved. Both checkpoint into an in-memory store that counts its writes per partition (and notes when each was
made), and report the CPU time the count itself took (``stage_cpu_s``); afterwards ``state`` also reports the
size of the state committed per partition once the traffic stopped (a far-future event at the end of each
partition closed every window).

CPU time is taken from the first batch to the last (``cpu_s``: no start-up, imports or connection set-up) and
split three ways (:class:`CpuSplit`): ``pipeline_cpu_s``, the stages after the source (the count, the clock,
the checkpoint operator with its state); ``gc_s``, garbage collection wherever it ran; ``source_cpu_s``, the
rest: the receive path, event conversion, the event loop and the store calls, the same code on the same events
on both sides. Why: on two shared cores the speed of the same code moves by up to 2x within minutes (the other
hyperthread, caches), so whole-process CPU time of one trial against another's moved by more than the margin
the target leaves (plain against plain: 0.74x to 1.72x). The source path, which state does not change, runs in
the same process in the same seconds, interleaved batch by batch, so it clocks each trial's machine speed: the
bench compares ``(pipeline + gc) / source`` of the two sides. Garbage collection counts as the sides' own cost,
wherever it ran, as it grows with what the pipeline keeps alive.

``python -m rxhubs.bench.state._worker handover --mode state|plain --keys K`` reads the one-partition hub of
``RXHUBS_BENCH_HANDOVER``: owner ``a`` reads everything (``state``: one window per key, each holding a 1 KiB
value) and stops, releasing the partition (its state flushed with the checkpoint); one more event is sent;
owner ``b`` starts and the time from its start to that event's batch is the handover time.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import gc
import json
import os
import time
from typing import Any

from rxhubs import Checkpoint, Ownership
from rxhubs.stores import InMemoryCheckpointStore

WINDOW = 60.0
GRACE = 5.0
CHECKPOINT_INTERVAL = 1.0
TUNED: dict[str, Any] = {"max_batch_size": 1000, "prefetch": 2000}


class CountingStore(InMemoryCheckpointStore):
    """The in-memory store, counting checkpoint writes per partition (with or without state)."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: collections.Counter[str] = collections.Counter()
        self.times: dict[str, list[float]] = collections.defaultdict(list)  # when each write was made

    def _count(self, checkpoint: Checkpoint) -> None:
        self.writes[checkpoint.partition_id] += 1
        self.times[checkpoint.partition_id].append(time.monotonic())

    async def update_checkpoint(self, checkpoint: Checkpoint) -> None:
        self._count(checkpoint)
        await super().update_checkpoint(checkpoint)

    async def update_checkpoint_fenced(self, checkpoint: Checkpoint, ownership: Ownership) -> None:
        self._count(checkpoint)
        await super().update_checkpoint_fenced(checkpoint, ownership)

    async def commit_state(self, checkpoint: Checkpoint, ownership: Ownership, state: bytes) -> None:
        self._count(checkpoint)
        await super().commit_state(checkpoint, ownership, state)

    def rates(self, before: float) -> dict[str, float]:
        """Writes per partition per interval, from its first write to its last one made before ``before``.

        Measured write to write, so neither where the trial's end falls between two writes nor the final flush
        moves it (counting writes over the trial's length does: a 3-interval trial has 3 or 4 of them).
        """
        rates = {}
        for pid, times in self.times.items():
            steady = [t for t in times if t < before]
            if len(steady) >= 2 and steady[-1] > steady[0]:
                rates[pid] = (len(steady) - 1) * CHECKPOINT_INTERVAL / (steady[-1] - steady[0])
        return rates


class CpuSplit:
    """A trial's CPU time split into the probed pipeline, garbage collection and the rest (the source path).

    :meth:`probed` wraps the pipeline after the source; ``gc.callbacks`` time every collection, and one that ran
    inside the pipeline is moved from the pipeline's time to ``gc_s`` (so nothing is counted twice). Only what
    runs between :meth:`start` and :meth:`stop` counts.
    """

    def __init__(self) -> None:
        self.pipeline_s = 0.0
        self.gc_s = 0.0
        self.collections = 0
        self._gc_inside = 0.0
        self._inside = False
        self._on = False
        self._began = 0.0
        self._gc_began = 0.0

    def start(self) -> None:
        now = time.process_time()
        self._on = True
        if self._inside:  # (called from within the pipeline: only the rest of this batch's time counts)
            self._began = now

    def stop(self) -> None:
        now = time.process_time()
        if self._on and self._inside:
            self.pipeline_s += now - self._began
        self._on = False

    def _collected(self, phase: str, _: dict[str, Any]) -> None:
        if phase == "start":
            self._gc_began = time.process_time()
        elif self._on and self._gc_began:
            took = time.process_time() - self._gc_began
            self.gc_s += took
            self.collections += 1
            if self._inside:
                self._gc_inside += took

    def __enter__(self) -> CpuSplit:
        gc.callbacks.append(self._collected)
        return self

    def __exit__(self, *_: object) -> None:
        gc.callbacks.remove(self._collected)

    def probed(self, stage: Any) -> Any:
        """``stage`` with the CPU time it spends on each batch added to the pipeline's time."""
        from reactivex import operators as ops

        def enter(_: Any) -> None:
            self._inside = True
            self._began = time.process_time()

        def leave(_: Any) -> None:
            if self._inside:
                self._inside = False
                if self._on:
                    self.pipeline_s += time.process_time() - self._began

        return lambda source: source.pipe(ops.do_action(enter), stage, ops.do_action(leave))

    def figures(self, cpu_s: float) -> dict[str, float]:
        """``pipeline_cpu_s`` (GC left out), ``gc_s`` and ``source_cpu_s`` of a trial that took ``cpu_s``."""
        pipeline = self.pipeline_s - self._gc_inside
        return {"pipeline_cpu_s": pipeline, "gc_s": self.gc_s, "gc_collections": self.collections,
                "source_cpu_s": max(0.0, cpu_s - pipeline - self.gc_s)}


def _probed(stage: Any, spent: list[float]) -> Any:
    """``stage`` with the CPU time it spends on each batch added to ``spent[0]`` (the same probes on both sides).

    Both sides' stages are synchronous, so the batch's time from entering the stage to leaving it is the
    stage's own work: the cost of the count without what the pipeline around it does the same on both sides.
    """
    from reactivex import operators as ops

    began = [0.0]

    def enter(_: Any) -> None:
        began[0] = time.process_time()

    def leave(_: Any) -> None:
        spent[0] += time.process_time() - began[0]

    return lambda source: source.pipe(ops.do_action(enter), stage, ops.do_action(leave))


def _plain_counts() -> Any:
    """The stateless baseline: per (partition, device, window) counts in a dict, closed windows dropped."""
    from reactivex import operators as ops

    open_: dict[str, dict[tuple[str, float], int]] = collections.defaultdict(dict)
    stream_time: dict[str, float] = {}

    def count(batch: Any) -> Any:
        counts, now = open_[batch.partition_id], stream_time.get(batch.partition_id, float("-inf"))
        for event in batch:
            device, at = event.properties["d"], event.properties["t"]
            cell = (device, at // WINDOW * WINDOW)
            if cell[1] + WINDOW > now - GRACE:
                counts[cell] = counts.get(cell, 0) + 1
            now = max(now, at)
        for cell in [c for c in counts if c[1] + WINDOW <= now - GRACE]:
            del counts[cell]
        stream_time[batch.partition_id] = now
        return batch

    return ops.map(count)


def _window(aggregate: Any = None, size: float = WINDOW) -> Any:
    from rxhubs import operators as hops
    from rxhubs import windows as hw

    return hops.window(
        "per_device", key=lambda e: e.properties["d"], windows=hw.tumbling(size),
        aggregate=aggregate or hw.count(), clock=hw.EventTime(lambda e: e.properties["t"]), grace=GRACE,
    )


async def _state_sizes(store: InMemoryCheckpointStore, hub: Any, partitions: list[str]) -> dict[str, int]:
    """The bytes of state committed per partition, read as a new owner would (claim, then fence)."""
    sizes = {}
    records = {o.partition_id: o for o in await store.list_ownership(
        hub.fully_qualified_namespace, hub.eventhub_name, "$Default")}
    for pid in partitions:
        record = records[pid]
        mine = Ownership(record.fully_qualified_namespace, record.eventhub_name, record.consumer_group, pid,
                         "reader", etag=record.etag)
        [claimed] = await store.claim_ownership([mine])
        _, state = await store.fence_with_state(claimed)
        sizes[pid] = len(state or b"")
    return sizes


async def throughput(args: argparse.Namespace) -> dict[str, Any]:
    from reactivex import operators as ops

    import rxhubs
    from rxhubs import operators as hops
    from rxhubs._shutdown import Shutdown

    store = CountingStore()
    hub = rxhubs.EventHub.from_connection_string(os.environ["RXHUBS_BENCH_EVENTHUB"])
    counted, first, last, cpu = 0, 0.0, 0.0, [0.0, 0.0]
    done, stop = asyncio.Event(), Shutdown()

    def clock(batch: rxhubs.EventBatch) -> None:
        nonlocal counted, first, last
        if done.is_set():
            return  # (batches after the last event, e.g. empty ones, are not part of the trial)
        last = time.perf_counter()
        cpu[1] = time.process_time()
        if not first:
            first, cpu[0] = last, cpu[1]
            split.start()  # (the first batch's pipeline time before this point is left out, as from cpu_s)
        counted += len(batch.events)
        if counted >= args.events:
            split.stop()
            done.set()

    spent = [0.0]
    split = CpuSplit()
    stage = _probed(_window() if args.mode == "state" else _plain_counts(), spent)
    pipeline: Any = rxhubs.consume(hub, "$Default", store, **TUNED).pipe(split.probed(
        lambda batches: batches.pipe(
            stage, ops.do_action(clock), hops.checkpoint(store, max_interval=CHECKPOINT_INTERVAL)
        )
    ))
    with split:
        runner = asyncio.create_task(rxhubs.arun(pipeline, shutdown=stop, signals=()))
        await done.wait()
    stopping = time.monotonic()
    stop.request()
    await runner
    partitions = sorted(await hub.get_partition_ids())
    sizes = await _state_sizes(store, hub, partitions) if args.mode == "state" else {}
    await hub.close()
    seconds = last - first
    return {"events": counted, "seconds": seconds, "events_per_s": counted / seconds if seconds else 0.0,
            "cpu_s": cpu[1] - cpu[0], "stage_cpu_s": spent[0], **split.figures(cpu[1] - cpu[0]),
            "writes": dict(store.writes), "intervals": seconds / CHECKPOINT_INTERVAL,
            "write_rates": store.rates(stopping), "state_bytes": sizes}


async def _read_until(hub: Any, store: Any, owner: str, stage: Any, seen: int) -> float:
    """Run one owner until it has processed ``seen`` events in total; seconds from its start to the last."""
    from reactivex import operators as ops

    import rxhubs
    from rxhubs import operators as hops
    from rxhubs._shutdown import Shutdown

    count, done, stop, began = 0, asyncio.Event(), Shutdown(), time.perf_counter()
    at = 0.0

    def clock(batch: rxhubs.EventBatch) -> None:
        nonlocal count, at
        count += len(batch.events)
        if count >= seen and not done.is_set():
            at = time.perf_counter()
            done.set()

    pipeline: Any = rxhubs.consume(hub, "$Default", store, owner_id=owner, load_balancing_interval=0.5).pipe(
        stage, ops.do_action(clock), hops.checkpoint(store, max_interval=0.2)
    )
    runner = asyncio.create_task(rxhubs.arun(pipeline, shutdown=stop, signals=()))
    await done.wait()
    stop.request()
    await runner
    return at - began


async def handover(args: argparse.Namespace) -> dict[str, Any]:
    import rxhubs
    from rxhubs import windows as hw

    conn = os.environ["RXHUBS_BENCH_HANDOVER"]
    hub = rxhubs.EventHub.from_connection_string(conn)
    store = CountingStore()

    def stage() -> Any:  # one hour-long window per key, each holding its last 1 KiB pad: no window closes
        pad = hw.fold("", lambda _, e: e.body_as_str())
        return _window(pad, 3600.0) if args.mode == "state" else _plain_counts()

    held = (await hub.get_partition_properties("0")).last_enqueued_sequence_number + 1
    await _read_until(hub, store, "a", stage(), held)
    from azure.eventhub import EventData
    from azure.eventhub.aio import EventHubProducerClient

    async with EventHubProducerClient.from_connection_string(conn) as producer:
        batch = await producer.create_batch(partition_id="0")
        probe = EventData("")
        probe.properties = {"d": "probe", "t": 1.0}
        batch.add(probe)
        await producer.send_batch(batch)
    seconds = await _read_until(hub, store, "b", stage(), 1)
    sizes = await _state_sizes(store, hub, ["0"]) if args.mode == "state" else {"0": 0}
    await hub.close()
    return {"handover_s": seconds, "state_bytes": sizes["0"]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("trial", choices=["throughput", "handover"])
    parser.add_argument("--mode", choices=["state", "plain"], required=True)
    parser.add_argument("--events", type=int, default=0)
    args = parser.parse_args()
    trial = throughput if args.trial == "throughput" else handover
    print(json.dumps(asyncio.run(trial(args))), flush=True)


if __name__ == "__main__":
    main()
