"""The in-memory store: virtual time under TestScheduler, Rx-native verbs, fault injection, call counters."""

from __future__ import annotations

import doctest
from typing import Any

import pytest
import reactivex
from reactivex import operators as ops
from reactivex.testing import ReactiveTest, TestScheduler

import rxhubs.stores
import rxhubs.stores._blob
import rxhubs.stores._memory
import rxhubs.stores._sdk
import rxhubs.stores._sqlite
from rxhubs import Checkpoint, Ownership
from rxhubs._rx import from_coroutine
from rxhubs.errors import ConfigurationError, StoreError
from rxhubs.stores import InMemoryCheckpointStore

NS, HUB, CG = "ns", "hub", "$Default"


def claim(partition_id: str, owner_id: str, etag: str | None = None) -> Ownership:
    return Ownership(NS, HUB, CG, partition_id, owner_id, None, etag)


def test_claims_are_stamped_with_the_subscribing_schedulers_virtual_clock() -> None:
    scheduler = TestScheduler()
    store = InMemoryCheckpointStore()
    won: list[Ownership] = []

    def claim_at(time: float, owner: str) -> None:
        def action(*_: Any) -> None:
            etag = won[-1].etag if won else None
            store.observe_claim_ownership([claim("0", owner, etag)]).subscribe(won.extend, scheduler=scheduler)

        scheduler.schedule_absolute(time, action)

    claim_at(30.0, "a")
    claim_at(45.5, "b")
    scheduler.start()

    assert [(o.owner_id, o.last_modified_time) for o in won] == [("a", 30.0), ("b", 45.5)]
    [listed] = store.observe_list_ownership(NS, HUB, CG).run()
    assert listed.last_modified_time == 45.5


def test_a_renewal_loop_runs_in_virtual_time_through_the_kernel() -> None:
    """The path rxhubs takes to every store: the async verb, stepped on the scheduler's clock."""
    scheduler = TestScheduler()
    store = InMemoryCheckpointStore()
    etags: list[str | None] = [None]

    def renew(_: int) -> reactivex.Observable[list[Ownership]]:
        return from_coroutine(lambda: store.claim_ownership([claim("0", "me", etags[-1])])).pipe(
            ops.do_action(lambda won: etags.append(won[0].etag))
        )

    source = reactivex.interval(10.0, scheduler=scheduler).pipe(ops.take(3), ops.concat_map(renew))
    results = scheduler.start(lambda: source.pipe(ops.map(lambda won: won[0].last_modified_time)), disposed=1000)

    assert results.messages == [
        ReactiveTest.on_next(210.0, 210.0),
        ReactiveTest.on_next(220.0, 220.0),
        ReactiveTest.on_next(230.0, 230.0),
        ReactiveTest.on_completed(230.0),
    ]
    assert store.calls["claim_ownership"] == 3


def test_an_injected_failure_goes_to_on_error_not_out_of_subscribe() -> None:
    store = InMemoryCheckpointStore()
    store.fail("update_checkpoint")
    errors: list[Exception] = []
    values: list[object] = []

    store.observe_update_checkpoint(Checkpoint(NS, HUB, CG, "0", "1", 1)).subscribe(values.append, errors.append)
    store.observe_update_checkpoint(Checkpoint(NS, HUB, CG, "0", "2", 2)).subscribe(values.append, errors.append)

    assert len(errors) == 1 and isinstance(errors[0], StoreError) and errors[0].retriable
    assert values == [None]
    assert [c.sequence_number for c in store.observe_list_checkpoints(NS, HUB, CG).run()] == [2]


async def test_fail_counts_down_per_verb() -> None:
    store = InMemoryCheckpointStore()
    store.fail("list_ownership", times=2)

    for _ in range(2):
        with pytest.raises(StoreError, match="injected failure of list_ownership"):
            await store.list_ownership(NS, HUB, CG)
    await store.update_checkpoint(Checkpoint(NS, HUB, CG, "0", "1", 1))  # other verbs unaffected
    assert await store.list_ownership(NS, HUB, CG) == []
    assert store.calls == {"list_ownership": 3, "update_checkpoint": 1}


async def test_fail_any_verb_until_healed_with_a_custom_error() -> None:
    store = InMemoryCheckpointStore()
    boom = StoreError("disk on fire", retriable=False)
    store.fail(times=None, error=boom)

    for _ in range(3):
        with pytest.raises(StoreError) as info:
            await store.claim_ownership([claim("0", "a")])
        assert info.value is boom
    store.heal()
    assert [o.owner_id for o in await store.claim_ownership([claim("0", "a")])] == ["a"]


async def test_unavailable_until_set_back() -> None:
    store = InMemoryCheckpointStore()
    store.available = False
    with pytest.raises(StoreError, match="unavailable") as info:
        await store.list_checkpoints(NS, HUB, CG)
    assert info.value.retriable is True
    store.available = True
    assert await store.list_checkpoints(NS, HUB, CG) == []


@pytest.mark.parametrize(("verb", "times"), [("delete", 1), ("list_ownership", 0)])
def test_bad_fault_injection_arguments(verb: str, times: int) -> None:
    with pytest.raises(ConfigurationError):
        InMemoryCheckpointStore().fail(verb, times=times)


async def test_the_async_verbs_use_the_given_clock() -> None:
    store = InMemoryCheckpointStore(clock=lambda: 1234.5)
    [won] = await store.claim_ownership([claim("0", "a")])
    assert won.last_modified_time == 1234.5


async def test_counters_allow_asserting_at_most_one_checkpoint_per_interval() -> None:
    store = InMemoryCheckpointStore()
    await store.update_checkpoints([Checkpoint(NS, HUB, CG, p, "1", 1) for p in "0123"])
    assert store.calls["update_checkpoint"] == 4
    assert "checkpoints=4" in repr(store)


@pytest.mark.parametrize(
    "module", [rxhubs.stores, rxhubs.stores._memory, rxhubs.stores._sdk, rxhubs.stores._sqlite, rxhubs.stores._blob]
)
def test_docstring_examples_run(module: Any) -> None:
    failures, attempted = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert attempted > 0 and failures == 0
