"""The blob store on a real Azurite: the official layout, interop with the official store both ways, errors."""

from __future__ import annotations

import asyncio
import logging
import traceback
from collections.abc import AsyncIterator
from threading import get_ident
from typing import Any

import pytest
from azure.eventhub.extensions.checkpointstoreblobaio import BlobCheckpointStore as OfficialAioStore
from azure.storage.blob import ContainerClient as SyncContainerClient
from azure.storage.blob.aio import ContainerClient

from rxhubs import Checkpoint, Ownership
from rxhubs.errors import ConfigurationError, OwnershipLostError, StoreError
from rxhubs.stores import BlobCheckpointStore
from rxhubs.testing._azurite import ACCOUNT_KEY, Azurite
from tests.stores.conftest import CG, HUB, NS

PREFIX = f"{NS}/{HUB}/{CG}/".lower()

pytestmark = pytest.mark.azurite


@pytest.fixture
async def raw(azurite: Azurite, blob_container: str) -> AsyncIterator[ContainerClient]:
    """A plain azure-storage-blob client on the test's container (created)."""
    client = ContainerClient.from_connection_string(azurite.connection_string, blob_container)
    async with client:
        await client.create_container()
        yield client


@pytest.fixture
async def store(azurite: Azurite, blob_container: str) -> AsyncIterator[BlobCheckpointStore]:
    async with BlobCheckpointStore.from_connection_string(azurite.connection_string, blob_container) as s:
        yield s


@pytest.fixture
async def official(azurite: Azurite, blob_container: str, raw: ContainerClient) -> AsyncIterator[OfficialAioStore]:
    async with OfficialAioStore.from_connection_string(azurite.connection_string, blob_container) as s:
        yield s


async def blobs(raw: ContainerClient) -> dict[str, tuple[int, dict[str, str]]]:
    return {b.name: (b.size, dict(b.metadata or {})) async for b in raw.list_blobs(include=["metadata"])}


async def test_blob_names_and_metadata_are_exactly_the_official_layout(
    store: BlobCheckpointStore, raw: ContainerClient
) -> None:
    await store.claim_ownership([Ownership(NS, HUB, CG, "0", "consumer-a"), Ownership(NS, HUB, CG, "1", "b")])
    await store.update_checkpoint(Checkpoint(NS, HUB, CG, "0", "12345", 67))

    assert await blobs(raw) == {
        "test-ns.servicebus.windows.net/telemetry/$default/ownership/0": (0, {"ownerid": "consumer-a"}),
        "test-ns.servicebus.windows.net/telemetry/$default/ownership/1": (0, {"ownerid": "b"}),
        "test-ns.servicebus.windows.net/telemetry/$default/checkpoint/0": (
            0,
            {"offset": "12345", "sequencenumber": "67"},
        ),
    }


async def test_a_second_checkpoint_sets_metadata_on_the_same_blob(
    store: BlobCheckpointStore, raw: ContainerClient
) -> None:
    await store.update_checkpoint(Checkpoint(NS, HUB, CG, "0", "100", 1))
    created = (await raw.get_blob_client(PREFIX + "checkpoint/0").get_blob_properties()).creation_time

    await store.update_checkpoint(Checkpoint(NS, HUB, CG, "0", "200", 2))

    properties = await raw.get_blob_client(PREFIX + "checkpoint/0").get_blob_properties()
    assert properties.metadata == {"offset": "200", "sequencenumber": "2"}
    assert properties.creation_time == created  # not re-uploaded


async def test_the_official_store_writes_and_rxhubs_reads(
    official: OfficialAioStore, store: BlobCheckpointStore
) -> None:
    base = {"fully_qualified_namespace": NS, "eventhub_name": HUB, "consumer_group": CG}
    claimed = await official.claim_ownership(
        [{**base, "partition_id": p, "owner_id": f"sdk-{p}", "etag": None} for p in "012"]
    )
    await official.update_checkpoint({**base, "partition_id": "0", "offset": "4096", "sequence_number": 41})
    await official.update_checkpoint({**base, "partition_id": "2", "offset": "8192", "sequence_number": 82})
    [released] = await official.claim_ownership([{**dict(claimed[1]), "owner_id": ""}])
    official_listing = {o["partition_id"]: o for o in await official.list_ownership(NS, HUB, CG)}

    ours = {o.partition_id: o for o in await store.list_ownership(NS, HUB, CG)}
    checkpoints = {c.partition_id: c for c in await store.list_checkpoints(NS, HUB, CG)}

    assert {p: o.owner_id for p, o in ours.items()} == {"0": "sdk-0", "1": "", "2": "sdk-2"}
    assert {p: o.etag for p, o in ours.items()} == {p: o["etag"] for p, o in official_listing.items()}
    assert ours["1"].etag == released["etag"].strip('"')
    assert {p: o.last_modified_time for p, o in ours.items()} == {
        p: o["last_modified_time"] for p, o in official_listing.items()
    }
    assert checkpoints == {
        "0": Checkpoint(NS, HUB, CG, "0", "4096", 41),
        "2": Checkpoint(NS, HUB, CG, "2", "8192", 82),
    }
    # rxhubs takes over the released partition and steals another with the etags it listed.
    won = await store.claim_ownership([Ownership(NS, HUB, CG, p, "rx", etag=ours[p].etag) for p in "12"])
    assert sorted(o.partition_id for o in won) == ["1", "2"]
    assert {o["partition_id"]: o["owner_id"] for o in await official.list_ownership(NS, HUB, CG)} == {
        "0": "sdk-0",
        "1": "rx",
        "2": "rx",
    }


async def test_rxhubs_writes_and_the_official_store_reads(
    official: OfficialAioStore, store: BlobCheckpointStore
) -> None:
    won = {o.partition_id: o for o in await store.claim_ownership([Ownership(NS, HUB, CG, p, "rx") for p in "01"])}
    await store.claim_ownership([Ownership(NS, HUB, CG, "1", "", etag=won["1"].etag)])  # release
    await store.update_checkpoint(Checkpoint(NS, HUB, CG, "0", "4096", 41))
    await store.update_checkpoints([Checkpoint(NS, HUB, CG, "1", "512", 5), Checkpoint(NS, HUB, CG, "2", "0", 0)])

    listing = {o["partition_id"]: o for o in await official.list_ownership(NS, HUB, CG)}
    checkpoints = {c["partition_id"]: c for c in await official.list_checkpoints(NS, HUB, CG)}

    assert listing["0"]["owner_id"] == "rx" and listing["0"]["etag"] == won["0"].etag
    assert listing["0"]["last_modified_time"] == won["0"].last_modified_time
    assert not listing["1"]["owner_id"]  # released: the official processor treats it as claimable
    assert {p: (c["offset"], c["sequence_number"]) for p, c in checkpoints.items()} == {
        "0": ("4096", 41),
        "1": ("512", 5),
        "2": ("0", 0),
    }
    # The official processor steals with the etag it listed; rxhubs' stale etag then loses.
    stolen = await official.claim_ownership([{**listing["0"], "owner_id": "sdk"}])
    assert [o["owner_id"] for o in stolen] == ["sdk"]
    assert await store.claim_ownership([Ownership(NS, HUB, CG, "0", "rx", etag=won["0"].etag)]) == []
    # ... and rxhubs renews with the (quoted) etag the official store returned from its claim.
    [back] = await store.claim_ownership([Ownership(NS, HUB, CG, "0", "rx", etag=stolen[0]["etag"])])
    assert back.owner_id == "rx"


async def test_fenced_checkpoints_stay_readable_by_the_official_store_and_its_steal_fences_rxhubs(
    official: OfficialAioStore, store: BlobCheckpointStore, raw: ContainerClient
) -> None:
    [mine] = await store.claim_ownership([Ownership(NS, HUB, CG, "0", "rx")])
    assert await store.fence(mine) is None
    await store.update_checkpoint_fenced(Checkpoint(NS, HUB, CG, "0", "4096", 41), mine)

    _, metadata = (await blobs(raw))[PREFIX + "checkpoint/0"]
    assert metadata == {"offset": "4096", "sequencenumber": "41", "rxhubsfence": f"{mine.etag} rx"}
    [listed] = await official.list_checkpoints(NS, HUB, CG)
    assert (listed["offset"], listed["sequence_number"]) == ("4096", 41)

    # The official processor steals the partition and checkpoints (unconditionally, dropping rxhubs' key) ...
    [record] = await official.list_ownership(NS, HUB, CG)
    await official.claim_ownership([{**record, "owner_id": "sdk"}])
    await official.update_checkpoint({**listed, "offset": "5000", "sequence_number": 50})
    # ... and rxhubs' late write is refused: the blob names no period of rxhubs' and the ownership names sdk.
    with pytest.raises(OwnershipLostError):
        await store.update_checkpoint_fenced(Checkpoint(NS, HUB, CG, "0", "4500", 45), mine)
    assert [(c["offset"], c["sequence_number"]) for c in await official.list_checkpoints(NS, HUB, CG)] == [
        ("5000", 50)
    ]


async def test_a_missing_container_is_created_on_the_first_write(
    azurite: Azurite, blob_container: str, raw: ContainerClient
) -> None:
    await raw.delete_container()
    async with BlobCheckpointStore.from_connection_string(azurite.connection_string, blob_container) as store:
        assert await store.list_ownership(NS, HUB, CG) == []  # listing a missing container is empty
        await store.update_checkpoint(Checkpoint(NS, HUB, CG, "0", "10", 1))
        assert [c.sequence_number for c in await store.list_checkpoints(NS, HUB, CG)] == [1]


async def test_a_missing_container_also_serves_the_first_claims(azurite: Azurite, blob_container: str) -> None:
    async with BlobCheckpointStore.from_connection_string(azurite.connection_string, blob_container) as store:
        won = await store.claim_ownership([Ownership(NS, HUB, CG, p, "a") for p in "0123"])
        assert sorted(o.partition_id for o in won) == ["0", "1", "2", "3"]


async def test_without_create_container_a_missing_container_is_a_clear_error(
    azurite: Azurite, blob_container: str
) -> None:
    store = BlobCheckpointStore.from_connection_string(
        azurite.connection_string, blob_container, create_container=False
    )
    async with store:
        with pytest.raises(StoreError, match=f"container '{blob_container}' does not exist") as info:
            await store.update_checkpoint(Checkpoint(NS, HUB, CG, "0", "10", 1))
        assert info.value.retriable is False
        with pytest.raises(StoreError, match="does not exist"):  # nothing won, so the claim raises
            await store.claim_ownership([Ownership(NS, HUB, CG, p, "a") for p in "01"])
        assert await store.list_checkpoints(NS, HUB, CG) == []


async def test_refused_credentials_are_not_retriable_and_never_show_the_key(
    azurite: Azurite, blob_container: str, caplog: pytest.LogCaptureFixture
) -> None:
    wrong_key = "A" * 43 + "wrongkeyZZ" + "B" * 35 + "=="
    conn_str = azurite.connection_string.replace(ACCOUNT_KEY, wrong_key)
    caplog.set_level(logging.DEBUG)
    async with BlobCheckpointStore.from_connection_string(conn_str, blob_container) as store:
        with pytest.raises(StoreError, match="refused the credentials") as info:
            await store.update_checkpoint(Checkpoint(NS, HUB, CG, "0", "10", 1))
        with pytest.raises(StoreError, match="refused the credentials"):
            await store.list_ownership(NS, HUB, CG)
        shown = [repr(store), str(store), str(info.value), repr(info.value), caplog.text]
    assert info.value.retriable is False
    for text in shown:
        assert wrong_key not in text and "wrongkey" not in text
        assert conn_str not in text


async def test_an_unreachable_account_is_a_retriable_store_error(azurite: Azurite, blob_container: str) -> None:
    conn_str = azurite.connection_string.replace(f":{azurite.port}/", ":9/")  # the discard port: refused
    async with BlobCheckpointStore.from_connection_string(conn_str, blob_container, retry_total=0) as store:
        for call in (
            store.list_ownership(NS, HUB, CG),
            store.list_checkpoints(NS, HUB, CG),
            store.update_checkpoint(Checkpoint(NS, HUB, CG, "0", "1", 1)),
            store.claim_ownership([Ownership(NS, HUB, CG, "0", "a")]),
        ):
            with pytest.raises(StoreError, match="cannot reach the storage account") as info:
                await call
            assert info.value.retriable is True
            assert ACCOUNT_KEY not in str(info.value)
            assert isinstance(info.value.__cause__, Exception)


async def test_a_refused_connection_is_told_at_once_not_retried_into_a_time_out(
    azurite: Azurite, blob_container: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Nothing listening is an answer: with the store's default retries (2, 0.5 s apart), retrying it only pushed
    # the answer past the caller's deadline (a balancing interval), and users read "did not answer within 1.0 s"
    # instead of "cannot reach the storage account". azure-core logs every attempt the pipeline sends.
    conn_str = azurite.connection_string.replace(f":{azurite.port}/", ":9/")  # the discard port: refused
    caplog.set_level(logging.INFO, "azure.core.pipeline.policies.http_logging_policy")
    async with BlobCheckpointStore.from_connection_string(conn_str, blob_container) as store:
        with pytest.raises(StoreError, match=r"cannot reach the storage account \(connection refused") as info:
            await store.list_ownership(NS, HUB, CG)
    assert info.value.retriable is True
    attempts = [r for r in caplog.records if "Request URL" in r.getMessage()]
    assert len(attempts) == 1, [r.getMessage().splitlines()[0] for r in attempts]


async def test_an_outage_fails_calls_then_the_store_serves_the_same_data_again(
    azurite: Azurite, blob_container: str
) -> None:
    async with BlobCheckpointStore.from_connection_string(azurite.connection_string, blob_container) as store:
        [mine] = await store.claim_ownership([Ownership(NS, HUB, CG, "0", "a")])
        await store.update_checkpoint(Checkpoint(NS, HUB, CG, "0", "10", 1))
        azurite.stop()
        try:
            with pytest.raises(StoreError) as info:
                await store.update_checkpoint(Checkpoint(NS, HUB, CG, "0", "20", 2))
            assert info.value.retriable is True
            with pytest.raises(StoreError):
                await store.claim_ownership([Ownership(NS, HUB, CG, "0", "a", etag=mine.etag)])
        finally:
            azurite.start()
        [renewed] = await store.claim_ownership([Ownership(NS, HUB, CG, "0", "a", etag=mine.etag)])
        assert renewed.etag != mine.etag
        await store.update_checkpoint(Checkpoint(NS, HUB, CG, "0", "30", 3))
        assert [c.sequence_number for c in await store.list_checkpoints(NS, HUB, CG)] == [3]


async def test_secrets_never_appear_in_repr_str_or_errors(azurite: Azurite, blob_container: str) -> None:
    store = BlobCheckpointStore.from_connection_string(azurite.connection_string, blob_container)
    sas_url = f"{azurite.blob_endpoint}?sv=2021-08-06&ss=b&srt=co&sp=rwdlac&sig=TOPSECRETSIGNATURE%3D"
    sas_store = BlobCheckpointStore(sas_url, blob_container, retry_total=0)
    try:
        for s in (store, sas_store):
            assert ACCOUNT_KEY not in repr(s) and "TOPSECRET" not in repr(s)
            assert ACCOUNT_KEY not in s.url and "TOPSECRET" not in s.url
        assert repr(store) == f"BlobCheckpointStore('{azurite.blob_endpoint}/{blob_container}')"
        with pytest.raises(StoreError) as info:  # Azurite refuses the fake signature
            await sas_store.update_checkpoint(Checkpoint(NS, HUB, CG, "0", "1", 1))
        rendered = "".join(traceback.format_exception_only(info.value))
        assert "TOPSECRET" not in rendered and "TOPSECRET" not in repr(info.value)
    finally:
        await store.close()
        await sas_store.close()


def test_a_malformed_connection_string_is_a_configuration_error_without_echo() -> None:
    secret = "Zm9vYmFyc2VjcmV0a2V5"
    with pytest.raises(ConfigurationError, match="malformed storage connection string") as info:
        BlobCheckpointStore.from_connection_string(f"AccountKey={secret};nonsense", "checkpoints")
    assert secret not in str(info.value)


@pytest.mark.parametrize("name", ["", "ab", "Upper", "has_underscore", "-leading", "double--hyphen", "x" * 64])
def test_invalid_container_names_are_configuration_errors(name: str) -> None:
    with pytest.raises(ConfigurationError, match="invalid blob container name"):
        BlobCheckpointStore.from_connection_string("UseDevelopmentStorage=true", name)


async def test_concurrent_checkpoint_writes_across_partitions(store: BlobCheckpointStore) -> None:
    await store.update_checkpoints(Checkpoint(NS, HUB, CG, str(p), str(p * 10), p) for p in range(32))
    await asyncio.gather(*(store.update_checkpoint(Checkpoint(NS, HUB, CG, str(p), "7", 7)) for p in range(0, 32, 2)))

    listed = {int(c.partition_id): c.sequence_number for c in await store.list_checkpoints(NS, HUB, CG)}
    assert listed == {p: 7 if p % 2 == 0 else p for p in range(32)}


async def test_proxy_settings_from_the_environment_are_read_once_and_honoured(
    azurite: Azurite, blob_container: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("http_proxy", "HTTP_PROXY", "no_proxy", "NO_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")  # a proxy nobody listens on
    through_proxy = BlobCheckpointStore.from_connection_string(azurite.connection_string, blob_container, retry_total=0)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    direct = BlobCheckpointStore.from_connection_string(azurite.connection_string, blob_container, retry_total=0)
    async with through_proxy, direct:
        with pytest.raises(StoreError, match="cannot reach"):
            await through_proxy.list_checkpoints(NS, HUB, CG)
        assert await direct.list_checkpoints(NS, HUB, CG) == []


# -- BlobCheckpointStore(container_client): the user's own aio or sync client ---------------------------------


@pytest.mark.parametrize("kind", ["aio", "sync"])
async def test_a_container_client_of_either_kind_writes_the_official_layout_and_stays_open(
    kind: str, azurite: Azurite, blob_container: str, raw: ContainerClient, official: OfficialAioStore
) -> None:
    if kind == "aio":
        client: Any = ContainerClient.from_connection_string(azurite.connection_string, blob_container)
    else:
        client = SyncContainerClient.from_connection_string(azurite.connection_string, blob_container)
    async with BlobCheckpointStore(client) as store:
        assert store.container_name == blob_container and store.url == raw.url
        await store.claim_ownership([Ownership(NS, HUB, CG, "0", "consumer-a")])
        await store.update_checkpoint(Checkpoint(NS, HUB, CG, "0", "12345", 67))
        assert [o.owner_id for o in await store.list_ownership(NS, HUB, CG)] == ["consumer-a"]

    assert await blobs(raw) == {
        PREFIX + "ownership/0": (0, {"ownerid": "consumer-a"}),
        PREFIX + "checkpoint/0": (0, {"offset": "12345", "sequencenumber": "67"}),
    }
    [read] = await official.list_checkpoints(NS, HUB, CG)
    assert (read["sequence_number"], read["offset"]) == (67, "12345")
    # the store did not close the client it was given: it still serves its owner
    if kind == "aio":
        assert len([b async for b in client.list_blobs()]) == 2
        await client.close()
    else:
        assert len(list(client.list_blobs())) == 2
        client.close()


async def test_a_sync_client_never_runs_on_the_event_loop_thread(azurite: Azurite, blob_container: str) -> None:
    threads: list[int] = []
    client = SyncContainerClient.from_connection_string(
        azurite.connection_string, blob_container, raw_request_hook=lambda _request: threads.append(get_ident())
    )
    try:
        store = BlobCheckpointStore(client)
        await store.claim_ownership([Ownership(NS, HUB, CG, p, "a") for p in "0123"])
        await store.update_checkpoints([Checkpoint(NS, HUB, CG, p, "1", 1) for p in "0123"])
        assert len(await store.list_ownership(NS, HUB, CG)) == 4
        assert len(await store.list_checkpoints(NS, HUB, CG)) == 4
    finally:
        client.close()
    assert len(threads) >= 10  # create the container, 4 claims, 4 checkpoints (+ uploads), 2 listings
    assert get_ident() not in threads


async def test_a_sync_client_with_refused_credentials_is_a_store_error_without_the_key(
    azurite: Azurite, blob_container: str
) -> None:
    wrong_key = "A" * 43 + "wrongkeyZZ" + "B" * 35 + "=="
    client = SyncContainerClient.from_connection_string(
        azurite.connection_string.replace(ACCOUNT_KEY, wrong_key), blob_container
    )
    try:
        store = BlobCheckpointStore(client)
        with pytest.raises(StoreError, match="refused the credentials") as info:
            await store.list_ownership(NS, HUB, CG)
    finally:
        client.close()
    assert info.value.retriable is False
    assert "wrongkey" not in str(info.value) and "wrongkey" not in repr(store)


def test_a_client_with_other_settings_or_something_else_is_a_configuration_error(azurite: Azurite) -> None:
    client = SyncContainerClient.from_connection_string(azurite.connection_string, "checkpoints")
    try:
        with pytest.raises(ConfigurationError, match="pass it alone"):
            BlobCheckpointStore(client, "other")
        with pytest.raises(ConfigurationError, match="pass it alone"):
            BlobCheckpointStore(client, retry_total=0)
    finally:
        client.close()
    with pytest.raises(ConfigurationError, match="got dict"):
        BlobCheckpointStore({"url": "https://x"})  # type: ignore[arg-type]
