"""The handover benchmark runs each side's blob store as users pass it, and counts every HTTP request it sends.

Against Azurite: the rxhubs side's store is ``BlobCheckpointStore`` itself (so rxhubs fences with it, as it does
with the store a user passes), its requests are counted in the storage client's pipeline (the fence's too, which
a proxy around the four verbs never saw), and the official store's requests are counted the same way (a claim of
two partitions is two requests, not one call).
"""

from __future__ import annotations

from typing import Any

from rxhubs import Checkpoint, Ownership
from rxhubs.bench.handover._worker import Record, rx_store
from rxhubs.errors import OwnershipLostError
from rxhubs.stores import BlobCheckpointStore, is_fenced

NS, HUB, CG = "ns.example", "handover", "$Default"


async def create(conn: str, container: str) -> None:
    from azure.storage.blob.aio import ContainerClient

    async with ContainerClient.from_connection_string(conn, container) as client:
        await client.create_container()


def own(pid: str, owner: str, etag: str | None = None) -> Ownership:
    return Ownership(NS, HUB, CG, pid, owner, None, etag)


async def test_the_rxhubs_side_is_the_fenced_blob_store_and_every_request_is_counted(
    azurite: Any, blob_container: str
) -> None:
    record = Record("b")
    store = rx_store(azurite.connection_string, blob_container, record)
    assert isinstance(store, BlobCheckpointStore) and is_fenced(store)
    async with store:
        [a] = await store.claim_ownership([own("0", "a")])
        await store.fence(a)
        await store.update_checkpoint_fenced(Checkpoint(NS, HUB, CG, "0", "10", 1), a)
        before = record.store_calls
        [b] = await store.claim_ownership([own("0", "b", a.etag)])
        assert record.won == {"0": record.won["0"]}  # the claim's answer was noted
        start, _ = await store.fence_with_state(b)  # what rxhubs calls on a store that keeps state, as this one does
        assert start is not None and start.sequence_number == 1
        assert "0" in record.fenced
        # the fence's requests were counted: the claim is one, the fence at least its write of the checkpoint blob
        assert record.store_calls - before >= 2
        assert record.requests["PUT checkpoint"] >= 2  # the first checkpoint's write, and the fence's stamp
        assert record.requests["HEAD ownership"] >= 1  # the fence's check of the ownership blob
        try:  # the former owner's write is refused: the bench's store fences as users' does
            await store.update_checkpoint_fenced(Checkpoint(NS, HUB, CG, "0", "5", 0), a)
        except OwnershipLostError:
            pass
        else:
            raise AssertionError("the former owner's checkpoint was written: the bench's store does not fence")
        listed_before = record.requests["GET list"]
        await store.list_ownership(NS, HUB, CG)
        assert record.requests["GET list"] == listed_before + 1
        assert record.store_calls == sum(record.requests.values())
        # every request's answer was timed, under the same key
        assert {k: len(v) for k, v in record.request_seconds.items()} == dict(record.requests)


async def test_the_unfenced_comparison_is_not_fenced_and_still_counted(azurite: Any, blob_container: str) -> None:
    await create(azurite.connection_string, blob_container)
    record = Record("a")
    store = rx_store(azurite.connection_string, blob_container, record, fenced=False)
    try:
        assert not is_fenced(store)
        await store.claim_ownership([own("0", "a"), own("1", "a")])
        assert record.requests["PUT ownership"] == 2 and record.store_calls == 2
    finally:
        await store.close()


async def test_the_official_store_is_counted_per_request(azurite: Any, blob_container: str) -> None:
    from azure.eventhub.extensions.checkpointstoreblobaio import BlobCheckpointStore as Official

    await create(azurite.connection_string, blob_container)
    record = Record()
    official = Official.from_connection_string(
        azurite.connection_string, blob_container, raw_request_hook=record.count_request
    )
    async with official:
        claims = [{"fully_qualified_namespace": NS, "eventhub_name": HUB, "consumer_group": CG,
                   "partition_id": pid, "owner_id": "sdk"} for pid in ("0", "1")]
        won = await official.claim_ownership(claims)
        assert len(won) == 2
        # one request per partition at least (not one per call): a first claim tries the metadata, then uploads
        assert record.requests["PUT ownership"] >= 2
        listed = record.store_calls
        await official.list_ownership(NS, HUB, CG)
        assert record.store_calls == listed + 1
