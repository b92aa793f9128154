"""partition_batches in virtual time: ordering, backpressure, retry and resume, disposal, errors."""

from __future__ import annotations

from typing import Any

import pytest
from reactivex import operators as ops
from reactivex.testing import ReactiveTest, TestScheduler

import rxhubs
from rxhubs import EventBatch, Position
from rxhubs._shutdown import shutdown_scope
from rxhubs.errors import (
    ConfigurationError,
    NotFoundError,
    OwnershipLostError,
    ReceiverClosedError,
    TransportError,
)
from rxhubs.sources import Backoff
from rxhubs.testing import InMemoryEventHub, marble_test, symbols

on_next, on_completed, on_error = ReactiveTest.on_next, ReactiveTest.on_completed, ReactiveTest.on_error


def bodies(batch: EventBatch) -> str:
    return "".join(e.body_as_str() for e in batch)


def record(source: Any, scheduler: TestScheduler) -> list[tuple[float, str]]:
    seen: list[tuple[float, str]] = []
    source.subscribe(lambda b: seen.append((scheduler.clock, bodies(b))), scheduler=scheduler)
    return seen


def test_marbles_batches_follow_the_partition_in_order() -> None:
    with marble_test() as t:
        hub = t.hub({"0": "--a-b-cd---e--"})
        results = t.start(rxhubs.partition_batches(hub, "0", max_wait=5.0).pipe(symbols()))
        assert results == t.exp("--a-b-cd---e--")


def test_marbles_a_fault_is_retried_after_the_backoff_from_where_it_stopped() -> None:
    with marble_test() as t:
        hub = t.hub({"0": "-ab--#c----d"})
        source = rxhubs.partition_batches(hub, "0", max_wait=100.0, retry=Backoff(initial=2.0))
        # the pull woken by "c" at 6 fails; the retry at 8 reopens after "b" and reads "c": no gap, no duplicate
        assert t.start(source.pipe(symbols())) == t.exp("-ab-----c--d")


def test_max_batch_size_splits_and_order_is_kept() -> None:
    hub = InMemoryEventHub(partition_count=2)
    hub.send([f"{i % 10}" for i in range(25)], partition_id="1")
    scheduler = TestScheduler()
    seen = record(rxhubs.partition_batches(hub, "1", max_batch_size=10), scheduler)
    scheduler.advance_to(1.0)
    assert [b for _, b in seen] == ["0123456789", "0123456789", "01234"]


def test_a_held_batch_blocks_pulls_beyond_max_inflight() -> None:
    hub = InMemoryEventHub(partition_count=1)
    hub.send([str(i) for i in range(10)], partition_id="0")
    scheduler = TestScheduler()
    acks: list[rxhubs.Ack] = []
    seen: list[EventBatch] = []

    def slow_subscriber(batch: EventBatch) -> None:
        seen.append(batch)
        acks.append(batch.hold())  # handled later

    rxhubs.partition_batches(hub, "0", max_batch_size=2, max_inflight=3).subscribe(slow_subscriber, scheduler=scheduler)
    scheduler.advance_to(100.0)
    assert len(seen) == 3  # bound reached: no more pulls, whatever time passes
    hub.send(["x"] * 50, partition_id="0")
    scheduler.advance_to(200.0)
    assert len(seen) == 3
    acks[0]()
    acks[0]()  # acknowledging twice counts once
    scheduler.advance_to(201.0)
    assert len(seen) == 4
    for ack in acks[1:]:
        ack()
    scheduler.advance_to(202.0)
    assert len(seen) == 7  # three more acknowledged, three more pulled
    assert [b.first_sequence_number for b in seen] == [0, 2, 4, 6, 8, 10, 12]


def test_synchronous_subscriber_is_served_one_batch_at_a_time() -> None:
    hub = InMemoryEventHub(partition_count=1)
    hub.send(["a"] * 6, partition_id="0")
    scheduler = TestScheduler()
    receiver_positions: list[int | None] = []

    def handler(batch: EventBatch) -> None:
        # while this runs, the source has not pulled the next batch yet: the hub still holds it
        receiver_positions.append(batch.last_sequence_number)

    rxhubs.partition_batches(hub, "0", max_batch_size=2, max_inflight=1).subscribe(handler, scheduler=scheduler)
    scheduler.advance_to(1.0)
    assert receiver_positions == [1, 3, 5]


def test_empty_batches_are_emitted_as_heartbeats_only_when_asked() -> None:
    hub = InMemoryEventHub(partition_count=1)
    scheduler = TestScheduler()
    quiet = record(rxhubs.partition_batches(hub, "0", max_wait=2.0), scheduler)
    beats = record(rxhubs.partition_batches(hub, "0", max_wait=2.0, emit_empty=True), scheduler)
    scheduler.advance_to(7.0)
    assert quiet == []
    assert beats == [(2.0, ""), (4.0, ""), (6.0, "")]


def test_an_idle_partition_pulls_once_a_minute_unless_it_emits_heartbeats(monkeypatch: pytest.MonkeyPatch) -> None:
    """An empty pull is dropped unless ``emit_empty``: an idle partition waits ``IDLE_PULL`` for its first event, not
    ``max_wait`` (1,024 idle partitions pulling every second cost a consumer most of 0.3 ms of CPU per partition per
    second); an event still ends the wait at once, and a heartbeat stream still pulls every ``max_wait``."""
    from rxhubs.sources._pump import IDLE_PULL
    from rxhubs.testing._memory_receiver import InMemoryReceiver

    waits: list[tuple[float, float | None]] = []
    receive = InMemoryReceiver.receive_batch

    async def counted(self: InMemoryReceiver, max_count: int, max_wait: float | None = None) -> list[Any]:
        waits.append((scheduler.clock, max_wait))
        return await receive(self, max_count, max_wait)

    monkeypatch.setattr(InMemoryReceiver, "receive_batch", counted)
    hub = InMemoryEventHub(partition_count=2)
    scheduler = TestScheduler()
    quiet = record(rxhubs.partition_batches(hub, "0", max_wait=1.0), scheduler)
    scheduler.advance_to(150.0)
    assert waits == [(0.0, IDLE_PULL), (60.0, IDLE_PULL), (120.0, IDLE_PULL)]  # not 150 pulls
    hub.send(["a"], partition_id="0")
    scheduler.advance_to(150.5)
    assert quiet == [(150.0, "a")]  # the event ended the wait at once
    waits.clear()
    beats = record(rxhubs.partition_batches(hub, "1", max_wait=1.0, emit_empty=True), scheduler)
    scheduler.advance_to(153.5)
    assert [w for _, w in waits] == [1.0, 1.0, 1.0, 1.0] and [b for _, b in beats] == ["", "", ""]


def test_retriable_error_resumes_after_the_last_event_without_gap_or_duplicate() -> None:
    hub = InMemoryEventHub(partition_count=1)
    hub.send(list("abcd"), partition_id="0")
    scheduler = TestScheduler()
    seen = record(
        rxhubs.partition_batches(hub, "0", max_batch_size=2, retry=Backoff(initial=1.0, max_retries=3)), scheduler
    )
    scheduler.advance_to(0.5)
    assert [b for _, b in seen] == ["ab", "cd"]
    hub.inject_error("0", TransportError("link dropped"))
    hub.send(list("ef"), partition_id="0")
    scheduler.advance_to(0.9)
    assert [b for _, b in seen] == ["ab", "cd"]  # failed pull, waiting to retry
    scheduler.advance_to(3.0)
    assert seen[-1] == (1.5, "ef")  # reopened after "d" one backoff later: no gap, no duplicate
    assert [b for _, b in seen] == ["ab", "cd", "ef"]


def test_retries_grow_then_the_error_ends_the_stream() -> None:
    hub = InMemoryEventHub(partition_count=1)
    for _ in range(4):
        hub.inject_error("0", TransportError("down"))
    scheduler = TestScheduler()
    observer = scheduler.create_observer()
    rxhubs.partition_batches(hub, "0", retry=Backoff(initial=1.0, maximum=10.0, max_retries=3)).subscribe(
        observer, scheduler=scheduler
    )
    scheduler.advance_to(100.0)
    # attempts at 0, then retries after 1, 2 and 4 seconds: the fourth failure (t=7) ends the stream
    assert len(observer.messages) == 1
    message = observer.messages[0]
    assert message.time == 7.0
    assert isinstance(message.value.exception, TransportError)


def test_non_retriable_error_ends_the_stream_at_once() -> None:
    hub = InMemoryEventHub(partition_count=1)
    hub.send(["a"], partition_id="0")
    scheduler = TestScheduler()
    observer = scheduler.create_observer()
    rxhubs.partition_batches(hub, "0", owner_level=1).subscribe(observer, scheduler=scheduler)
    scheduler.advance_to(1.0)

    async def _noop() -> None: ...

    thief = hub.receiver("0", owner_level=2)
    thief.receive_nowait(1)  # attaches with a higher owner level: the stream's receiver is cut off
    hub.send(["b"], partition_id="0")
    scheduler.advance_to(2.0)
    kinds = [m.value.kind for m in observer.messages]
    assert kinds == ["N", "E"]
    assert isinstance(observer.messages[1].value.exception, OwnershipLostError)


class _CountedReceiver:
    """A hub's receiver, counting the pulls made on it (everything else passes through)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.pulls = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def receive_batch(self, max_count: int, max_wait: float | None = None) -> Any:
        self.pulls += 1
        return await self.inner.receive_batch(max_count, max_wait)

    def receive_nowait(self, max_count: int) -> Any:
        self.pulls += 1
        return self.inner.receive_nowait(max_count)


class _CountingHub(InMemoryEventHub):
    def __init__(self) -> None:
        super().__init__(partition_count=1)
        self.receivers: list[_CountedReceiver] = []

    def receiver(self, *args: Any, **kwargs: Any) -> Any:
        self.receivers.append(_CountedReceiver(super().receiver(*args, **kwargs)))
        return self.receivers[-1]


def test_disposal_closes_the_receiver_and_stops_pulling() -> None:
    hub = _CountingHub()
    scheduler = TestScheduler()
    closed: list[Any] = []
    seen: list[EventBatch] = []
    subscription = rxhubs.partition_batches(hub, "0", max_wait=1.0, on_closed=closed.append).subscribe(
        seen.append, scheduler=scheduler
    )
    scheduler.advance_to(2.5)
    [receiver] = hub.receivers
    assert receiver.pulls >= 2  # it was pulling (an empty partition: one wait of max_wait after another)
    subscription.dispose()
    scheduler.advance_to(3.0)
    assert closed == [receiver]
    pulls = receiver.pulls
    hub.send(["a"], partition_id="0")
    scheduler.advance_to(10.0)  # no pending timers fire into a disposed stream
    assert receiver.pulls == pulls and seen == []  # stopped pulling: the new event is never read
    assert hub.receivers == [receiver]  # nor is a new receiver opened
    with pytest.raises(ReceiverClosedError):
        receiver.receive_nowait(1)


def test_graceful_stop_waits_for_batches_in_flight_then_completes() -> None:
    hub = InMemoryEventHub(partition_count=1)
    hub.send(list("abcdef"), partition_id="0")
    scheduler = TestScheduler()
    observer = scheduler.create_observer()
    held: list[rxhubs.Ack] = []

    with shutdown_scope() as stop:
        source = rxhubs.partition_batches(hub, "0", max_batch_size=2, max_inflight=2)
        source.pipe(ops.do_action(lambda b: held.append(b.hold()))).subscribe(observer, scheduler=scheduler)
    scheduler.advance_to(1.0)
    assert len(observer.messages) == 2
    stop.request()
    scheduler.advance_to(2.0)
    assert [m.value.kind for m in observer.messages] == ["N", "N"]  # not complete: two batches still held
    held[0]()
    held[1]()
    scheduler.advance_to(3.0)
    assert [m.value.kind for m in observer.messages] == ["N", "N", "C"]


def test_an_observer_that_raises_ends_the_stream_with_its_error() -> None:
    hub = InMemoryEventHub(partition_count=1)
    hub.send(["a", "b"], partition_id="0")
    scheduler = TestScheduler()
    observer = scheduler.create_observer()

    def boom(batch: EventBatch) -> EventBatch:
        raise ValueError("user bug")

    rxhubs.partition_batches(hub, "0").pipe(ops.map(boom)).subscribe(observer, scheduler=scheduler)
    scheduler.advance_to(1.0)
    assert [m.value.kind for m in observer.messages] == ["E"]
    assert isinstance(observer.messages[0].value.exception, ValueError)


def test_start_position_is_honoured() -> None:
    hub = InMemoryEventHub(partition_count=1)
    hub.send(list("abcde"), partition_id="0")
    scheduler = TestScheduler()
    seen = record(rxhubs.partition_batches(hub, "0", start=Position.from_sequence_number(2)), scheduler)
    scheduler.advance_to(1.0)
    assert [b for _, b in seen] == ["de"]


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"max_batch_size": 0}, ConfigurationError),
        ({"max_batch_size": -1}, ConfigurationError),
        ({"max_wait": -0.5}, ConfigurationError),
        ({"max_inflight": 0}, ConfigurationError),
        ({"prefetch": True}, ConfigurationError),
        ({"start": 5}, ConfigurationError),
        ({"start": "earliest"}, ConfigurationError),
    ],
)
def test_bad_options_raise_typed_errors_at_call_time(kwargs: dict[str, Any], error: type[Exception]) -> None:
    hub = InMemoryEventHub(partition_count=1)
    with pytest.raises(error):
        rxhubs.partition_batches(hub, "0", **kwargs)


def test_unknown_partition_ends_the_stream_with_not_found() -> None:
    errors: list[Exception] = []
    scheduler = TestScheduler()
    rxhubs.partition_batches(InMemoryEventHub(partition_count=2), "7").subscribe(
        on_error=errors.append, scheduler=scheduler
    )
    scheduler.advance_to(1.0)
    assert len(errors) == 1 and isinstance(errors[0], NotFoundError) and "'7'" in str(errors[0])


def test_partitions_proceed_independently() -> None:
    hub = InMemoryEventHub(partition_count=2)
    hub.send(list("abc"), partition_id="0")
    hub.send(list("xyz"), partition_id="1")
    scheduler = TestScheduler()
    held: list[rxhubs.Ack] = []
    slow = record(
        rxhubs.partition_batches(hub, "0", max_batch_size=1, max_inflight=1).pipe(
            ops.do_action(lambda b: held.append(b.hold()))
        ),
        scheduler,
    )
    fast = record(rxhubs.partition_batches(hub, "1", max_batch_size=1, max_inflight=1), scheduler)
    scheduler.advance_to(1.0)
    assert [b for _, b in slow] == ["a"]  # stalled by its own unacknowledged batch
    assert [b for _, b in fast] == ["x", "y", "z"]  # the other partition is not


def test_a_slow_synchronous_pipeline_lets_the_loop_run_between_its_batches() -> None:
    """A backlog read by a pipeline that blocks per batch (here 250 ms) yields the loop after each batch.

    Other work on the loop (the ownership renewals) runs between two batches, not after 64 of them: a
    ticker task on the same loop must tick between every few batches.
    """
    import asyncio
    import itertools
    import time

    from reactivex.scheduler.eventloop import AsyncIOScheduler

    hub = InMemoryEventHub(partition_count=1)
    hub.send([f"{i}" for i in range(6)], partition_id="0")
    ticks_at_batch: list[int] = []

    async def main() -> None:
        ticks = 0
        done = asyncio.Event()

        def work(batch: EventBatch) -> None:
            ticks_at_batch.append(ticks)
            time.sleep(0.25)  # blocking work on the loop, longer than the step's time slice (200 ms)
            if len(ticks_at_batch) == 6:
                done.set()

        async def ticker() -> None:
            nonlocal ticks
            while not done.is_set():
                ticks += 1
                await asyncio.sleep(0)

        scheduler = AsyncIOScheduler(asyncio.get_running_loop())
        subscription = rxhubs.partition_batches(hub, "0", max_batch_size=1).subscribe(work, scheduler=scheduler)
        await asyncio.wait_for(asyncio.gather(ticker(), done.wait()), 30)
        subscription.dispose()

    asyncio.run(main())
    assert len(ticks_at_batch) == 6
    # every batch after the first found the ticker moved on since the one before it
    still = [b for a, b in itertools.pairwise(ticks_at_batch) if b == a]
    assert not still, ticks_at_batch
