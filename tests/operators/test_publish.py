"""hops.publish and hops.dead_letter in virtual time: order, acknowledgement before checkpoint, backpressure,
failures kept to their partition, dead letters, routing and options."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from reactivex import operators as ops
from reactivex.testing import TestScheduler

import rxhubs
from rxhubs import Checkpoint, EventBatch, Ownership
from rxhubs import operators as hops
from rxhubs.errors import ConfigurationError, NotFoundError, PublishError
from rxhubs.sources import Backoff
from rxhubs.stores import InMemoryCheckpointStore
from rxhubs.testing import InMemoryEventHub, marble_test, never, sleep, symbols
from tests.balancing.kit import GROUP

FAST = {"load_balancing_interval": 1.0, "ownership_expiration": 3.0}


class SlowTarget:
    """A Publisher over an in-memory hub: each send is acknowledged ``delay`` s later, or fails when ``fails``
    says so; it records what it acknowledged (source partition -> highest source sequence number)."""

    def __init__(
        self,
        hub: InMemoryEventHub,
        delay: float = 0.0,
        fails: Callable[[Sequence[hops.OutgoingEvent]], Exception | None] | None = None,
        hang: bool = False,
    ) -> None:
        self.hub = hub
        self.eventhub_name = hub.eventhub_name
        self.delay = delay
        self.fails = fails
        self.hang = hang
        self.sends: list[tuple[str | None, str | None, int]] = []
        self.acked: dict[str, int] = defaultdict(lambda: -1)

    async def publish(
        self, events: Sequence[hops.OutgoingEvent], *, partition_id: str | None = None, partition_key: str | None = None
    ) -> None:
        self.sends.append((partition_id, partition_key, len(events)))
        if self.hang:
            await never()
        await sleep(self.delay)
        error = self.fails(events) if self.fails else None
        if error is not None:
            raise error
        await self.hub.publish(events, partition_id=partition_id, partition_key=partition_key)
        for event in events:
            source = event.properties.get("src")
            if source is not None:
                pid, seq = source.split(":")
                self.acked[pid] = max(self.acked[pid], int(seq))


def checkpoints_of(store: InMemoryCheckpointStore, hub: InMemoryEventHub) -> dict[str, int]:
    _, checkpoints = store.peek(hub.fully_qualified_namespace, hub.eventhub_name, GROUP)
    return {c.partition_id: c.sequence_number for c in checkpoints}


class WatchedStore(InMemoryCheckpointStore):
    """An in-memory store that checks, at every checkpoint written, that the target already acknowledged it."""

    def __init__(self, target: SlowTarget) -> None:
        super().__init__()
        self.target = target
        self.observations: list[tuple[str, int, int]] = []  # partition, checkpoint, acked

    def _observe(self, checkpoint: Checkpoint) -> None:
        pid = checkpoint.partition_id
        self.observations.append((pid, checkpoint.sequence_number, self.target.acked[pid]))

    async def update_checkpoint(self, checkpoint: Checkpoint) -> None:
        self._observe(checkpoint)
        await super().update_checkpoint(checkpoint)

    async def update_checkpoint_fenced(self, checkpoint: Checkpoint, ownership: Ownership) -> None:
        self._observe(checkpoint)  # the checkpoint operator writes fenced where the store can
        await super().update_checkpoint_fenced(checkpoint, ownership)


def test_marble_each_batch_moves_on_once_acknowledged_and_the_next_waits_for_it() -> None:
    with marble_test() as t:
        source = t.hub({"0": "-a-b-c"})
        target = SlowTarget(InMemoryEventHub(1, eventhub_name="out", clock=t.now), delay=3.0)
        results = t.start(
            rxhubs.partition_batches(source, "0", max_batch_size=1).pipe(
                hops.publish(target, body=lambda e: e.body.upper()), symbols()
            )
        )
    # a: read at 1, acknowledged at 4; b (read at 3) is sent at 4, acknowledged at 7; c (read at 5): 7 -> 10
    assert results == t.exp("----a--b--c")
    assert [e.body for e in target.hub.events("0")] == [b"A", b"B", b"C"]


def test_keys_are_kept_order_holds_per_key_and_nothing_is_checkpointed_before_its_ack() -> None:
    source = InMemoryEventHub(4, eventhub_name="a")
    keys = [f"device-{k}" for k in range(6)]
    for n in range(30):
        for key in keys:
            source.send([f"{key}/{n}".encode()], partition_key=key)
    origin = {e.body: p for p in source.partition_ids for e in source.events(p)}

    def tagged(event: rxhubs.Event) -> dict[str, Any]:  # the source position travels with the event
        return {**event.properties, "src": f"{origin[event.body]}:{event.sequence_number}"}

    scheduler = TestScheduler()
    target = SlowTarget(InMemoryEventHub(4, eventhub_name="b", clock=lambda: scheduler.now), delay=0.5)
    store = WatchedStore(target)
    rxhubs.consume(source, GROUP, store, owner_id="me", max_batch_size=7, **FAST).pipe(
        hops.publish(target, body=lambda e: e.body + b"!", properties=tagged),
        hops.checkpoint(store, max_interval=1.0),
    ).subscribe(scheduler=scheduler)
    scheduler.advance_to(120.0)

    published: dict[str, list[bytes]] = defaultdict(list)
    for pid in target.hub.partition_ids:
        for event in target.hub.events(pid):
            assert event.partition_key is not None
            published[event.partition_key].append(event.body)
    assert published == {k: [f"{k}/{n}!".encode() for n in range(30)] for k in keys}
    assert len(store.observations) >= 4
    assert all(checkpoint <= acked for _, checkpoint, acked in store.observations), store.observations
    final = checkpoints_of(store, source)
    assert final == {p: source.partition_properties(p).last_enqueued_sequence_number for p in source.partition_ids
                     if source.events(p)}
    assert {key for _, key, _ in target.sends} == set(keys)  # one send per key and batch, never one per event
    assert len(target.sends) < len(keys) * 30


def test_a_target_that_does_not_acknowledge_holds_the_source_back() -> None:
    source = InMemoryEventHub(1)
    source.send([b"x"] * 100, partition_id="0")
    scheduler = TestScheduler()
    target = SlowTarget(InMemoryEventHub(1), hang=True)
    pulled: list[int] = []
    emitted: list[EventBatch] = []
    rxhubs.partition_batches(source, "0", max_batch_size=1, max_inflight=4).pipe(
        ops.do_action(lambda b: pulled.append(b.first_sequence_number)), hops.publish(target)
    ).subscribe(emitted.append, scheduler=scheduler)
    scheduler.advance_to(50.0)
    assert len(pulled) == 4 and emitted == []  # four held, nothing more read, nothing passed on
    assert len(target.sends) == 1  # one send per partition at a time: order is kept


def test_a_failing_send_stops_only_its_partition_with_a_publish_error_naming_it() -> None:
    source = InMemoryEventHub(2, eventhub_name="a")
    source.send([b"p0"] * 5, partition_id="0")
    source.send([b"p1"] * 5, partition_id="1")
    scheduler = TestScheduler()

    def refuse(events: Sequence[hops.OutgoingEvent]) -> Exception | None:
        return NotFoundError("event hub 'nope' not found") if events[0].body == b"p0" else None

    target = SlowTarget(InMemoryEventHub(2, eventhub_name="b"), fails=refuse)
    store = InMemoryCheckpointStore()
    errors: list[tuple[str, str, BaseException]] = []
    rxhubs.consume(
        source, GROUP, store, owner_id="me",
        on_partition_error=lambda c, e: errors.append((c.partition_id, c.operation, e)), **FAST,
    ).pipe(hops.publish(target), hops.checkpoint(store, max_interval=0.0)).subscribe(scheduler=scheduler)
    scheduler.advance_to(5.0)

    assert [e.body for e in target.hub.events("0") + target.hub.events("1")] == [b"p1"] * 5
    pid, operation, error = errors[0]
    assert (pid, operation) == ("0", "publish")
    assert isinstance(error, PublishError) and error.partition_id == "0" and error.target == "b"
    assert not error.retriable and isinstance(error.__cause__, NotFoundError)
    assert "partition 0" in str(error)
    checkpoints = checkpoints_of(store, source)
    assert checkpoints == {"1": 4}  # nothing of partition 0 counts as done: it is read again later


def test_without_balancing_the_stream_errors_with_the_publish_error() -> None:
    with marble_test() as t:
        source = t.hub({"3": "-a"})
        target = SlowTarget(InMemoryEventHub(1), fails=lambda _: ConfigurationError("event too large"))
        results = t.start(rxhubs.partition_batches(source, "3").pipe(hops.publish(target), symbols()))
    [record] = results
    error = record.value.exception
    assert isinstance(error, PublishError) and error.partition_id == "3" and "partition 3" in str(error)


def test_dead_letter_publishes_the_failed_events_with_error_and_position_and_the_batch_moves_on() -> None:
    source = InMemoryEventHub(2, eventhub_name="a")
    source.send([b"ok-1", b"bad", b"ok-2"], partition_key="k")
    scheduler = TestScheduler()

    def refuse(events: Sequence[hops.OutgoingEvent]) -> Exception | None:
        if any(e.body == b"bad" for e in events):
            return ConfigurationError("an event of 3 bytes is too large; SharedAccessKey=c2VjcmV0 leaked")
        return None

    target = SlowTarget(InMemoryEventHub(2, eventhub_name="b"), fails=refuse)
    dlq = InMemoryEventHub(1, eventhub_name="dlq")
    store = InMemoryCheckpointStore()
    rxhubs.consume(source, GROUP, store, owner_id="me", max_batch_size=1, **FAST).pipe(
        hops.publish(target, on_poison=hops.dead_letter(dlq)), hops.checkpoint(store, max_interval=0.0)
    ).subscribe(scheduler=scheduler)
    scheduler.advance_to(5.0)

    [dead] = dlq.events("0")
    origin = next(e for p in source.partition_ids for e in source.events(p) if e.body == b"bad")
    pid = next(p for p in source.partition_ids if source.events(p))
    assert dead.body == b"bad" and dead.partition_key == "k"
    props = dict(dead.properties)
    assert props["rxhubs.error.type"] == "PublishError"
    assert "too large" in props["rxhubs.error.message"] and "c2VjcmV0" not in props["rxhubs.error.message"]
    assert {k: props[k] for k in props if k.startswith("rxhubs.source.")} == {
        "rxhubs.source.namespace": source.fully_qualified_namespace,
        "rxhubs.source.eventhub": "a",
        "rxhubs.source.consumer_group": GROUP,
        "rxhubs.source.partition_id": pid,
        "rxhubs.source.sequence_number": origin.sequence_number,
        "rxhubs.source.offset": origin.offset,
    }
    published = [e.body for p in target.hub.partition_ids for e in target.hub.events(p)]
    assert published == [b"ok-1", b"ok-2"]
    checkpoints = checkpoints_of(store, source)
    assert checkpoints == {pid: 2}


def test_routing_options_and_dropped_events() -> None:
    source = InMemoryEventHub(1)
    source.send([b"a", b"skip", b"b"], partition_key="k")
    scheduler = TestScheduler()
    by_id, by_key = InMemoryEventHub(4), InMemoryEventHub(4)
    rxhubs.partition_batches(source, "0").pipe(
        hops.publish(by_id, partition_id="2", properties={"v": 1},
                     body=lambda e: None if e.body == b"skip" else e.body),
        hops.publish(by_key, partition_key=lambda e: e.body.decode()),
    ).subscribe(scheduler=scheduler)
    scheduler.advance_to(1.0)
    assert [(e.body, e.partition_key, dict(e.properties)) for e in by_id.events("2")] == [
        (b"a", None, {"v": 1}), (b"b", None, {"v": 1}),
    ]
    assert sorted((e.body, e.partition_key) for p in by_key.partition_ids for e in by_key.events(p)) == [
        (b"a", "a"), (b"b", "b"), (b"skip", "skip"),
    ]


@pytest.mark.parametrize(
    ("target", "options", "message"),
    [
        ("hub-b", {}, "publish target"),
        (InMemoryEventHub(1), {"partition_id": "0", "partition_key": "k"}, "not both"),
        (InMemoryEventHub(1), {"body": b"x"}, "body"),
        (InMemoryEventHub(1), {"partition_key": 7}, "partition_key"),
        (InMemoryEventHub(1), {"retry": 3}, "retry"),
        (InMemoryEventHub(1), {"on_poison": "dlq"}, "on_poison"),
    ],
)
def test_bad_options_are_refused_when_the_operator_is_built(target: Any, options: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        hops.publish(target, **options)


def test_retry_resends_a_failed_batch_before_it_counts_as_poison() -> None:
    source = InMemoryEventHub(1)
    source.send([b"x"], partition_id="0")
    failures = [rxhubs.errors.TransportError("link dropped")]
    target = SlowTarget(InMemoryEventHub(1), fails=lambda _: failures.pop() if failures else None)
    scheduler = TestScheduler()
    rxhubs.partition_batches(source, "0").pipe(
        hops.publish(target, retry=Backoff(initial=1.0, max_retries=2))
    ).subscribe(scheduler=scheduler)
    scheduler.advance_to(5.0)
    assert [e.body for e in target.hub.events("0")] == [b"x"] and len(target.sends) == 2


def test_batches_queued_behind_a_send_go_out_together_and_a_failed_group_is_retried_batch_by_batch() -> None:
    source = InMemoryEventHub(1)
    source.send([b"a", b"b", b"c", b"d", b"e", b"f"], partition_id="0")
    scheduler = TestScheduler()

    def refuse(events: Sequence[hops.OutgoingEvent]) -> Exception | None:
        return ConfigurationError("d is refused") if any(e.body == b"d" for e in events) else None

    target = SlowTarget(InMemoryEventHub(1), delay=1.0, fails=refuse)
    dlq = InMemoryEventHub(1)
    emitted: list[str] = []
    rxhubs.partition_batches(source, "0", max_batch_size=1, max_inflight=8).pipe(
        hops.publish(target, on_poison=hops.dead_letter(dlq)), symbols()
    ).subscribe(emitted.append, scheduler=scheduler)
    scheduler.advance_to(20.0)

    # a alone (nothing queued yet); b..f queued behind it go in one send, which fails on d; then one by one
    assert [n for _, _, n in target.sends] == [1, 5, 1, 1, 1, 1, 1]
    assert [e.body for e in target.hub.events("0")] == [b"a", b"b", b"c", b"e", b"f"]
    assert [e.body for e in dlq.events("0")] == [b"d"]
    assert emitted == ["a", "b", "c", "d", "e", "f"]  # every batch moves on, in order
