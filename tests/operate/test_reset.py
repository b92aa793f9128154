"""``rxhubs.operate.reset_positions`` on the in-memory hub, with the in-memory and SQLite stores."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from rxhubs import Checkpoint, Ownership
from rxhubs.errors import ConfigurationError, NotFoundError, OwnershipConflictError, OwnershipLostError
from rxhubs.operate import reset_positions
from rxhubs.stores import InMemoryCheckpointStore, SqliteCheckpointStore
from rxhubs.testing import InMemoryEventHub

T0 = dt.datetime(2026, 11, 28, 6, 0, tzinfo=dt.UTC)
GROUP = "$Default"


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> dt.datetime:
        return self.now


def hub_with_minutes(partitions: int = 2, minutes: int = 10, per_minute: int = 5) -> InMemoryEventHub:
    """Each partition gets ``per_minute`` events at T0, T0 + 1 min, ..., so a time maps to a known event."""
    clock = Clock()
    hub = InMemoryEventHub(partition_count=partitions, clock=clock)
    for minute in range(minutes):
        clock.now = T0 + dt.timedelta(minutes=minute)
        for pid in hub.partition_ids:
            hub.send([f"{pid}-{minute}-{i}".encode() for i in range(per_minute)], partition_id=pid)
    return hub


def cp(hub: InMemoryEventHub, pid: str, seq: int) -> Checkpoint:
    return Checkpoint(hub.fully_qualified_namespace, hub.eventhub_name, GROUP, pid, str(seq * 100), seq)


async def stored(store: Any, hub: InMemoryEventHub) -> dict[str, int]:
    found = await store.list_checkpoints(hub.fully_qualified_namespace, hub.eventhub_name, GROUP)
    return {c.partition_id: c.sequence_number for c in found}


@pytest.fixture(params=["memory", "sqlite"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
    if request.param == "memory":
        yield InMemoryCheckpointStore()
        return
    async with SqliteCheckpointStore(tmp_path / "cp.sqlite") as sqlite:
        yield sqlite


async def test_each_target_plans_the_checkpoint_that_resumes_there(store: Any) -> None:
    hub = hub_with_minutes()  # 50 events per partition: 0..49, minute m = events 5m..5m+4
    await store.update_checkpoint(cp(hub, "0", 40))
    await store.update_checkpoint(cp(hub, "1", 10))
    earliest = await reset_positions(hub, store, to="earliest")
    assert [(r.current, r.new, r.skipped) for r in earliest.rows] == [(40, -1, -41), (10, -1, -11)]
    latest = await reset_positions(hub, store, to="latest")
    assert [(r.new, r.skipped) for r in latest.rows] == [(49, 9), (49, 39)]
    at = await reset_positions(hub, store, to=T0 + dt.timedelta(minutes=3, seconds=30))
    assert [r.new for r in at.rows] == [19, 19]  # the first event at or after it is minute 4's first: 20
    exact = await reset_positions(hub, store, to=T0 + dt.timedelta(minutes=3))
    assert [r.new for r in exact.rows] == [14, 14]  # at it: minute 3's first event (15) is read again
    shifted = await reset_positions(hub, store, shift_by=-15)
    assert [(r.new, r.skipped, r.note) for r in shifted.rows] == [
        (25, -15, ""), (-1, -11, "clamped to the retained events")
    ]
    one = await reset_positions(hub, store, to_sequence={"1": 30})
    assert [(r.partition_id, r.new) for r in one.rows] == [("1", 29)]  # only the partitions it names
    assert await stored(store, hub) == {"0": 40, "1": 10}, "a dry run writes nothing"


async def test_execute_writes_what_the_plan_said_with_the_events_offsets(store: Any) -> None:
    hub = hub_with_minutes()
    await store.update_checkpoint(cp(hub, "0", 40))
    plan = await reset_positions(hub, store, to=T0 + dt.timedelta(minutes=2), execute=True)
    assert plan.executed and [r.new for r in plan.rows] == [9, 9]
    found = {c.partition_id: c for c in await store.list_checkpoints(hub.fully_qualified_namespace, "telemetry", GROUP)}
    assert {p: (c.sequence_number, c.offset) for p, c in found.items()} == {
        p: (9, hub.events(p)[9].offset) for p in ("0", "1")
    }
    await reset_positions(hub, store, to="earliest", partition_ids=["1"], execute=True)
    assert await stored(store, hub) == {"0": 9, "1": -1}
    listed = await store.list_checkpoints(hub.fully_qualified_namespace, "telemetry", GROUP)
    after = {c.partition_id: c.offset for c in listed}
    assert after["1"] == "-1", "offset -1: the official processor's start of the stream"
    await reset_positions(hub, store, to="latest", execute=True)
    assert await stored(store, hub) == {"0": 49, "1": 49}
    # the reset's own ownership records are released: any consumer may claim at once
    records = await store.list_ownership(hub.fully_qualified_namespace, "telemetry", GROUP)
    assert records and all(o.is_released for o in records)


async def test_live_owners_refuse_an_execute_and_are_named() -> None:
    hub, store = hub_with_minutes(), InMemoryCheckpointStore()
    ns = hub.fully_qualified_namespace
    await store.update_checkpoint(cp(hub, "0", 40))
    await store.claim_ownership([Ownership(ns, "telemetry", GROUP, "0", "worker-a"),
                                 Ownership(ns, "telemetry", GROUP, "1", "worker-b")])
    plan = await reset_positions(hub, store, to="earliest")
    assert plan.live_owners == {"worker-a": ["0"], "worker-b": ["1"]}
    with pytest.raises(OwnershipConflictError, match=r"worker-a \(partition 0\), worker-b \(partition 1\)"):
        await reset_positions(hub, store, to="earliest", execute=True)
    assert await stored(store, hub) == {"0": 40}
    # an owner only of a partition the reset leaves alone does not refuse it (no force: nobody is fenced)
    alone = InMemoryCheckpointStore()
    await alone.update_checkpoint(cp(hub, "0", 40))
    await alone.update_checkpoint(cp(hub, "1", 40))
    await alone.claim_ownership([Ownership(ns, "telemetry", GROUP, "1", "worker-b")])
    done = await reset_positions(hub, alone, to="earliest", partition_ids=["0"], execute=True)
    assert done.live_owners == {} and await stored(alone, hub) == {"0": -1, "1": 40}
    with pytest.raises(OwnershipConflictError, match=r"live owners: worker-b \(partition 1\);"):
        await reset_positions(hub, alone, to="earliest", partition_ids=["1"], execute=True)
    assert await stored(alone, hub) == {"0": -1, "1": 40}


async def test_force_fences_a_paused_owner_it_never_writes_its_old_position_back() -> None:
    hub, store = hub_with_minutes(), InMemoryCheckpointStore()
    ns = hub.fully_qualified_namespace
    [mine] = await store.claim_ownership([Ownership(ns, "telemetry", GROUP, "0", "paused")])
    await store.fence(mine)
    await store.update_checkpoint_fenced(cp(hub, "0", 40), mine)
    # ... the owner is paused here (SIGSTOP, a frozen VM) while the operator resets the group ...
    await reset_positions(hub, store, to="earliest", partition_ids=["0"], execute=True, force=True)
    assert await stored(store, hub) == {"0": -1}
    with pytest.raises(OwnershipLostError):  # ... and resumes, writing the position it had
        await store.update_checkpoint_fenced(cp(hub, "0", 45), mine)
    assert await stored(store, hub) == {"0": -1}


async def test_force_needs_a_store_that_fences() -> None:
    hub, store = hub_with_minutes(), InMemoryCheckpointStore()
    await store.claim_ownership([Ownership(hub.fully_qualified_namespace, "telemetry", GROUP, "0", "a")])

    class Unfenced:  # the SDK's interface: no fence
        async def list_ownership(self, *a: Any) -> Any:
            return await store.list_ownership(*a)

        async def claim_ownership(self, records: Any) -> Any:
            return await store.claim_ownership(records)

        async def update_checkpoint(self, c: Any) -> None:
            await store.update_checkpoint(c)

        async def list_checkpoints(self, *a: Any) -> Any:
            return await store.list_checkpoints(*a)

    from rxhubs.stores import CheckpointStore

    class Plain(Unfenced, CheckpointStore):
        pass

    with pytest.raises(ConfigurationError, match="fences"):
        await reset_positions(hub, Plain(), to="earliest", execute=True, force=True)
    assert await stored(store, hub) == {}
    plan = await reset_positions(hub, Plain(), to="latest", partition_ids=["1"], execute=True)
    assert plan.executed and await stored(store, hub) == {"1": 49}


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"to": T0 - dt.timedelta(seconds=1)}, ConfigurationError, "before the retention of partition 0"),
        ({"to": "earliest", "partition_ids": ["9"]}, NotFoundError, "unknown partition 9 of telemetry: it has 0, 1"),
        ({"to": "earliest", "shift_by": 5}, ConfigurationError, "exactly one of"),
        ({}, ConfigurationError, "exactly one of"),
        ({"to_sequence": {"0": 51}}, ConfigurationError, r"give 0\.\.50"),
        ({"to": dt.datetime(2026, 1, 1)}, ConfigurationError, "zone"),
        ({"to": "yesterday"}, ConfigurationError, "earliest"),
    ],
)
async def test_bad_input_is_a_typed_error_and_writes_nothing(kwargs: Any, error: type, match: str) -> None:
    hub, store = hub_with_minutes(), InMemoryCheckpointStore()
    await store.update_checkpoint(cp(hub, "0", 40))
    with pytest.raises(error, match=match):
        await reset_positions(hub, store, execute=True, **kwargs)
    assert await stored(store, hub) == {"0": 40}
    assert await store.list_ownership(hub.fully_qualified_namespace, "telemetry", GROUP) == []


def test_a_consumer_started_after_a_reset_reads_from_the_new_position() -> None:
    from reactivex.testing import TestScheduler

    import rxhubs

    hub, store = hub_with_minutes(partitions=1), InMemoryCheckpointStore()
    asyncio.run(store.update_checkpoint(cp(hub, "0", 40)))
    asyncio.run(reset_positions(hub, store, shift_by=-10, execute=True))
    scheduler, seen = TestScheduler(), []
    sub = rxhubs.consume(hub, GROUP, store).subscribe(lambda b: seen.extend(e.sequence_number for e in b.events),
                                                      scheduler=scheduler)
    scheduler.advance_to(5.0)
    sub.dispose()
    assert seen[0] == 31 and seen[-1] == 49
