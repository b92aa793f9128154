"""A partition whose handover finishes while a round's claim is in flight is released at once, beside that claim.

Consumer ``a`` holds four partitions; ``b`` joins and ``a`` hands it two. The two partitions' final checkpoint writes
are held until one of ``a``'s later rounds has sent its claim, and that claim is held unanswered: the partitions
become ready while the round waits. Their release must go out meanwhile (rxhubs/balancing/_releases.py): an owner of
1,024 partitions on Azurite, whose rounds' claims of renewals took 4-15 s each, one after another, handed 896
partitions over in steps of one round each (68 s, ``rxhubs bench scale --real``, 2026-11-30).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

import rxhubs
from rxhubs import Checkpoint, Ownership
from rxhubs.stores import CheckpointStore, InMemoryCheckpointStore
from tests.balancing.test_release_in_flight import GROUP, four_partitions, owners, start, until


class HoldClaimWhileDraining(CheckpointStore):
    """``a``'s view of the shared store: the handover's final writes wait for a claim of ``a``'s, which is held."""

    def __init__(self, inner: InMemoryCheckpointStore) -> None:
        self.inner = inner
        self.writes = 0
        self.draining = False
        self.claim_held = asyncio.Event()
        self.let_go = asyncio.Event()
        #: The partitions of each release to ``b``, with whether ``a``'s held claim was answered when it was sent.
        self.sent: list[tuple[set[str], bool]] = []

    async def list_ownership(self, *args: Any) -> list[Ownership]:
        return await self.inner.list_ownership(*args)

    async def claim_ownership(self, claims: Iterable[Ownership]) -> list[Ownership]:
        claims = list(claims)
        handed = {c.partition_id for c in claims if c.owner_id == "b"}
        if handed:
            self.sent.append((handed, self.let_go.is_set()))
        elif self.draining and not self.claim_held.is_set():  # a round's claim while the handover drains: hold it
            self.claim_held.set()
            await self.let_go.wait()
        return await self.inner.claim_ownership(claims)

    async def list_checkpoints(self, *args: Any) -> list[Checkpoint]:
        return await self.inner.list_checkpoints(*args)

    async def update_checkpoint(self, checkpoint: Checkpoint) -> None:
        self.writes += 1
        if self.writes > 4:  # 1-4: each partition's first write; then the two handed partitions' last
            self.draining = True
            await self.claim_held.wait()
        await self.inner.update_checkpoint(checkpoint)


async def test_a_partition_ready_during_a_rounds_claim_is_released_beside_it() -> None:
    hub, inner = four_partitions(), InMemoryCheckpointStore()
    a_store = HoldClaimWhileDraining(inner)
    stops = {"a": rxhubs.Shutdown(), "b": rxhubs.Shutdown()}
    # (an expiration as long as the wait below: a's held claim renews nothing, and on a starved CPU, with the 3 s of
    # the other tests, the partitions expired before their drains ended, which is not what this test is about)
    a = start(hub, "a", a_store, stops["a"], ownership_expiration=30.0)
    await until(lambda: a_store.writes == 4)
    for pid in hub.partition_ids:  # each partition has a position not yet written: its handover writes it
        hub.send([b"more"], partition_id=pid)
    await until(lambda: len(inner.peek(hub.fully_qualified_namespace, hub.eventhub_name, GROUP)[0]) == 4)
    b = start(hub, "b", inner, stops["b"], ownership_expiration=30.0)
    await a_store.claim_held.wait()
    try:
        await asyncio.wait_for(until(lambda: sum(len(p) for p, _ in a_store.sent) == 2), timeout=30.0)
    except TimeoutError:
        raise AssertionError(f"the releases waited for the round's claim: sent {a_store.sent}") from None
    assert [answered for _, answered in a_store.sent] == [False] * len(a_store.sent)  # all beside the held claim
    a_store.let_go.set()
    await until(lambda: sorted(owners(hub, inner).values()) == ["a", "a", "b", "b"])
    handed = set().union(*(p for p, _ in a_store.sent))
    assert {p for p, o in owners(hub, inner).items() if o == "b"} == handed
    for owner in ("a", "b"):
        stops[owner].request()
    await asyncio.gather(a, b)
    assert set(owners(hub, inner).values()) == {""}


class HoldTheHandingClaim(HoldClaimWhileDraining):
    """Holds the claim of ``a``'s first round that saw ``b``: the round that plans the handover."""

    def __init__(self, inner: InMemoryCheckpointStore) -> None:
        super().__init__(inner)
        self.saw_b = False

    async def list_ownership(self, *args: Any) -> list[Ownership]:
        records = await self.inner.list_ownership(*args)
        self.saw_b = self.saw_b or any(r.owner_id == "b" and r.consumer_group.endswith("$presence") for r in records)
        return records

    async def claim_ownership(self, claims: Iterable[Ownership]) -> list[Ownership]:
        claims = list(claims)
        handed = {c.partition_id for c in claims if c.owner_id == "b"}
        if handed:
            self.sent.append((handed, self.let_go.is_set()))
        elif self.saw_b and not self.claim_held.is_set():
            self.claim_held.set()
            await self.let_go.wait()
        return await self.inner.claim_ownership(claims)

    async def update_checkpoint(self, checkpoint: Checkpoint) -> None:
        self.writes += 1
        await self.inner.update_checkpoint(checkpoint)


async def test_the_handover_begins_before_the_claim_of_the_round_that_plans_it() -> None:
    """The round that deals partitions to a newcomer drains them while its own claim (renewals, presence) is in
    flight, and releases them beside it: the claim took 4-15 s at 1,024 partitions on Azurite."""
    hub, inner = four_partitions(), InMemoryCheckpointStore()
    a_store = HoldTheHandingClaim(inner)
    stops = {"a": rxhubs.Shutdown(), "b": rxhubs.Shutdown()}
    a = start(hub, "a", a_store, stops["a"])
    await until(lambda: a_store.writes == 4)
    await until(lambda: len(inner.peek(hub.fully_qualified_namespace, hub.eventhub_name, GROUP)[0]) == 4)
    b = start(hub, "b", inner, stops["b"])
    await a_store.claim_held.wait()
    try:
        await asyncio.wait_for(until(lambda: sum(len(p) for p, _ in a_store.sent) == 2), timeout=30.0)
    except TimeoutError:
        raise AssertionError(f"the handover waited for the planning round's claim: {a_store.sent}") from None
    assert [answered for _, answered in a_store.sent] == [False] * len(a_store.sent)
    a_store.let_go.set()
    await until(lambda: sorted(owners(hub, inner).values()) == ["a", "a", "b", "b"])
    for owner in ("a", "b"):
        stops[owner].request()
    await asyncio.gather(a, b)
    assert set(owners(hub, inner).values()) == {""}
