"""rxhubs.EventProcessor: the seeds' processor form over the in-memory hub and store, in real time."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Sequence
from typing import Any, ClassVar

import pytest

import rxhubs
from rxhubs import CloseReason, Event, PartitionContext
from rxhubs.errors import ConfigurationError
from rxhubs.stores import InMemoryCheckpointStore
from rxhubs.testing import InMemoryEventHub

GROUP = "$Default"
FAST: dict[str, Any] = {"load_balancing_interval": 0.1, "ownership_expiration": 0.6, "max_wait": 0.05}


async def until(condition: Any, timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached"
        await asyncio.sleep(0.02)


def records(hub: InMemoryEventHub, store: InMemoryCheckpointStore) -> tuple[dict[str, str], dict[str, int]]:
    ownership, checkpoints = store.peek(hub.fully_qualified_namespace, hub.eventhub_name, GROUP)
    return {o.partition_id: o.owner_id for o in ownership}, {c.partition_id: c.sequence_number for c in checkpoints}


class Recorder(rxhubs.PartitionProcessor):
    """Async callbacks; checkpoints every batch's last event; remembers everything."""

    processed: ClassVar[Counter[tuple[str, int]]] = Counter()
    calls: ClassVar[list[tuple[str, str]]] = []

    async def initialize(self, context: PartitionContext) -> None:
        Recorder.calls.append(("initialize", context.partition_id))

    async def process_events(self, events: Sequence[Event], context: PartitionContext) -> None:
        await asyncio.sleep(0.001)
        for event in events:
            Recorder.processed[(context.partition_id, event.sequence_number)] += 1
        if events:
            await self.update_checkpoint(events[-1])

    async def close(self, reason: CloseReason, context: PartitionContext) -> None:
        Recorder.calls.append((f"close {reason.value}", context.partition_id))


@pytest.fixture(autouse=True)
def fresh_recorder() -> None:
    Recorder.processed = Counter()
    Recorder.calls = []


async def test_two_processors_share_the_partitions_every_event_once_and_stop_releases_at_once() -> None:
    hub = InMemoryEventHub(partition_count=4)
    store = InMemoryCheckpointStore()
    a = rxhubs.EventProcessor(hub, GROUP, Recorder, store, owner_id="a", **FAST)
    b = rxhubs.EventProcessor(hub, GROUP, Recorder, store, owner_id="b", **FAST)
    await a.start()
    assert a.is_running
    await until(lambda: set(records(hub, store)[0].values()) == {"a"} and len(records(hub, store)[0]) == 4)
    await b.start()
    sent = 0
    for _ in range(20):
        hub.send([f"{sent + i}".encode() for i in range(8)])
        sent += 8
        await asyncio.sleep(0.02)
    await until(lambda: sorted(Counter(records(hub, store)[0].values()).values()) == [2, 2])
    await until(lambda: sum(Recorder.processed.values()) >= sent)
    await a.stop()
    assert not a.is_running
    owners, _ = records(hub, store)
    assert set(owners.values()) == {"b"}  # handed to b by stop() (the consumer that stays), not left to expire
    await b.stop()
    expected = {(pid, seq) for pid in hub.partition_ids for seq in range(len(hub.events(pid)))}
    assert set(Recorder.processed) == expected
    assert max(Recorder.processed.values()) == 1  # graceful handovers: nothing processed twice
    _, checkpoints = records(hub, store)
    assert checkpoints == {pid: len(hub.events(pid)) - 1 for pid in hub.partition_ids}
    for pid in hub.partition_ids:  # each period of ownership: initialize first, close last
        mine = [name for name, p in Recorder.calls if p == pid]
        assert mine[0] == "initialize" and mine[-1].startswith("close")
        assert mine.count("initialize") == sum(1 for name in mine if name.startswith("close"))


class Marker(rxhubs.PartitionProcessor):
    """Plain (sync) methods; checkpoints only events whose body is 'commit'."""

    errors: ClassVar[list[tuple[str, str]]] = []

    def process_events(self, events: Sequence[Event], context: PartitionContext) -> None:
        for event in events:
            if event.body == b"explode":
                raise ValueError("cannot handle this event")
            if event.body == b"commit":
                self.update_checkpoint(event)  # a plain method marks without awaiting

    def process_error(self, error: Exception, context: PartitionContext) -> None:
        assert isinstance(context, rxhubs.ErrorContext)
        Marker.errors.append((context.operation, str(error)))


async def test_update_checkpoint_records_only_what_the_processor_marked() -> None:
    hub = InMemoryEventHub(partition_count=1)
    hub.send([b"a", b"commit", b"b"], partition_id="0")
    store = InMemoryCheckpointStore()
    async with rxhubs.EventProcessor(hub, GROUP, Marker, store, checkpoint_interval=0.0, **FAST):
        await until(lambda: "0" in records(hub, store)[1])  # (not a fixed 0.3 s: the full suite's load outlasted it)
    assert records(hub, store)[1] == {"0": 1}  # the marked 'commit' event, not the last one read


async def test_a_failing_process_events_reaches_process_error_and_on_poison() -> None:
    Marker.errors = []
    hub = InMemoryEventHub(partition_count=1)
    hub.send([b"explode"], partition_id="0")
    hub.send([b"commit"], partition_id="0")
    store = InMemoryCheckpointStore()
    poisoned: list[bytes] = []
    async with rxhubs.EventProcessor(
        hub,
        GROUP,
        Marker,
        store,
        max_batch_size=1,
        checkpoint_interval=0.0,
        retry=rxhubs.Backoff(initial=0.01, max_retries=2),
        on_poison=lambda batch, error: poisoned.extend(e.body for e in batch),
        **FAST,
    ):
        await until(lambda: records(hub, store)[1].get("0") == 1)
    assert poisoned == [b"explode"]
    assert Marker.errors == [("process", "cannot handle this event")] * 2  # the retries; then on_poison


async def test_lifecycle_errors() -> None:
    hub = InMemoryEventHub(partition_count=1)
    store = InMemoryCheckpointStore()
    with pytest.raises(ConfigurationError):
        rxhubs.EventProcessor(hub, GROUP, Recorder, store, on_partition_error=print)  # type: ignore[call-arg]
    with pytest.raises(ConfigurationError):
        rxhubs.EventProcessor(hub, GROUP, Recorder, store, max_batch_size=0)
    processor = rxhubs.EventProcessor(hub, GROUP, Recorder, store, **FAST)
    await processor.start()
    with pytest.raises(ConfigurationError, match="already running"):
        await processor.start()
    await processor.stop()
    await processor.stop()  # idempotent
    assert not processor.is_running


async def test_a_factory_that_returns_something_else_is_reported_and_the_partition_not_read() -> None:
    hub = InMemoryEventHub(partition_count=1)
    hub.send([b"x"], partition_id="0")
    store = InMemoryCheckpointStore()
    group_errors: list[tuple[str, str]] = []
    async with rxhubs.EventProcessor(
        hub, GROUP, lambda: object(), store, on_error=lambda c, e: group_errors.append((c.operation, str(e))), **FAST
    ):
        await until(lambda: group_errors != [])
    assert group_errors[0][0] == "initialize" and "not a PartitionProcessor" in group_errors[0][1]
    assert records(hub, store)[1] == {}
