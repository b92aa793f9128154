"""The checkpoint store contract, run against every store (rxhubs.stores._contract states it in prose)."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from rxhubs import Checkpoint, Ownership
from rxhubs.stores import CheckpointStore
from tests.stores.conftest import CG, CORRUPTIONS, HUB, NS, Harness


def own(partition_id: str, owner_id: str, etag: str | None = None, *, hub: str = HUB, cg: str = CG) -> Ownership:
    return Ownership(NS, hub, cg, partition_id, owner_id, None, etag)


def cp(partition_id: str, sequence_number: int, *, hub: str = HUB, cg: str = CG, ns: str = NS) -> Checkpoint:
    return Checkpoint(ns, hub, cg, partition_id, str(sequence_number * 100), sequence_number)


async def owners(store: CheckpointStore, *, hub: str = HUB, cg: str = CG) -> dict[str, str]:
    return {o.partition_id: o.owner_id for o in await store.list_ownership(NS, hub, cg)}


async def test_an_unknown_consumer_group_has_no_records(harness: Harness) -> None:
    assert await harness.store.list_ownership(NS, HUB, "nobody") == []
    assert await harness.store.list_checkpoints(NS, HUB, "nobody") == []


async def test_a_claim_without_etag_creates_and_the_store_sets_etag_and_time(harness: Harness) -> None:
    before = time.time()
    claim = Ownership(NS, HUB, CG, "0", "consumer-a", last_modified_time=123.0)
    [won] = await harness.store.claim_ownership([claim])
    after = time.time()

    assert (won.partition_id, won.owner_id) == ("0", "consumer-a")
    assert won.etag and not won.etag.startswith('"') and not won.etag.endswith('"')
    assert won.last_modified_time is not None and won.last_modified_time != 123.0
    assert before - 2.0 <= won.last_modified_time <= after + 2.0  # blob times have one-second resolution
    [listed] = await harness.store.list_ownership(NS, HUB, CG)
    assert listed == won


async def test_a_claim_without_etag_loses_if_the_record_exists_and_only_that_partition(harness: Harness) -> None:
    await harness.store.claim_ownership([own("0", "a")])

    won = await harness.store.claim_ownership([own("0", "b"), own("1", "b"), own("2", "b")])

    if harness.create_only_enforced:
        assert sorted(o.partition_id for o in won) == ["1", "2"]
        assert await owners(harness.store) == {"0": "a", "1": "b", "2": "b"}
    else:  # the official store on Azurite (see Harness.create_only_enforced): this pins the known gap
        assert sorted(o.partition_id for o in won) == ["0", "1", "2"]


async def test_a_claim_with_the_current_etag_wins_and_changes_the_etag(harness: Harness) -> None:
    [first] = await harness.store.claim_ownership([own("0", "a")])

    [renewed] = await harness.store.claim_ownership([own("0", "a", first.etag)])
    [stolen] = await harness.store.claim_ownership([own("0", "b", renewed.etag)])

    assert len({first.etag, renewed.etag, stolen.etag}) == 3
    assert await owners(harness.store) == {"0": "b"}
    [listed] = await harness.store.list_ownership(NS, HUB, CG)
    assert listed.etag == stolen.etag


async def test_a_stale_etag_fails_for_that_partition_only(harness: Harness) -> None:
    listed = {o.partition_id: o for o in await harness.store.claim_ownership([own(p, "a") for p in "012"])}
    await harness.store.claim_ownership([own("1", "a", listed["1"].etag)])  # a renewal: "1" changes

    won = await harness.store.claim_ownership([own(p, "b", listed[p].etag) for p in "012"])

    assert sorted(o.partition_id for o in won) == ["0", "2"]
    assert await owners(harness.store) == {"0": "b", "1": "a", "2": "b"}


async def test_a_claim_with_an_etag_loses_when_there_is_no_record(harness: Harness) -> None:
    [elsewhere] = await harness.store.claim_ownership([own("0", "a")])

    assert await harness.store.claim_ownership([own("7", "a", elsewhere.etag)]) == []
    assert await owners(harness.store) == {"0": "a"}


async def test_release_keeps_the_record_claimable_with_its_etag_only(harness: Harness) -> None:
    [mine] = await harness.store.claim_ownership([own("0", "a")])
    [released] = await harness.store.claim_ownership([own("0", "", mine.etag)])

    [listed] = await harness.store.list_ownership(NS, HUB, CG)
    assert listed.is_released and listed.etag == released.etag
    if harness.create_only_enforced:
        assert await harness.store.claim_ownership([own("0", "b")]) == []  # create-only: the record exists
    [taken] = await harness.store.claim_ownership([own("0", "b", listed.etag)])
    assert taken.owner_id == "b"


async def test_checkpoints_overwrite_per_partition(harness: Harness) -> None:
    await harness.store.update_checkpoint(cp("0", 5))
    await harness.store.update_checkpoint(cp("1", 9))
    await harness.store.update_checkpoint(cp("0", 6))

    listed = {c.partition_id: c for c in await harness.store.list_checkpoints(NS, HUB, CG)}
    assert listed == {"0": cp("0", 6), "1": cp("1", 9)}
    assert listed["0"].position().value == 6


async def test_a_checkpoint_may_go_backwards_the_store_does_not_judge(harness: Harness) -> None:
    await harness.store.update_checkpoint(cp("0", 50))
    await harness.store.update_checkpoint(cp("0", 10))

    assert [c.sequence_number for c in await harness.store.list_checkpoints(NS, HUB, CG)] == [10]


async def test_a_checkpoint_without_offset_round_trips(harness: Harness) -> None:
    await harness.store.update_checkpoint(Checkpoint(NS, HUB, CG, "0", None, 41))

    [listed] = await harness.store.list_checkpoints(NS, HUB, CG)
    assert (listed.offset, listed.sequence_number) == (None, 41)


async def test_keys_isolate_namespaces_hubs_and_consumer_groups(harness: Harness) -> None:
    await harness.store.claim_ownership([own("0", "a"), own("0", "x", hub="other-hub"), own("0", "y", cg="etl")])
    await harness.store.update_checkpoint(cp("0", 1))
    await harness.store.update_checkpoint(cp("0", 2, hub="other-hub"))
    await harness.store.update_checkpoint(cp("0", 3, cg="etl"))
    await harness.store.update_checkpoint(cp("0", 4, ns="elsewhere.servicebus.windows.net"))

    assert await owners(harness.store) == {"0": "a"}
    assert await owners(harness.store, hub="other-hub") == {"0": "x"}
    assert await owners(harness.store, cg="etl") == {"0": "y"}
    assert [c.sequence_number for c in await harness.store.list_checkpoints(NS, HUB, CG)] == [1]
    assert [c.sequence_number for c in await harness.store.list_checkpoints(NS, HUB, "etl")] == [3]
    assert await harness.store.list_checkpoints(NS, HUB, "$Default-2") == []


async def test_keys_are_case_insensitive_and_listings_use_the_callers_spelling(harness: Harness) -> None:
    await harness.store.claim_ownership([own("0", "a")])
    await harness.store.update_checkpoint(cp("0", 1))

    [o] = await harness.store.list_ownership(NS.upper(), HUB.lower(), CG.upper())
    [c] = await harness.store.list_checkpoints(NS.upper(), HUB.lower(), CG.upper())
    assert (o.fully_qualified_namespace, o.eventhub_name, o.consumer_group) == (NS.upper(), HUB.lower(), CG.upper())
    assert (c.fully_qualified_namespace, c.eventhub_name, c.consumer_group) == (NS.upper(), HUB.lower(), CG.upper())
    if harness.create_only_enforced:
        assert await harness.store.claim_ownership([Ownership(NS.lower(), HUB, "$default", "0", "b")]) == []


async def test_an_empty_claim_claims_nothing(harness: Harness) -> None:
    assert await harness.store.claim_ownership([]) == []
    assert await harness.store.list_ownership(NS, HUB, CG) == []


@pytest.mark.parametrize("claimers", [8])
async def test_concurrent_claimers_exactly_one_wins_each_round(harness: Harness, claimers: int) -> None:
    stores = [harness.store] + [await harness.another() for _ in range(claimers - 1)]

    # Round 0: everyone creates partition "0" at once.
    if harness.create_only_enforced:
        results = await asyncio.gather(*(s.claim_ownership([own("0", f"c{i}")]) for i, s in enumerate(stores)))
        winners = [i for i, won in enumerate(results) if won]
        assert len(winners) == 1
        assert await owners(harness.store) == {"0": f"c{winners[0]}"}
    else:
        await harness.store.claim_ownership([own("0", "c0")])

    # Rounds 1..5: everyone read the same etag, everyone tries to steal with it at once.
    for round_ in range(1, 6):
        [current] = await harness.store.list_ownership(NS, HUB, CG)
        results = await asyncio.gather(
            *(s.claim_ownership([own("0", f"r{round_}c{i}", current.etag)]) for i, s in enumerate(stores))
        )
        winners = [i for i, won in enumerate(results) if won]
        assert len(winners) == 1, f"round {round_}: winners {winners}"
        assert await owners(harness.store) == {"0": f"r{round_}c{winners[0]}"}


async def test_malformed_records_are_logged_and_treated_as_absent_or_released(
    corruptible: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    store = corruptible.store
    assert corruptible.corrupt is not None
    caplog.set_level(logging.WARNING, logger="rxhubs.stores")
    for kind in CORRUPTIONS:
        await corruptible.corrupt(kind)
    await store.update_checkpoint(cp("3", 30))
    await store.claim_ownership([own("3", "a")])

    ownership = {o.partition_id: o for o in await store.list_ownership(NS, HUB, CG)}
    checkpoints = await store.list_checkpoints(NS, HUB, CG)

    assert ownership["0"].owner_id == "" and ownership["0"].etag  # released, claimable with its etag
    assert ownership["3"].owner_id == "a"
    assert set(ownership) == {"0", "3"}
    assert checkpoints == [cp("3", 30)]
    warnings = [r for r in caplog.records if r.name == "rxhubs.stores" and r.levelno == logging.WARNING]
    assert len(warnings) >= 4
    [repaired] = await store.claim_ownership([own("0", "b", ownership["0"].etag)])
    assert repaired.owner_id == "b"
    assert (await owners(store))["0"] == "b"
