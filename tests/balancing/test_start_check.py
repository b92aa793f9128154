"""A checkpoint outside its partition (a recreated hub, expired events), found at claim; seed checkpoints."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from reactivex.testing import TestScheduler

import rxhubs
from rxhubs import Checkpoint
from rxhubs.errors import CheckpointOutOfRangeError, ConfigurationError
from rxhubs.stores import InMemoryCheckpointStore
from rxhubs.testing import InMemoryEventHub
from tests.support.retention import expire

GROUP = "$Default"


def setup(events: int = 10) -> tuple[InMemoryEventHub, InMemoryCheckpointStore]:
    hub, store = InMemoryEventHub(partition_count=2), InMemoryCheckpointStore()
    for pid in ("0", "1"):
        hub.send([f"{pid}-{i}".encode() for i in range(events)], partition_id=pid)
    return hub, store


def checkpoint(hub: InMemoryEventHub, store: InMemoryCheckpointStore, pid: str, seq: int) -> None:
    cp = Checkpoint(hub.fully_qualified_namespace, hub.eventhub_name, GROUP, pid, None, seq)
    store.observe_update_checkpoint(cp).run()


def stored(hub: InMemoryEventHub, store: InMemoryCheckpointStore) -> dict[str, int]:
    found = store.observe_list_checkpoints(hub.fully_qualified_namespace, hub.eventhub_name, GROUP).run()
    return {c.partition_id: c.sequence_number for c in found}


def run(hub: InMemoryEventHub, store: InMemoryCheckpointStore, until: float, send_at: float | None = None,
        **options: Any) -> tuple[dict[str, list[int]], list[tuple[str, str, Exception]]]:
    scheduler, seen, errors = TestScheduler(), {}, []

    def on_error(context: Any, error: Exception) -> None:
        errors.append((context.partition_id, context.operation, error))

    def each(batch: Any) -> None:
        seen.setdefault(batch.context.partition_id, []).extend(e.sequence_number for e in batch.events)

    pipeline = rxhubs.consume(hub, GROUP, store, load_balancing_interval=1.0, ownership_expiration=3.0,
                              on_partition_error=on_error, **options).pipe(rxhubs.operators.checkpoint(store))
    sub = pipeline.subscribe(each, scheduler=scheduler)
    if send_at is not None:
        scheduler.schedule_absolute(send_at, lambda *_: [hub.send([b"new"] * 3, partition_id=p) for p in "01"])
    scheduler.advance_to(until)
    sub.dispose()
    return seen, errors


def test_today_without_a_check_a_checkpoint_ahead_reads_nothing_and_says_nothing(caplog: Any) -> None:
    hub, store = setup()
    checkpoint(hub, store, "0", 500)  # the hub was recreated: its sequence numbers started over
    with caplog.at_level(logging.WARNING):
        seen, errors = run(hub, store, 20.0, send_at=5.0, checkpoint_out_of_range=None)
    # the in-memory hub reads from its end (the emulator read nothing at all): the new hub's events 0..9 are
    # never read, and nothing is said
    assert not set(seen.get("0", [])) & set(range(10)) and seen["1"] == list(range(13))
    assert errors == [] and caplog.records == []


def test_earliest_warns_moves_the_checkpoint_and_reads_the_new_hub_from_its_start(caplog: Any) -> None:
    hub, store = setup()
    checkpoint(hub, store, "0", 500)
    with caplog.at_level(logging.WARNING, logger="rxhubs.balancing"):
        seen, errors = run(hub, store, 20.0)
    assert seen["0"] == list(range(10)) and seen["1"] == list(range(10))
    assert [(p, op, type(e)) for p, op, e in errors] == [("0", "start", CheckpointOutOfRangeError)]
    [warning] = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert warning.getMessage().startswith(
        "partition 0 of telemetry/$Default: the checkpoint at sequence number 500 is ahead of the partition (it "
        "holds 0..9; was the hub deleted and created again?); restarting it at sequence number 0"
    )
    assert stored(hub, store) == {"0": 9, "1": 9}


def test_latest_skips_to_the_end() -> None:
    hub, store = setup()
    checkpoint(hub, store, "0", 500)
    seen, errors = run(hub, store, 20.0, send_at=10.0, checkpoint_out_of_range="latest")
    assert seen["0"] == [10, 11, 12] and seen["1"] == list(range(13))
    assert len(errors) == 1


def test_fail_stops_only_that_partition_and_keeps_its_checkpoint() -> None:
    hub, store = setup()
    checkpoint(hub, store, "0", 500)
    seen, errors = run(hub, store, 20.0, checkpoint_out_of_range="fail")
    assert "0" not in seen and seen["1"] == list(range(10))
    assert errors and all(p == "0" and op == "start" and isinstance(e, CheckpointOutOfRangeError)
                          for p, op, e in errors)
    assert len(errors) >= 2, "claimed again after its backoff, and refused again"
    assert stored(hub, store)["0"] == 500


def test_a_checkpoint_behind_the_retention_is_named_and_read_from_the_first_retained(caplog: Any) -> None:
    hub, store = setup(40)
    expire(hub, "0", 20)
    checkpoint(hub, store, "0", 4)
    with caplog.at_level(logging.WARNING, logger="rxhubs.balancing"):
        seen, errors = run(hub, store, 10.0)
    assert seen["0"] == list(range(20, 40)) and errors == []
    assert "checkpoint at sequence number 4 is behind of the partition (it holds 20..39; 15 events expired unread)" \
        in caplog.text


def test_a_checkpoint_in_range_is_left_alone(caplog: Any) -> None:
    hub, store = setup()
    checkpoint(hub, store, "0", 9)
    checkpoint(hub, store, "1", -1)
    with caplog.at_level(logging.WARNING):
        seen, errors = run(hub, store, 10.0, send_at=5.0)
    assert seen == {"0": [10, 11, 12], "1": list(range(13))} and errors == [] and caplog.records == []


def test_seed_checkpoint_writes_one_at_claim_where_reading_starts() -> None:
    hub, store = setup()
    scheduler = TestScheduler()
    seen: list[int] = []
    sub = rxhubs.consume(hub, GROUP, store, default_start="@latest", seed_checkpoint=True,
                         load_balancing_interval=1.0).subscribe(
        lambda b: seen.extend(e.sequence_number for e in b.events), scheduler=scheduler)
    scheduler.advance_to(3.0)
    assert stored(hub, store) == {"0": 9, "1": 9}, "a new group at latest: KEDA sees no backlog"
    hub.send([b"x"], partition_id="0")
    scheduler.advance_to(6.0)
    sub.dispose()
    assert seen == [10]


def test_seed_checkpoint_at_earliest_counts_the_whole_partition(caplog: Any) -> None:
    hub, store = setup()
    with caplog.at_level(logging.INFO, logger="rxhubs.balancing"):
        run(hub, store, 0.5, seed_checkpoint=True, checkpoint_out_of_range=None, max_batch_size=1, max_wait=100.0)
    # each partition got its seed, just before its first event (KEDA counts all 10), before anything was read
    seeds = sorted(r.getMessage() for r in caplog.records if "seed_checkpoint" in r.getMessage())
    assert seeds == [f"partition {p}: no checkpoint; seeded one at sequence number -1 (seed_checkpoint)" for p in "01"]
    written = stored(hub, store)  # (the pipeline's own checkpoint of event 0 may have followed it)
    assert set(written) == {"0", "1"} and set(written.values()) <= {-1, 0}, written


def test_bad_options_are_refused_at_call_time() -> None:
    hub, store = setup()
    with pytest.raises(ConfigurationError, match="checkpoint_out_of_range"):
        rxhubs.consume(hub, GROUP, store, checkpoint_out_of_range="oldest")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="seed_checkpoint"):
        rxhubs.consume(hub, GROUP, store, seed_checkpoint="yes")  # type: ignore[arg-type]


def test_a_partition_handed_over_is_not_checked_again() -> None:
    """``a`` checks both partitions at its claim; ``b`` joins and is handed one: no management call for it.

    The former owner read the partition until it handed it over and wrote its checkpoint where it stopped: it is
    in range. A claim that was not a handover (``b`` taking partitions back after ``a`` stopped) is checked.
    """
    hub, store = setup()
    for pid in "01":
        checkpoint(hub, store, pid, 4)
    asked: list[tuple[float, str]] = []
    scheduler = TestScheduler()
    real = hub.get_partition_properties

    async def counted(partition_id: str) -> Any:
        asked.append((scheduler.clock, partition_id))
        return await real(partition_id)

    hub.get_partition_properties = counted  # type: ignore[method-assign]
    handed: list[str] = []

    def consumer(owner: str, on_init: Any = None) -> Any:
        return rxhubs.consume(hub, GROUP, store, owner_id=owner, load_balancing_interval=1.0, ownership_expiration=3.0,
                              on_partition_initialize=on_init).pipe(rxhubs.operators.checkpoint(store))

    sub_a = consumer("a").subscribe(scheduler=scheduler)
    scheduler.advance_to(2.0)
    assert sorted(p for _, p in asked) == ["0", "1"]  # a's claim of both
    asked.clear()
    sub_b = consumer("b", lambda context: handed.append(context.partition_id)).subscribe(scheduler=scheduler)
    scheduler.advance_to(6.0)
    assert len(handed) == 1, handed  # a handed one partition over to b
    assert asked == []
    sub_a.dispose()  # a's record of the other partition expires: b claims it, and checks it
    scheduler.advance_to(12.0)
    assert len(handed) == 2 and [p for _, p in asked] == [handed[1]], (handed, asked)
    sub_b.dispose()
