"""hops.window through hops.checkpoint and a handover, in virtual time: the windows a partition had open when it
moved are closed by the next owner with every event counted once (the state travelled with the checkpoint)."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from typing import Any

from reactivex import operators as ops
from reactivex.testing import TestScheduler

import rxhubs
from rxhubs import operators as hops
from rxhubs import windows as hw
from rxhubs.stores import InMemoryCheckpointStore
from rxhubs.testing import InMemoryEventHub


def _device(event: Any) -> str:
    return str(event.body.decode().split(":")[0])


def _time(event: Any) -> float:
    return float(event.body.decode().split(":")[1])


def test_open_windows_move_with_the_partition_and_close_exactly_once() -> None:
    hub = InMemoryEventHub(partition_count=2)
    store, scheduler = InMemoryCheckpointStore(), TestScheduler()
    results: dict[str, list[tuple[str, str, float, int]]] = {"a": [], "b": []}
    restored: list[str] = []

    def consumer(owner: str) -> None:
        def collect(batch: Any) -> None:
            if batch._session is not None and batch._session.restored_state and batch.partition_id not in restored:
                restored.append(batch.partition_id)
            for r in batch.results:
                results[owner].append((batch.partition_id, r.key, r.start.timestamp(), r.value))

        rxhubs.consume(
            hub, "$Default", store, owner_id=owner, load_balancing_interval=10.0, ownership_expiration=30.0,
            max_wait=1.0,
        ).pipe(
            hops.window("per_device", key=_device, windows=hw.tumbling(dt.timedelta(seconds=60)),
                        aggregate=hw.count(), clock=hw.EventTime(_time)),
            ops.do_action(collect),
            hops.checkpoint(store, max_interval=60.0),  # only the first write and the flush before the handover
        ).subscribe(scheduler=scheduler)

    consumer("a")
    sent: list[tuple[str, str, float]] = []

    def send(at: float, bodies: list[str]) -> None:
        def go(*_: Any) -> None:
            for pid in "01":
                hub.send(bodies, partition_id=pid)
                sent.extend((pid, b.split(":")[0], float(b.split(":")[1]) // 60 * 60) for b in bodies)

        scheduler.schedule_absolute(at, go)

    send(1.0, ["d1:5", "d2:10", "d1:20"])
    send(3.0, ["d1:40", "d2:59"])
    scheduler.schedule_absolute(5.0, lambda *_: consumer("b"))  # b joins: a hands one partition over
    send(40.0, ["d1:61", "d2:70"])  # closes [0, 60) everywhere
    send(42.0, ["d1:130"])  # closes [60, 120)
    scheduler.advance_to(50.0)

    assert len(restored) == 1  # b restored the moved partition's open windows
    emitted = results["a"] + results["b"]
    truth = Counter(sent)
    expected = sorted((pid, dev, start, n) for (pid, dev, start), n in truth.items() if start < 120)
    assert sorted(emitted) == expected  # every closed window exactly once, with every event counted once
    moved = restored[0]
    assert {r[0] for r in results["b"]} == {moved} and (moved, "d1", 0.0, 3) in results["b"]
