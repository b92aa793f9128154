"""The blob store's own listing (``rxhubs.stores._blob_listing``) on a real Azurite: what it reads is exactly what
azure-storage-blob's ``list_blobs`` reads, page after page, and the store really lists with it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from azure.storage.blob.aio import ContainerClient

from rxhubs import Ownership
from rxhubs.stores import BlobCheckpointStore
from rxhubs.stores import _blob_listing as listing
from rxhubs.testing._azurite import ACCOUNT_KEY, Azurite
from tests.stores.conftest import CG, HUB, NS

pytestmark = pytest.mark.azurite

PREFIX = f"{NS}/{HUB}/{CG}/ownership/".lower()


@pytest.fixture
async def store(azurite: Azurite, blob_container: str) -> AsyncIterator[BlobCheckpointStore]:
    async with BlobCheckpointStore.from_connection_string(azurite.connection_string, blob_container) as s:
        yield s


async def sdk_listing(client: ContainerClient, prefix: str) -> list[listing.Listed]:
    return [
        (b.name, {k.lower(): v or "" for k, v in (b.metadata or {}).items()}, b.etag, b.last_modified.timestamp(),
         b.size)
        async for b in client.list_blobs(name_starts_with=prefix, include=["metadata"])
    ]


def counting(monkeypatch: pytest.MonkeyPatch, used: list[object]) -> None:
    """Note in ``used`` whether each listing the store makes went through the store's own listing (True) or not."""
    fast = listing.list_blobs

    async def counted(client: Any, prefix: str, page_size: int | None = None) -> Any:
        result = await fast(client, prefix, page_size)
        used.append(result is not None)
        return result

    monkeypatch.setattr(listing, "list_blobs", counted)


async def test_the_listing_reads_what_the_sdk_reads_page_after_page(store: BlobCheckpointStore) -> None:
    await store.claim_ownership([Ownership(NS, HUB, CG, str(p), f"owner-{p % 3}") for p in range(7)])
    await store.claim_ownership([Ownership(NS, HUB, CG, "7", "")])  # released: an empty metadata value
    client: Any = store._client
    expected = await sdk_listing(client, PREFIX)
    assert len(expected) == 8 and expected[7][1] == {"ownerid": ""}

    for page_size in (None, 3):  # 3: three pages, the last one short
        listed = await listing.list_blobs(client, PREFIX, page_size=page_size)
        assert listed is not None
        assert [(n, m, e.strip('"') if e else e, t, z) for n, m, e, t, z in listed] == [
            (n, m, e.strip('"') if e else e, t, z) for n, m, e, t, z in expected
        ]
    assert (await listing.list_blobs(client, PREFIX))[7][1] == {"ownerid": ""}  # type: ignore[index]
    assert await listing.list_blobs(client, PREFIX + "nothing-here/") == []


async def test_the_store_lists_with_it_and_falls_back_to_the_sdk_when_it_cannot(
    store: BlobCheckpointStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    await store.claim_ownership([Ownership(NS, HUB, CG, str(p), "a") for p in range(3)])
    used: list[object] = []
    counting(monkeypatch, used)
    owners = {o.partition_id: o.owner_id for o in await store.list_ownership(NS, HUB, CG)}
    assert owners == {"0": "a", "1": "a", "2": "a"} and used == [True]

    async def refused(client: Any, prefix: str, page_size: int | None = None) -> Any:
        used.append(None)
        return None  # what a non-200 answer or an unparsable body gives: the SDK lists instead

    monkeypatch.setattr(listing, "list_blobs", refused)
    assert {o.partition_id: o.owner_id for o in await store.list_ownership(NS, HUB, CG)} == owners
    assert used == [True, None]


async def test_a_store_on_a_sas_url_lists_with_it_too(
    azurite: Azurite, blob_container: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The SAS token is the URL's query: the listing's own parameters are added to it, not after a second '?'."""
    from datetime import UTC, datetime, timedelta

    from azure.storage.blob import ContainerSasPermissions, generate_container_sas

    sas = generate_container_sas(
        "devstoreaccount1", blob_container, account_key=ACCOUNT_KEY,
        permission=ContainerSasPermissions(read=True, write=True, create=True, list=True, add=True),
        expiry=datetime.now(UTC) + timedelta(hours=1),
    )
    used: list[object] = []
    counting(monkeypatch, used)
    async with BlobCheckpointStore.from_connection_string(azurite.connection_string, blob_container) as keyed:
        await keyed.claim_ownership([Ownership(NS, HUB, CG, "0", "a")])  # creates the container
    async with BlobCheckpointStore(f"{azurite.blob_endpoint}?{sas}", blob_container) as store:
        assert "sig=" in store._client.url  # type: ignore[union-attr]
        assert [o.owner_id for o in await store.list_ownership(NS, HUB, CG)] == ["a"]
    assert used == [True]


def test_anything_but_a_listing_is_refused() -> None:
    assert listing.parse_listing(b"not xml") is None
    assert listing.parse_listing(b"<EnumerationResults><Marker/></EnumerationResults>") is None  # no Blobs
    bad_date = (
        b"<EnumerationResults><Blobs><Blob><Name>a</Name><Properties><Last-Modified>yesterday</Last-Modified>"
        b"</Properties></Blob></Blobs></EnumerationResults>"
    )
    assert listing.parse_listing(bad_date) is None
    encoded = (
        b'<EnumerationResults><Blobs><Blob><Name Encoded="true">a%EF%BF%BEb</Name><Properties/></Blob></Blobs>'
        b"<NextMarker>m2</NextMarker></EnumerationResults>"
    )
    assert listing.parse_listing(encoded) == ([("a\ufffeb", {}, None, None, None)], "m2")
