"""Fences that begin together read through two listings (Azurite), and decide exactly what each would alone.

A consumer handed many partitions at once fences them all at once. Their first reads (the ownership blob: still
at the version handed over? the checkpoint blob: where to start, the etag to stamp) go out as one listing of the
group's ownership blobs and one of its checkpoint blobs, instead of two ``HEAD`` requests per partition. Counted
in the storage client's own pipeline. Each fence still returns its checkpoint (and state), refuses a partition
another consumer claimed meanwhile, and fences the former owner out.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

from rxhubs import Checkpoint, Ownership
from rxhubs.errors import OwnershipLostError
from rxhubs.stores import BlobCheckpointStore, _blob_fence_reads, _blob_listing

NS, HUB, CG = "ns.example", "batch", "$Default"
PARTITIONS = 8  # 0-5 checkpointed, 6 never checkpointed, 7 claimed by a third consumer before the new owner's fence


class Requests:
    """``(method, blob kind)`` of every request the client's pipeline sent."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    def __call__(self, request: Any) -> None:
        http = request.http_request
        url = str(http.url)
        kind = next((k for k in ("ownership", "checkpoint") if f"/{k}/" in url), "list" if "comp=list" in url else "")
        self.seen.append((http.method, kind))


def own(pid: int, owner: str, etag: str | None = None) -> Ownership:
    return Ownership(NS, HUB, CG, str(pid), owner, None, etag)


async def handed_over(
    store: BlobCheckpointStore, state: bytes | None = None
) -> tuple[list[Ownership], list[Ownership]]:
    """``a`` owned and checkpointed the partitions; ``b`` claimed them from it; ``c`` took partition 7 from ``b``."""
    a = await store.claim_ownership([own(p, "a") for p in range(PARTITIONS)])
    for record in sorted(a, key=lambda o: int(o.partition_id)):
        pid = int(record.partition_id)
        await store.fence(record)
        if pid < 6:
            checkpoint = Checkpoint(NS, HUB, CG, str(pid), str(pid * 10), pid)
            if state is not None and pid == 0:
                await store.commit_state(checkpoint, record, state)
            else:
                await store.update_checkpoint_fenced(checkpoint, record)
    b = await store.claim_ownership([own(int(o.partition_id), "b", o.etag) for o in a])
    by_pid = {o.partition_id: o for o in b}
    await store.claim_ownership([own(7, "c", by_pid["7"].etag)])
    return sorted(a, key=lambda o: int(o.partition_id)), [by_pid[str(p)] for p in range(PARTITIONS)]


@pytest.mark.parametrize("with_state", [False, True], ids=["fence", "fence_with_state"])
async def test_fences_that_begin_together_read_two_listings_and_each_decides_as_alone(
    azurite: Any, blob_container: str, with_state: bool
) -> None:
    requests = Requests()
    async with BlobCheckpointStore.from_connection_string(
        azurite.connection_string, blob_container, raw_request_hook=requests
    ) as store:
        a, b = await handed_over(store, b"committed state" if with_state else None)
        requests.seen.clear()
        if with_state:
            outcomes = await asyncio.gather(*(store.fence_with_state(o) for o in b), return_exceptions=True)
        else:
            outcomes = await asyncio.gather(*(store.fence(o) for o in b), return_exceptions=True)

        counts = Counter(requests.seen)
        # two listings, no HEAD; one stamp per checkpoint blob of a partition still b's; the state's body read once
        assert counts[("GET", "list")] == 2, requests.seen
        assert not [r for r in requests.seen if r[0] == "HEAD"], requests.seen
        assert counts[("PUT", "checkpoint")] == 6, requests.seen
        assert counts[("GET", "checkpoint")] == (1 if with_state else 0), requests.seen

        starts = [o[0] if isinstance(o, tuple) else o for o in outcomes]
        for pid in range(6):
            start = starts[pid]
            assert isinstance(start, Checkpoint) and start.sequence_number == pid, (pid, outcomes[pid])
        if with_state:
            assert outcomes[0] == (starts[0], b"committed state")
        assert starts[6] is None
        assert isinstance(outcomes[7], OwnershipLostError), outcomes[7]  # c claimed it: b stamps nothing

        # the former owner is fenced out of every partition b fenced; b writes
        for pid in range(6):
            with pytest.raises(OwnershipLostError):
                await store.update_checkpoint_fenced(Checkpoint(NS, HUB, CG, str(pid), "1", 1), a[pid])
            await store.update_checkpoint_fenced(Checkpoint(NS, HUB, CG, str(pid), "99", 99), b[pid])
        assert {c.partition_id: c.sequence_number for c in await store.list_checkpoints(NS, HUB, CG)} == {
            str(p): 99 for p in range(6)
        }


async def test_a_few_fences_read_their_blobs_and_a_client_that_cannot_list_so_does_too(
    azurite: Any, blob_container: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    requests = Requests()
    async with BlobCheckpointStore.from_connection_string(
        azurite.connection_string, blob_container, raw_request_hook=requests
    ) as store:
        _, b = await handed_over(store)
        few = b[: _blob_fence_reads.BATCH - 1]
        requests.seen.clear()
        starts = await asyncio.gather(*(store.fence(o) for o in few))
        assert [s.sequence_number if s else None for s in starts] == list(range(len(few)))
        assert Counter(requests.seen)[("HEAD", "ownership")] == len(few), requests.seen
        assert ("GET", "list") not in requests.seen

        async def cannot(client: Any, prefix: str, page_size: int | None = None) -> None:
            return None

        monkeypatch.setattr(_blob_listing, "list_blobs", cannot)
        monkeypatch.setattr(_blob_fence_reads, "list_blobs", cannot)
        rest = b[len(few) : 7]
        requests.seen.clear()
        starts = await asyncio.gather(*(store.fence(o) for o in rest))
        assert [s.sequence_number if s else None for s in starts] == [p if p < 6 else None for p in range(len(few), 7)]
        assert Counter(requests.seen)[("HEAD", "ownership")] == len(rest), requests.seen


async def test_fences_list_only_when_they_are_a_share_of_the_blobs_listed(azurite: Any, blob_container: str) -> None:
    """A listing costs the service about one read per :data:`LISTED_PER_READ` blobs it returns: with 64 ownership
    blobs (the rounds' listing says so), 3 fences together read their blobs (6 ``HEAD``), 8 list (2 listings)."""
    requests = Requests()
    many = 8 * _blob_fence_reads.LISTED_PER_READ
    async with BlobCheckpointStore.from_connection_string(
        azurite.connection_string, blob_container, raw_request_hook=requests
    ) as store:
        a = await store.claim_ownership([own(p, "a") for p in range(many)])
        b = await store.claim_ownership([own(int(o.partition_id), "b", o.etag) for o in a])
        b.sort(key=lambda o: int(o.partition_id))
        assert len(await store.list_ownership(NS, HUB, CG)) == many
        for fences, listings, heads in ((_blob_fence_reads.BATCH, 0, 2 * _blob_fence_reads.BATCH),
                                        (many // _blob_fence_reads.LISTED_PER_READ, 2, 0)):
            batch, b = b[:fences], b[fences:]
            requests.seen.clear()
            await asyncio.gather(*(store.fence(o) for o in batch))
            counts = Counter(requests.seen)
            assert (counts[("GET", "list")], counts[("HEAD", "ownership")] + counts[("HEAD", "checkpoint")]) == (
                listings, heads), requests.seen
