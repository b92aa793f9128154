"""Failures stay in their partition; hooks are awaited and told what failed (virtual time, in-memory hub)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from reactivex import operators as ops
from reactivex.testing import TestScheduler

import rxhubs
from rxhubs import CloseReason, EventBatch
from rxhubs import operators as hops
from rxhubs.errors import TransportError
from rxhubs.stores import InMemoryCheckpointStore
from rxhubs.testing import InMemoryEventHub, sleep
from tests.balancing.kit import GROUP

FAST = {"owner_id": "me", "load_balancing_interval": 1.0, "ownership_expiration": 3.0}


def owners(hub: InMemoryEventHub, store: InMemoryCheckpointStore) -> dict[str, str]:
    return {o.partition_id: o.owner_id for o in store.peek(hub.fully_qualified_namespace, hub.eventhub_name, GROUP)[0]}


def checkpoints(hub: InMemoryEventHub, store: InMemoryCheckpointStore) -> dict[str, int]:
    cps = store.peek(hub.fully_qualified_namespace, hub.eventhub_name, GROUP)[1]
    return {c.partition_id: c.sequence_number for c in cps}


def test_a_per_partition_pipeline_error_stops_only_that_partition() -> None:
    hub = InMemoryEventHub(partition_count=3)
    for pid in hub.partition_ids:
        hub.send([b'{"n": 1}', b'{"n": 2}'], partition_id=pid)
    hub.send([b"not json"], partition_id="1")
    hub.send([b'{"n": 3}'], partition_id="1")
    store = InMemoryCheckpointStore()
    scheduler = TestScheduler()
    errors: list[tuple[str, str, str]] = []
    seen: list[tuple[str, int]] = []

    def parse(batch: EventBatch) -> EventBatch:
        for event in batch:
            event.body_as_json()
        return batch

    def on_error(context: rxhubs.ErrorContext, error: Exception) -> None:
        errors.append((context.partition_id, context.operation, type(error).__name__))

    done: list[str] = []
    rxhubs.consume(
        hub,
        GROUP,
        store,
        max_batch_size=1,
        on_partition_error=on_error,
        pipeline=lambda stream: stream.pipe(ops.map(parse), hops.checkpoint(store, max_interval=0.0)),
        **FAST,
    ).subscribe(
        lambda b: seen.append((b.partition_id, b.first_sequence_number or 0)),
        on_error=lambda e: done.append(f"error {e!r}"),
        scheduler=scheduler,
    )
    scheduler.advance_to(10.0)
    assert done == []  # the merged pipeline did not end
    assert {(p, s) for p, s in seen if p != "1"} == {("0", 0), ("0", 1), ("2", 0), ("2", 1)}
    assert checkpoints(hub, store) == {"0": 1, "1": 1, "2": 1}  # 1 stops before the malformed event (seq 2)
    assert ("1", "process", "JSONDecodeError") in errors
    assert ("1", 3) not in seen  # nothing after the poison passed
    assert len([e for e in errors if e[0] == "1"]) >= 2  # claimed again after a backoff, and failed again


def test_an_error_after_the_merge_ends_the_pipeline_but_every_partition_is_flushed_and_released() -> None:
    hub = InMemoryEventHub(partition_count=4)
    for pid in hub.partition_ids:
        hub.send([b"ok"] * 5, partition_id=pid)
    hub.send([b"boom"], partition_id="2")
    store = InMemoryCheckpointStore()

    def check(batch: EventBatch) -> EventBatch:
        if any(e.body == b"boom" for e in batch):
            raise ValueError("bad record in partition 2")
        return batch

    passed: dict[str, int] = {}

    def note(batch: EventBatch) -> None:
        passed[batch.partition_id] = batch.last_sequence_number or 0

    pipeline = rxhubs.consume(hub, GROUP, store, max_batch_size=3, **FAST).pipe(
        ops.do_action(note), hops.checkpoint(store, max_interval=60.0), ops.map(check)
    )
    with pytest.raises(ValueError, match="bad record in partition 2"):
        rxhubs.run(pipeline, signals=())
    assert set(owners(hub, store).values()) == {""}  # released before run() raised
    # the first write of each partition is at once, the rest only by the final flush (60 s interval)
    assert checkpoints(hub, store) == passed
    assert any(seq > 2 for seq in passed.values())


def test_async_hooks_are_awaited_initialize_before_reading_close_before_release() -> None:
    hub = InMemoryEventHub(partition_count=1)
    hub.send([b"x"], partition_id="0")
    store = InMemoryCheckpointStore()
    scheduler = TestScheduler()
    log: list[tuple[float, str]] = []

    async def initialize(context: rxhubs.PartitionContext) -> None:
        log.append((scheduler.clock, "init started"))
        await sleep(2.0)
        log.append((scheduler.clock, "init done"))

    async def close(context: rxhubs.PartitionContext, reason: CloseReason) -> None:
        await sleep(5.0)
        log.append((scheduler.clock, f"closed {reason.value}, owner {owners(hub, store)['0']!r}"))

    from rxhubs._shutdown import Shutdown, shutdown_scope

    stop = Shutdown()
    with shutdown_scope(stop):
        rxhubs.consume(
            hub, GROUP, store, on_partition_initialize=initialize, on_partition_close=close, **FAST
        ).subscribe(lambda b: log.append((scheduler.clock, "batch")), scheduler=scheduler)
    scheduler.schedule_absolute(10.0, lambda *_: stop.request())
    scheduler.advance_to(30.0)
    assert log == [
        (0.0, "init started"),
        (2.0, "init done"),
        (2.0, "batch"),
        (15.0, "closed shutdown, owner 'me'"),  # still owned while the close hook ran
    ]
    assert owners(hub, store)["0"] == ""


def test_a_failing_initialize_releases_the_partition_without_reading_it() -> None:
    hub = InMemoryEventHub(partition_count=2)
    hub.send([b"x"], partition_id="0")
    hub.send([b"y"], partition_id="1")
    scheduler = TestScheduler()
    errors: list[tuple[str, str]] = []
    seen: list[str] = []

    def initialize(context: rxhubs.PartitionContext) -> None:
        if context.partition_id == "0":
            raise RuntimeError("cannot open the sink for partition 0")

    rxhubs.consume(
        hub,
        GROUP,
        InMemoryCheckpointStore(),
        on_partition_initialize=initialize,
        on_partition_error=lambda c, e: errors.append((c.partition_id, c.operation)),
        **FAST,
    ).subscribe(lambda b: seen.append(b.partition_id), scheduler=scheduler)
    scheduler.advance_to(1.5)
    assert seen == ["1"]
    assert errors[0] == ("0", "initialize")


def test_store_and_receive_failures_reach_the_error_hook_with_their_operation() -> None:
    hub = InMemoryEventHub(partition_count=1)
    hub.send([b"x"], partition_id="0")
    store = InMemoryCheckpointStore()
    store.fail("list_ownership", times=1)
    hub.inject_error("0", TransportError("link detached"))
    scheduler = TestScheduler()
    errors: list[tuple[str, str, str]] = []

    def on_error(context: rxhubs.ErrorContext, error: Exception) -> None:
        errors.append((context.partition_id, context.operation, str(error)))

    seen: list[int] = []
    rxhubs.consume(hub, GROUP, store, on_partition_error=on_error, **FAST).subscribe(
        lambda b: seen.append(len(b)), scheduler=scheduler
    )
    scheduler.advance_to(5.0)
    assert ("", "list", "injected failure of list_ownership (store.fail)") in errors
    assert ("0", "receive", "link detached") in errors
    assert seen == [1]  # both retried: the event arrived


def test_checkpoint_failures_are_reported_and_then_stop_only_that_partition() -> None:
    hub = InMemoryEventHub(partition_count=2)
    hub.send([b"x"], partition_id="0")  # partition 1 stays empty until both injected failures were spent on 0
    store = InMemoryCheckpointStore()
    store.fail("update_checkpoint", times=2)  # partition 0's write and its one retry
    scheduler = TestScheduler()
    for k in range(8):
        scheduler.schedule_absolute(0.5 + k, lambda *_, k=k: hub.send([b"y%d" % k], partition_id="1"))
    errors: list[tuple[str, str]] = []
    closed: list[tuple[float, str, str]] = []
    seen: list[tuple[float, str, int]] = []
    rxhubs.consume(
        hub,
        GROUP,
        store,
        on_partition_error=lambda c, e: errors.append((c.partition_id, c.operation)),
        on_partition_close=lambda c, r: closed.append((scheduler.clock, c.partition_id, r.value)),
        **FAST,
    ).pipe(
        ops.do_action(lambda b: seen.append((scheduler.clock, b.partition_id, b.last_sequence_number or 0))),
        hops.checkpoint(store, max_interval=0.0, retry=rxhubs.Backoff(initial=0.1, max_retries=1)),
    ).subscribe(scheduler=scheduler)
    scheduler.advance_to(10.0)
    assert errors == [("0", "checkpoint"), ("0", "checkpoint")]  # reported, retried once, then given up
    assert [(pid, reason) for _, pid, reason in closed] == [("0", "ownership_lost")]  # partition 0 stopped ...
    stopped_at = closed[0][0]
    reads_of_0 = [(t, s) for t, pid, s in seen if pid == "0"]
    assert [s for _, s in reads_of_0] == [0, 0]  # ... and was read again later, from no checkpoint
    ones = [(t, s) for t, pid, s in seen if pid == "1"]
    # partition 1 went on: each event processed when it was sent, in order, also while 0 was stopped
    assert ones == [(pytest.approx(0.5 + k), k) for k in range(8)]
    assert any(stopped_at < t < reads_of_0[1][0] for t, _ in ones)
    assert checkpoints(hub, store) == {"0": 0, "1": 7}


def test_emit_empty_and_no_last_enqueued_tracking() -> None:
    hub = InMemoryEventHub(partition_count=1)
    scheduler = TestScheduler()
    batches: list[EventBatch] = []
    rxhubs.consume(
        hub, GROUP, InMemoryCheckpointStore(), emit_empty=True, max_wait=2.0,
        track_last_enqueued_event_properties=False, **FAST,
    ).subscribe(batches.append, scheduler=scheduler)
    scheduler.schedule_absolute(3.0, lambda *_: hub.send([b"x"], partition_id="0"))
    scheduler.advance_to(5.0)
    assert [len(b) for b in batches][:3] == [0, 1, 0]
    assert all(b.last_enqueued is None for b in batches)


def test_last_enqueued_is_tracked_by_default_in_memory() -> None:
    hub = InMemoryEventHub(partition_count=1)
    hub.send([b"x", b"y"], partition_id="0")
    scheduler = TestScheduler()
    batches: list[EventBatch] = []
    rxhubs.consume(hub, GROUP, InMemoryCheckpointStore(), max_batch_size=1, **FAST).subscribe(
        batches.append, scheduler=scheduler
    )
    scheduler.advance_to(1.0)
    assert [b.last_enqueued.sequence_number for b in batches if b.last_enqueued] == [1, 1]


async def test_run_waits_for_releases_when_the_pipeline_fails_inside_a_loop() -> None:
    hub = InMemoryEventHub(partition_count=2)
    hub.send([b"x"], partition_id="0")
    store = InMemoryCheckpointStore()

    def fail(_: Any) -> Any:
        raise LookupError("no such customer")

    with pytest.raises(LookupError):
        await rxhubs.arun(rxhubs.consume(hub, GROUP, store, **FAST).pipe(ops.map(fail)), signals=())
    assert set(owners(hub, store).values()) == {""}
    await asyncio.sleep(0)
