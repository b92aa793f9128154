"""hops.window with the checkpoint committing its state, under real balancing in virtual time: a handover."""

from __future__ import annotations

from collections import Counter
from typing import Any

from reactivex.testing import TestScheduler

import rxhubs
from rxhubs import operators as hops
from rxhubs import windows as hw
from rxhubs.stores import InMemoryCheckpointStore
from rxhubs.testing import InMemoryEventHub


def consumer(hub: InMemoryEventHub, store: InMemoryCheckpointStore, owner: str, results: list[Any]) -> Any:
    def keep(batch: Any) -> None:
        results.extend((batch.partition_id, r.key, int(r.start.timestamp()), r.value, owner) for r in batch.results)

    return rxhubs.consume(
        hub, "$Default", store, owner_id=owner, load_balancing_interval=10.0, ownership_expiration=30.0, max_wait=1.0,
    ).pipe(
        hops.window("per_device", key=lambda e: e.body.decode(), windows=hw.tumbling(10), aggregate=hw.count()),
        hops.process(keep, blocking=False),
        hops.checkpoint(store, max_interval=30.0),
    )


def test_a_handover_moves_open_windows_to_the_new_owner_and_each_window_is_emitted_once_with_its_true_count() -> None:
    scheduler = TestScheduler()
    hub = InMemoryEventHub(partition_count=2, clock=lambda: scheduler.now)
    store = InMemoryCheckpointStore(clock=lambda: scheduler.now.timestamp())
    sent: Counter[tuple[str, str, int]] = Counter()
    devices = ["d1", "d2", "d3"]

    def send(second: int) -> None:
        for pid in "01":
            dev = devices[(second + int(pid)) % 3]
            hub.send([dev.encode()], partition_id=pid)
            sent[(pid, dev, second // 10 * 10)] += 1

    for second in range(1, 100):
        scheduler.schedule_absolute(second + 0.5, lambda *_, s=second: send(s))
    results: list[Any] = []
    consumer(hub, store, "a", results).subscribe(scheduler=scheduler)
    scheduler.schedule_absolute(35.0, lambda *_: consumer(hub, store, "b", results).subscribe(scheduler=scheduler))
    scheduler.advance_to(130.0)

    owners = {owner for *_, owner in results}
    assert owners == {"a", "b"}  # b took a partition over and closed windows there
    moved = {pid for pid, *_, owner in results if owner == "b"}
    assert len(moved) == 1 and {pid for pid, *_, o in results if o == "a"} == {"0", "1"}
    cells = [(pid, key, start) for pid, key, start, _, _ in results]
    assert len(cells) == len(set(cells))  # no window emitted twice: the release flushed the state with the position
    closed = {cell: n for cell, n in sent.items() if cell[2] + 10 <= 99}  # the last event (99 s) closed these
    assert {(pid, key, start): n for pid, key, start, n, _ in results} == closed
