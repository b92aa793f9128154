"""hops.process in virtual time: order per partition, bounded concurrency, retries, poison batches, isolation."""

from __future__ import annotations

import logging
import random
from collections import defaultdict
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from reactivex import operators as ops
from reactivex.testing import TestScheduler

import rxhubs
from rxhubs import EventBatch, PartitionContext
from rxhubs import operators as hops
from rxhubs.errors import ConfigurationError
from rxhubs.sources import Backoff
from rxhubs.stores import InMemoryCheckpointStore
from rxhubs.testing import InMemoryEventHub, marble_test, sleep, symbols
from tests.balancing.kit import GROUP, ProxyStore

FAST = {"load_balancing_interval": 1.0, "ownership_expiration": 3.0}


class Ledger:
    """Work that takes a given time per batch and records when each batch started and finished."""

    def __init__(self, scheduler: TestScheduler, latency: Any) -> None:
        self.scheduler = scheduler
        self.latency = latency
        self.running: dict[str, int] = defaultdict(int)
        self.most_running: dict[str, int] = defaultdict(int)
        self.finished: dict[tuple[str, int], float] = {}  # (partition, last sequence number) -> time

    async def work(self, batch: EventBatch) -> None:
        pid = batch.partition_id
        self.running[pid] += 1
        self.most_running[pid] = max(self.most_running[pid], self.running[pid])
        try:
            await sleep(self.latency(batch))
        finally:
            self.running[pid] -= 1
        for event in batch:
            self.finished[(pid, event.sequence_number)] = self.scheduler.clock


def consumer(hub: InMemoryEventHub, store: Any, **options: Any) -> Any:
    return rxhubs.consume(hub, GROUP, store, owner_id="me", **{**FAST, **options})


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), concurrency=st.integers(1, 6))
def test_order_per_partition_is_kept_and_no_batch_is_emitted_before_its_work(seed: int, concurrency: int) -> None:
    rng = random.Random(seed)
    latencies = {}
    hub = InMemoryEventHub(partition_count=4)
    for pid in hub.partition_ids:
        hub.send([f"{pid}-{n}".encode() for n in range(40)], partition_id=pid)
    scheduler = TestScheduler()
    ledger = Ledger(scheduler, lambda b: latencies.setdefault((b.partition_id, b.first_sequence_number), rng.random()))
    emitted: dict[str, list[int]] = defaultdict(list)
    early: list[tuple[str, int]] = []

    def downstream(batch: EventBatch) -> None:
        for event in batch:
            if ledger.finished.get((batch.partition_id, event.sequence_number), 1e9) > scheduler.clock:
                early.append((batch.partition_id, event.sequence_number))
            emitted[batch.partition_id].append(event.sequence_number)

    store = InMemoryCheckpointStore()
    consumer(hub, store, max_batch_size=3, max_inflight=8).pipe(
        hops.process(ledger.work, concurrency=concurrency)
    ).subscribe(downstream, scheduler=scheduler)
    scheduler.advance_to(60.0)

    assert early == []
    assert {pid: seqs for pid, seqs in emitted.items()} == {pid: list(range(40)) for pid in hub.partition_ids}
    assert max(ledger.most_running.values()) <= concurrency


def test_concurrency_is_reached_and_partitions_do_not_wait_for_each_other() -> None:
    hub = InMemoryEventHub(partition_count=2)
    hub.send([b"x"] * 8, partition_id="0")
    hub.send([b"y"] * 8, partition_id="1")
    scheduler = TestScheduler()
    ledger = Ledger(scheduler, lambda b: 10.0 if b.partition_id == "0" else 1.0)
    done: list[tuple[str, float]] = []
    consumer(hub, InMemoryCheckpointStore(), max_batch_size=1).pipe(
        hops.process(ledger.work, concurrency=4)
    ).subscribe(lambda b: done.append((b.partition_id, scheduler.clock)), scheduler=scheduler)
    scheduler.advance_to(100.0)

    assert ledger.most_running == {"0": 4, "1": 4}
    ones = [t for pid, t in done if pid == "1"]
    zeros = [t for pid, t in done if pid == "0"]
    assert max(ones) < min(zeros)  # the slow partition never held the quick one up
    assert zeros == [10.0] * 4 + [20.0] * 4  # four at a time, in two rounds


def test_held_batches_are_bounded_by_max_inflight() -> None:
    hub = InMemoryEventHub(partition_count=1)
    hub.send([b"x"] * 100, partition_id="0")
    scheduler = TestScheduler()
    ledger = Ledger(scheduler, lambda b: 1.0)
    pulled: list[int] = []
    source = rxhubs.partition_batches(hub, "0", max_batch_size=1, max_inflight=5)
    source.pipe(
        ops.do_action(lambda b: pulled.append(b.first_sequence_number)),
        hops.process(ledger.work, concurrency=2),
    ).subscribe(scheduler=scheduler)
    scheduler.advance_to(0.5)
    assert len(pulled) == 5  # five read ahead and held; nothing more until one is done
    scheduler.advance_to(1.0)
    assert len(pulled) == 7


def test_a_failing_batch_is_retried_in_place_and_reported() -> None:
    hub = InMemoryEventHub(partition_count=2)
    hub.send([b"a", b"b"], partition_id="0")
    hub.send([b"c"], partition_id="1")
    attempts: dict[int, int] = defaultdict(int)
    errors: list[tuple[str, str, str]] = []

    async def flaky(batch: EventBatch) -> None:
        if batch.partition_id == "0":
            attempts[0] += 1
            if attempts[0] < 3:
                raise ConnectionError("database away")

    scheduler = TestScheduler()
    out: list[tuple[str, float]] = []

    def on_error(context: rxhubs.ErrorContext, error: Exception) -> None:
        errors.append((context.partition_id, context.operation, str(error)))

    retrying = hops.process(flaky, retry=Backoff(initial=1.0, max_retries=5))
    consumer(hub, InMemoryCheckpointStore(), on_partition_error=on_error).pipe(retrying).subscribe(
        lambda b: out.append((b.partition_id, scheduler.clock)), scheduler=scheduler
    )
    scheduler.advance_to(10.0)
    assert attempts[0] == 3
    assert sorted(out) == [("0", 3.0), ("1", 0.0)]  # retried after 1 s, then 2 s; partition 1 never waited
    assert errors == [("0", "process", "database away")] * 2


def test_a_poison_batch_goes_to_on_poison_and_the_partition_moves_on() -> None:
    hub = InMemoryEventHub(partition_count=1)
    hub.send([b"ok", b"poison", b"ok"], partition_id="0")
    dead: list[tuple[list[bytes], str]] = []

    def parse(batch: EventBatch) -> None:
        if any(e.body == b"poison" for e in batch):
            raise ValueError("malformed record")

    scheduler = TestScheduler()
    store = InMemoryCheckpointStore()
    out: list[int] = []
    consumer(hub, store, max_batch_size=1).pipe(
        hops.process(
            parse,
            retry=Backoff(initial=0.5, max_retries=2),
            on_poison=lambda b, e: dead.append(([x.body for x in b], str(e))),
        ),
        hops.checkpoint(store, max_interval=0.0),
    ).subscribe(lambda b: out.append(b.first_sequence_number), scheduler=scheduler)
    scheduler.advance_to(10.0)
    assert dead == [([b"poison"], "malformed record")]
    assert out == [0, 1, 2]
    assert [c.sequence_number for c in store.peek(hub.fully_qualified_namespace, hub.eventhub_name, GROUP)[1]] == [2]


def test_a_poison_batch_without_on_poison_stops_only_its_partition_and_nothing_passes_it() -> None:
    with marble_test() as t:
        hub = t.hub({"0": "-a-b-c-d", "1": "-w-x-y-z"})
        store = ProxyStore(InMemoryCheckpointStore(), t.scheduler)
        errors: list[tuple[str, str]] = []
        closed: list[tuple[str, rxhubs.CloseReason]] = []

        def parse(batch: EventBatch) -> None:
            if any(e.body == b"b" for e in batch):
                raise ValueError("b is malformed")

        results = t.start(
            rxhubs.consume(
                hub,
                GROUP,
                store,
                owner_id="me",
                load_balancing_interval=2.0,
                ownership_expiration=6.0,
                on_partition_error=lambda c, e: errors.append((c.partition_id, c.operation)),
                on_partition_close=lambda c, r: closed.append((c.partition_id, r)),
            ).pipe(
                hops.process(parse, retry=Backoff(initial=0.5, max_retries=1)),
                hops.checkpoint(store, max_interval=0.0),
                symbols(),
            ),
            disposed=230,
        )
    got = "".join(r.value.value for r in results if r.value.kind == "N")
    assert [c for c in got if c in "wxyz"] == list("wxyz")  # partition 1 unaffected, in order
    zeros = [c for c in got if c in "abcd"]
    assert zeros[0] == "a" and "b" not in zeros  # b never passed
    # no checkpoint of partition 0 ever passed b (sequence number 1), although it was read again
    assert all(seq < 1 for _, pid, seq in store.writes if pid == "0")
    assert ("0", "process") in errors
    assert ("0", rxhubs.CloseReason.OWNERSHIP_LOST) in closed
    reads = [r for r in results if r.value.kind == "N" and "a" in r.value.value]
    assert len(reads) == 1  # a was checkpointed: the partition is read again from b, which fails again
    assert errors.count(("0", "process")) >= 4  # two attempts per claim, claimed again after a backoff


def test_without_balancing_a_poison_batch_errors_the_stream() -> None:
    hub = InMemoryEventHub(partition_count=1)
    hub.send([b"x"], partition_id="0")
    scheduler = TestScheduler()
    errors: list[Exception] = []

    def boom(batch: EventBatch) -> None:
        raise KeyError("no such customer")

    rxhubs.partition_batches(hub, "0").pipe(hops.process(boom, retry=Backoff(max_retries=0))).subscribe(
        on_error=errors.append, scheduler=scheduler
    )
    scheduler.advance_to(1.0)
    assert len(errors) == 1 and isinstance(errors[0], KeyError)


def test_retry_forever_holds_the_partition_until_the_cause_is_fixed() -> None:
    hub = InMemoryEventHub(partition_count=1)
    hub.send([b"x", b"y"], partition_id="0")
    healthy = {"up": False}

    def needs_db(batch: EventBatch) -> None:
        if not healthy["up"]:
            raise ConnectionError("down")

    scheduler = TestScheduler()
    out: list[int] = []
    consumer(hub, InMemoryCheckpointStore(), max_batch_size=1).pipe(
        hops.process(needs_db, retry=Backoff(initial=1.0, maximum=2.0, max_retries=None))
    ).subscribe(lambda b: out.append(b.first_sequence_number), scheduler=scheduler)
    scheduler.advance_to(100.0)
    assert out == []
    scheduler.schedule_absolute(100.5, lambda *_: healthy.update(up=True))
    scheduler.advance_to(110.0)
    assert out == [0, 1]


def test_sync_work_runs_and_its_result_is_ignored() -> None:
    hub = InMemoryEventHub(partition_count=1)
    hub.send([b"a", b"b"], partition_id="0")
    seen: list[int] = []
    scheduler = TestScheduler()
    out: list[EventBatch] = []
    rxhubs.partition_batches(hub, "0", max_batch_size=1).pipe(
        hops.process(lambda b: seen.append(len(b)) or "ignored", blocking=False)
    ).subscribe(out.append, scheduler=scheduler)
    scheduler.advance_to(1.0)
    assert seen == [1, 1] and [len(b) for b in out] == [1, 1]


def test_marbles_order_is_kept_with_concurrency() -> None:
    delays = {"a": 3.0, "b": 1.0, "c": 1.0}

    async def work(batch: EventBatch) -> None:
        await sleep(delays[batch[0].body.decode()])

    with marble_test() as t:
        hub = t.hub({"0": "-a-b-c"})
        results = t.start(
            rxhubs.partition_batches(hub, "0", max_batch_size=1).pipe(hops.process(work, concurrency=2), symbols())
        )
    # a (read at 1) takes 3 s: done at 4; b (read at 3) is done at 4 too and waited for a; c: read at 5, done at 6
    assert [(r.time - 200, r.value.value) for r in results] == [(4.0, "a"), (4.0, "b"), (6.0, "c")]


@pytest.mark.parametrize(
    "kwargs",
    [{"concurrency": 0}, {"concurrency": True}, {"retry": 3}, {"on_poison": "dead.jsonl"}],
)
def test_bad_options_are_configuration_errors(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError):
        hops.process(lambda b: None, **kwargs)
    with pytest.raises(ConfigurationError):
        hops.process("not callable")  # type: ignore[arg-type]


def test_unfinished_work_is_never_checkpointed_when_a_flat_map_reorders(caplog: pytest.LogCaptureFixture) -> None:
    """The checkpoint operator alone: batches completing out of order are checkpointed as a contiguous prefix."""
    import reactivex

    hub = InMemoryEventHub(partition_count=1)
    hub.send([str(n).encode() for n in range(6)], partition_id="0")
    scheduler = TestScheduler()
    store = ProxyStore(InMemoryCheckpointStore(), scheduler)
    delays = [5.0, 1.0, 3.0, 0.5, 2.0, 0.1]  # batch 0 finishes last but one
    finished: dict[int, float] = {}

    def work(batch: EventBatch) -> Any:
        n = batch.first_sequence_number or 0

        def done(_: Any) -> EventBatch:
            finished[n] = scheduler.clock
            return batch

        return reactivex.timer(delays[n], scheduler=scheduler).pipe(ops.map(done))

    with caplog.at_level(logging.WARNING, "rxhubs.operators"):
        rxhubs.consume(hub, GROUP, store, owner_id="me", max_batch_size=1, **FAST).pipe(
            ops.flat_map(work), hops.checkpoint(store, max_interval=0.0)
        ).subscribe(scheduler=scheduler)
        scheduler.advance_to(20.0)
    for t, _pid, seq in store.writes:
        assert all(finished[n] <= t for n in range(seq + 1)), (t, seq, finished)
    assert store.writes[-1][2] == 5
    assert sum("out of order" in r.message for r in caplog.records) == 1


def test_a_filtered_batch_is_still_checkpointed_through_its_last_event() -> None:
    hub = InMemoryEventHub(partition_count=1)
    hub.send([b"keep", b"drop"], partition_id="0")
    scheduler = TestScheduler()
    store = InMemoryCheckpointStore()
    rxhubs.consume(hub, GROUP, store, owner_id="me", **FAST).pipe(
        ops.map(lambda b: b.with_events([e for e in b if e.body != b"drop"])), hops.checkpoint(store)
    ).subscribe(scheduler=scheduler)
    scheduler.advance_to(1.0)
    (cp,) = store.peek(hub.fully_qualified_namespace, hub.eventhub_name, GROUP)[1]
    assert cp.sequence_number == 1  # the dropped event was handled too: it is not read again


def test_error_context_names_partition_and_operation() -> None:
    context = rxhubs.ErrorContext("ns", "hub", GROUP, "2", "checkpoint")
    assert isinstance(context, PartitionContext) and context.operation == "checkpoint"


@pytest.mark.parametrize("concurrency", [1, 2])
def test_a_batch_waiting_for_its_retry_keeps_its_slot(concurrency: int) -> None:
    """Concurrency bounds the work of a partition also while a failed batch waits for its retry: with
    ``concurrency=1`` the work runs strictly one batch after the other, in order (a database written in order)."""
    hub = InMemoryEventHub(partition_count=1)
    hub.send([b"a", b"b", b"c", b"d"], partition_id="0")
    scheduler = TestScheduler()
    started: list[tuple[int | None, float]] = []
    running = {"now": 0, "most": 0}
    failed_once: set[int | None] = set()

    async def work(batch: EventBatch) -> None:
        started.append((batch.first_sequence_number, scheduler.clock))
        running["now"] += 1
        running["most"] = max(running["most"], running["now"])
        try:
            await sleep(2.0)
            if batch.first_sequence_number == 0 and 0 not in failed_once:
                failed_once.add(0)
                raise ConnectionError("database away")
        finally:
            running["now"] -= 1

    out: list[int | None] = []
    consumer(hub, InMemoryCheckpointStore(), max_batch_size=1, max_inflight=4).pipe(
        hops.process(work, concurrency=concurrency, retry=Backoff(initial=1.0, max_retries=3))
    ).subscribe(lambda b: out.append(b.first_sequence_number), scheduler=scheduler)
    scheduler.advance_to(30.0)
    assert out == [0, 1, 2, 3]
    assert running["most"] == concurrency  # never more at once, not even when the retry timer fires
    if concurrency == 1:  # nothing overtook the batch waiting for its retry
        assert [seq for seq, _ in started] == [0, 0, 1, 2, 3]
