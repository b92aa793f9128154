"""Skewed clocks and a paused owner, in virtual time: two consumers, each on a scheduler of its own.

Each consumer runs on its own ``TestScheduler``: its clock is its own, and so are the claims the in-memory
store stamps for it (the store stamps with the driving scheduler's clock), as two machines' clocks would be.
B's clock runs a third of the expiry ahead of A's. A is then paused (its scheduler not advanced) for longer
than the expiry, and resumed. After every step the store is read:

* no partition's checkpoint ever moves back, and A closes the partitions B took as lost;
* outside A's pause, no partition is read by both consumers at once (the skew does not make B claim early);
* every event sent is processed at least once.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from reactivex import operators as ops
from reactivex.testing import TestScheduler

import rxhubs
from rxhubs import CloseReason, PartitionStream
from rxhubs import operators as hops
from rxhubs.errors import OwnershipLostError
from rxhubs.stores import InMemoryCheckpointStore
from rxhubs.testing import InMemoryEventHub

INTERVAL, EXPIRY = 1.0, 3.0
SKEW = EXPIRY / 3
STEP = 0.05


class Member:
    """One consumer on its own scheduler: its open partition streams, what it processed, its closes and errors."""

    def __init__(self, name: str, hub: InMemoryEventHub, store: InMemoryCheckpointStore, start: float) -> None:
        self.name = name
        self.scheduler = TestScheduler()
        self.scheduler.advance_to(start)
        self.streams: dict[str, PartitionStream] = {}
        self.processed: list[tuple[str, int]] = []
        self.closed: list[tuple[str, CloseReason]] = []
        self.lost: list[tuple[str, str]] = []

        def on_error(context: Any, error: Exception) -> None:
            if isinstance(error, OwnershipLostError):
                self.lost.append((context.partition_id, context.operation))

        def pipeline(stream: Any) -> Any:
            return stream.pipe(
                ops.do_action(lambda b: self.processed.extend((b.partition_id, e.sequence_number) for e in b)),
                hops.checkpoint(store, max_interval=0.5),
            )

        source = rxhubs.partitions(
            hub,
            "$Default",
            store,
            owner_id=name,
            load_balancing_interval=INTERVAL,
            ownership_expiration=EXPIRY,
            max_wait=0.1,
            on_partition_close=lambda context, reason: self.closed.append((context.partition_id, reason)),
            on_partition_error=on_error,
        )
        source.pipe(ops.flat_map(lambda stream: self._read(stream, pipeline))).subscribe(scheduler=self.scheduler)

    def _read(self, stream: PartitionStream, pipeline: Any) -> Any:
        self.streams[stream.partition_id] = stream
        return pipeline(stream)

    def reading(self) -> set[str]:
        return {pid for pid, stream in self.streams.items() if not stream.completed}


def test_a_clock_a_third_of_the_expiry_ahead_and_a_paused_owner_never_move_a_checkpoint_back() -> None:
    hub = InMemoryEventHub(partition_count=4)
    store = InMemoryCheckpointStore()
    a = Member("a", hub, store, 0.0)
    b = Member("b", hub, store, SKEW)  # B's clock runs ahead of A's
    seen: dict[str, list[int]] = defaultdict(list)
    overlaps: list[tuple[float, set[str]]] = []
    pause = (12.0, 12.0 + 2 * EXPIRY)
    sent: set[tuple[str, int]] = set()
    t = 0.0
    while t < 30.0:
        t = round(t + STEP, 2)
        if t < 24.0 and round(t * 100) % 10 == 0:
            for pid in hub.partition_ids:
                sent.update((pid, e.sequence_number) for e in hub.send([b"x"] * 3, partition_id=pid))
        paused = pause[0] <= t < pause[1]
        if not paused:
            a.scheduler.advance_to(t)
        b.scheduler.advance_to(t + SKEW)
        _, checkpoints = store.peek(hub.fully_qualified_namespace, hub.eventhub_name, "$Default")
        for c in checkpoints:
            if not seen[c.partition_id] or seen[c.partition_id][-1] != c.sequence_number:
                seen[c.partition_id].append(c.sequence_number)
        both = a.reading() & b.reading()
        if both and not paused:
            overlaps.append((t, both))

    # the pause was a real takeover: A had partitions before it and lost them
    assert {pid for pid, _ in a.closed}, a.closed
    for pid, values in seen.items():
        assert values == sorted(values), (pid, values)
    # A closed what B took during its pause as lost (and reported no error twice)
    assert all(reason is CloseReason.OWNERSHIP_LOST for _, reason in a.closed)
    assert len(a.lost) == len(set(a.lost)), a.lost
    assert overlaps == [], overlaps[:5]
    assert sent <= set(a.processed) | set(b.processed), len(sent - set(a.processed) - set(b.processed))
