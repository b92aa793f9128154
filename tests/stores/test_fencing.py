"""Fencing, run against every fenced store: a former owner's checkpoint writes fail and change nothing."""

from __future__ import annotations

from typing import Any

import pytest

from rxhubs import Checkpoint, Ownership
from rxhubs.errors import OwnershipLostError
from rxhubs.stores import FencedCheckpointStore, is_fenced
from tests.stores.conftest import ALL_STORES, CG, FENCED_STORES, HUB, NS, Harness


def own(partition_id: str, owner_id: str, etag: str | None = None) -> Ownership:
    return Ownership(NS, HUB, CG, partition_id, owner_id, None, etag)


def cp(partition_id: str, sequence_number: int) -> Checkpoint:
    return Checkpoint(NS, HUB, CG, partition_id, str(sequence_number * 100), sequence_number)


async def stored(store: Any) -> dict[str, int]:
    return {c.partition_id: c.sequence_number for c in await store.list_checkpoints(NS, HUB, CG)}


async def claim(store: Any, record: Ownership) -> Ownership:
    [won] = await store.claim_ownership([record])
    return won


async def start(store: FencedCheckpointStore, record: Ownership) -> tuple[Ownership, Checkpoint | None]:
    """Claim as a consumer does: claim, then fence before reading where to start."""
    won = await claim(store, record)
    return won, await store.fence(won)


def test_only_the_sdk_adapted_stores_are_unfenced() -> None:
    assert set(FENCED_STORES) == set(ALL_STORES) - {"sdk-official-aio", "sdk-dict-sync"}


async def test_the_current_owner_writes_across_renewals(fenced: Harness) -> None:
    store = fenced.store
    assert is_fenced(store) and isinstance(store, FencedCheckpointStore)
    period, start_at = await start(store, own("0", "a"))
    assert start_at is None
    await store.update_checkpoint_fenced(cp("0", 5), period)
    renewed = await claim(store, own("0", "a", period.etag))
    renewed = await claim(store, own("0", "a", renewed.etag))
    assert renewed.etag != period.etag

    await store.update_checkpoint_fenced(cp("0", 9), period)  # a renewal by the same owner does not fence it

    assert await stored(store) == {"0": 9}
    assert await store.fence(renewed) == cp("0", 9)  # fencing again (a new period) reads the checkpoint


async def test_a_former_owner_is_fenced_once_another_claimed_and_nothing_changes(fenced: Harness) -> None:
    zombie, other = fenced.store, await fenced.another()
    assert isinstance(other, FencedCheckpointStore) and isinstance(zombie, FencedCheckpointStore)
    a, _ = await start(zombie, own("0", "a"))
    await zombie.update_checkpoint_fenced(cp("0", 50), a)

    b, start_at = await start(other, own("0", "b", a.etag))  # a paused past its expiry; b took over
    assert start_at == cp("0", 50)
    with pytest.raises(OwnershipLostError) as lost:
        await zombie.update_checkpoint_fenced(cp("0", 60), a)
    assert not lost.value.retriable
    assert await stored(other) == {"0": 50}

    await other.update_checkpoint_fenced(cp("0", 55), b)
    with pytest.raises(OwnershipLostError):
        await zombie.update_checkpoint_fenced(cp("0", 40), a)  # never backwards, never forwards
    assert await stored(other) == {"0": 55}


async def test_the_fence_alone_fences_before_the_new_owner_wrote_anything(fenced: Harness) -> None:
    zombie, other = fenced.store, await fenced.another()
    assert isinstance(other, FencedCheckpointStore) and isinstance(zombie, FencedCheckpointStore)
    a, _ = await start(zombie, own("1", "a"))
    await zombie.update_checkpoint_fenced(cp("1", 7), a)
    await start(other, own("1", "b", a.etag))

    with pytest.raises(OwnershipLostError):
        await zombie.update_checkpoint_fenced(cp("1", 3), a)
    assert await stored(other) == {"1": 7}


async def test_a_partition_without_checkpoint_is_fenced_too(fenced: Harness) -> None:
    zombie, other = fenced.store, await fenced.another()
    assert isinstance(other, FencedCheckpointStore) and isinstance(zombie, FencedCheckpointStore)
    a, _ = await start(zombie, own("2", "a"))
    b, start_at = await start(other, own("2", "b", a.etag))
    assert start_at is None

    with pytest.raises(OwnershipLostError):
        await zombie.update_checkpoint_fenced(cp("2", 30), a)
    assert await stored(other) == {}
    await other.update_checkpoint_fenced(cp("2", 4), b)
    assert await stored(other) == {"2": 4}


async def test_the_same_owner_reclaiming_begins_a_new_period(fenced: Harness) -> None:
    store = fenced.store
    assert isinstance(store, FencedCheckpointStore)
    first, _ = await start(store, own("3", "a"))
    await store.update_checkpoint_fenced(cp("3", 10), first)
    # its record expired and it claimed it again (same owner id): the fence begins a new period
    second, start_at = await start(store, own("3", "a", first.etag))
    assert start_at == cp("3", 10)
    with pytest.raises(OwnershipLostError):
        await store.update_checkpoint_fenced(cp("3", 12), first)
    await store.update_checkpoint_fenced(cp("3", 11), second)
    # released, then claimed again after a restart with the same owner id: a new period as well
    released = await claim(store, own("3", "", second.etag))
    third, _ = await start(store, own("3", "a", released.etag))
    with pytest.raises(OwnershipLostError):
        await store.update_checkpoint_fenced(cp("3", 20), second)
    await store.update_checkpoint_fenced(cp("3", 21), third)
    assert await stored(store) == {"3": 21}


async def test_a_fence_with_a_stale_record_or_after_a_release_is_refused(fenced: Harness) -> None:
    store = fenced.store
    assert isinstance(store, FencedCheckpointStore)
    a = await claim(store, own("4", "a"))
    b = await claim(store, own("4", "b", a.etag))
    with pytest.raises(OwnershipLostError):
        await store.fence(a)
    await store.fence(b)
    released = await claim(store, own("4", "", b.etag))
    with pytest.raises(OwnershipLostError):
        await store.update_checkpoint_fenced(cp("4", 1), b)  # released: a late write of b's is refused
    with pytest.raises(OwnershipLostError):
        await store.fence(released)  # nobody owns it: nothing to fence for
    assert await stored(store) == {}
