"""Scenario ``checkpoints``: store writes per partition per checkpoint interval, whatever the event rate.

In virtual time (``TestScheduler``), one :class:`~rxhubs.testing.InMemoryEventHub` of 4 partitions receives
1k, 10k and 50k events/s for 20 s, sent as producer batches of 100 events per partition. Two consumer
groups read it with :func:`rxhubs.consume` (batches of up to 300 events, the SDK's default):

* **rxhubs**: ``hops.checkpoint(store, max_interval=5.0)``;
* **baseline**: the official processor's habit, ``partition_context.update_checkpoint(events[-1])`` in
  ``on_event_batch``: one write per batch.

The figures are writes per partition per 5-second interval, averaged over the run, and for rxhubs the
most writes of one partition within any 5-second window (target: at most 1). Each side has its own
in-memory store; both end with the same checkpoints.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from reactivex import operators as ops
from reactivex.testing import TestScheduler

from rxhubs._batch import EventBatch
from rxhubs._models import Checkpoint, Ownership
from rxhubs.balancing import consume
from rxhubs.bench._report import figure, sized
from rxhubs.operators import checkpoint
from rxhubs.stores import InMemoryCheckpointStore
from rxhubs.testing import InMemoryEventHub

VIRTUAL_TIME = True  # TestScheduler only: figures are deterministic, CI requires every `met`
RATES = (1_000, 10_000, 50_000)
PARTITIONS = 4
INTERVAL = 5.0
PRODUCER_BATCH = 100
BASELINE = "checkpoint per batch (the official processor's on_event_batch habit)"


def _measure(rate: int, seconds: float) -> tuple[float, float, bool, int]:
    scheduler = TestScheduler()
    hub = InMemoryEventHub(PARTITIONS, consumer_groups=["baseline"], clock=lambda: scheduler.now)
    ours, theirs = _Recording(scheduler), InMemoryCheckpointStore()
    bodies = [b"{}"] * PRODUCER_BATCH
    tick = PRODUCER_BATCH * PARTITIONS / rate

    def send(*_: Any) -> None:
        for pid in hub.partition_ids:
            hub.send(bodies, partition_id=pid)

    for k in range(int(seconds / tick)):
        scheduler.schedule_absolute(k * tick, send)

    def per_batch(batch: EventBatch) -> None:
        last = batch.last_event
        if last is not None:
            theirs.observe_update_checkpoint(Checkpoint.of(batch.context, last)).subscribe(scheduler=scheduler)

    options: dict[str, Any] = {"max_batch_size": 300, "max_wait": 1.0, "load_balancing_interval": 10.0}
    consume(hub, "$Default", ours, owner_id="rxhubs", **options).pipe(
        checkpoint(ours, max_interval=INTERVAL)
    ).subscribe(scheduler=scheduler)
    consume(hub, "baseline", theirs, owner_id="baseline", **options).pipe(ops.do_action(per_batch)).subscribe(
        scheduler=scheduler
    )
    scheduler.advance_to(seconds + INTERVAL)
    intervals = (seconds + INTERVAL) / INTERVAL
    mine = ours.calls["update_checkpoint"] / PARTITIONS / intervals
    base = theirs.calls["update_checkpoint"] / PARTITIONS / intervals
    if not ours.writes or len(ours.writes) != ours.calls["update_checkpoint"]:
        raise RuntimeError(
            f"the recording store saw {len(ours.writes)} checkpoint writes, the store counted"
            f" {ours.calls['update_checkpoint']}: the bench no longer sees the operator's writes"
        )
    window = 0
    for pid in hub.partition_ids:
        times = [t for t, p in ours.writes if p == pid]
        window = max([window, *(sum(1 for u in times if t <= u < t + INTERVAL) for t in times)])
    ns, name = hub.fully_qualified_namespace, hub.eventhub_name
    final: list[list[Checkpoint]] = [[], []]
    ours.observe_list_checkpoints(ns, name, "$Default").subscribe(final[0].extend, scheduler=scheduler)
    theirs.observe_list_checkpoints(ns, name, "baseline").subscribe(final[1].extend, scheduler=scheduler)
    same = sorted(c.sequence_number for c in final[0]) == sorted(c.sequence_number for c in final[1])
    return mine, base, same, window


class _Recording(InMemoryCheckpointStore):
    """The in-memory store, noting when each checkpoint write was made (virtual time), fenced or not."""

    def __init__(self, scheduler: TestScheduler) -> None:
        super().__init__()
        self.scheduler = scheduler
        self.writes: list[tuple[float, str]] = []

    async def update_checkpoint(self, checkpoint: Checkpoint) -> None:
        # The checkpoint operator calls the typed verb; recording here counts every write it really makes.
        self.writes.append((self.scheduler.clock, checkpoint.partition_id))
        await super().update_checkpoint(checkpoint)

    async def update_checkpoint_fenced(self, checkpoint: Checkpoint, ownership: Ownership) -> None:
        # what the operator calls on a fenced store (this one is): the same write, guarded by the owner's period
        self.writes.append((self.scheduler.clock, checkpoint.partition_id))
        await super().update_checkpoint_fenced(checkpoint, ownership)

    async def update_checkpoints(self, checkpoints: Iterable[Checkpoint]) -> None:
        for one in checkpoints:
            await self.update_checkpoint(one)


def run(args: Any) -> list[dict[str, Any]]:
    """Run the scenario (``args.quick``: 10 s instead of 20 s; ``args.smoke``: 5 s, without the 50k rate)."""
    seconds = sized(args, 20.0, 10.0, 5.0)  # >= 5 s: in shorter runs the first and last writes alone exceed 1/interval
    quiet = logging.getLogger("rxhubs")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    figures = []
    try:
        for rate in sized(args, RATES, RATES, RATES[:2]):
            mine, base, same, window = _measure(rate, seconds)
            figures.append(
                figure(
                    f"checkpoints {rate} events/s",
                    "max_writes_per_partition_in_any_interval",
                    f"writes/partition/{INTERVAL:g}s",
                    window,
                    None,
                    None,
                    "<= 1 per interval",
                    met=window <= 1,
                )
            )
            figures.append(
                figure(
                    f"checkpoints {rate} events/s",
                    "writes_per_partition_per_interval",
                    f"writes/partition/{INTERVAL:g}s",
                    round(mine, 3),
                    round(base, 3),
                    BASELINE,
                    "<= 1 per interval",
                    higher_is_better=False,
                    met=mine <= 1.0 + 1e-9 and window <= 1 and same,
                    same_final_checkpoints=same,
                )
            )
    finally:
        quiet.setLevel(level)
    return figures
