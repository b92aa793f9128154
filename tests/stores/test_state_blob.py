"""State in the checkpoint blob's body, on a real Azurite: the official store still reads the checkpoint."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import pytest
from azure.eventhub.extensions.checkpointstoreblobaio import BlobCheckpointStore as OfficialAioStore
from azure.storage.blob.aio import ContainerClient

from rxhubs import Checkpoint, Ownership
from rxhubs.state._codec import OperatorState, decode, encode
from rxhubs.stores import BlobCheckpointStore
from rxhubs.testing._azurite import Azurite
from tests.stores.conftest import CG, HUB, NS

PREFIX = f"{NS}/{HUB}/{CG}/".lower()

pytestmark = pytest.mark.azurite


@pytest.fixture
async def raw(azurite: Azurite, blob_container: str) -> AsyncIterator[ContainerClient]:
    client = ContainerClient.from_connection_string(azurite.connection_string, blob_container)
    async with client:
        await client.create_container()
        yield client


@pytest.fixture
async def store(azurite: Azurite, blob_container: str, raw: ContainerClient) -> AsyncIterator[BlobCheckpointStore]:
    async with BlobCheckpointStore.from_connection_string(azurite.connection_string, blob_container) as s:
        yield s


@pytest.fixture
async def official(azurite: Azurite, blob_container: str, raw: ContainerClient) -> AsyncIterator[OfficialAioStore]:
    async with OfficialAioStore.from_connection_string(azurite.connection_string, blob_container) as s:
        yield s


async def test_the_state_is_the_body_and_the_official_store_reads_the_checkpoint(
    store: BlobCheckpointStore, official: OfficialAioStore, raw: ContainerClient
) -> None:
    state = encode({"counts": OperatorState("f1", {f"dev{i}|0": i for i in range(2000)}, {"watermark": 60})})
    [mine] = await store.claim_ownership([Ownership(NS, HUB, CG, "0", "rx")])
    await store.fence_with_state(mine)
    await store.commit_state(Checkpoint(NS, HUB, CG, "0", "4096", 41), mine, state)

    blob = raw.get_blob_client(PREFIX + "checkpoint/0")
    download = await blob.download_blob()
    assert await download.readall() == state  # the body is the state, as encoded (versioned, checksummed)
    assert dict(download.properties.metadata) == {
        "offset": "4096",
        "sequencenumber": "41",
        "rxhubsfence": f"{mine.etag} rx",
        "rxhubsstate": str(len(state)),
    }
    [listed] = await official.list_checkpoints(NS, HUB, CG)  # the official store reads only the metadata
    assert (listed["offset"], listed["sequence_number"]) == ("4096", 41)

    [after] = await store.claim_ownership([Ownership(NS, HUB, CG, "0", "rx2", etag=mine.etag)])
    checkpoint, back = await store.fence_with_state(after)
    assert checkpoint is not None and checkpoint.sequence_number == 41
    assert back is not None and decode(back)["counts"].keys["dev1999|0"] == 1999


async def test_an_official_checkpoint_drops_the_state_and_rxhubs_says_so(
    store: BlobCheckpointStore, official: OfficialAioStore, caplog: pytest.LogCaptureFixture
) -> None:
    [mine] = await store.claim_ownership([Ownership(NS, HUB, CG, "1", "rx")])
    await store.fence_with_state(mine)
    await store.commit_state(Checkpoint(NS, HUB, CG, "1", "100", 10), mine, b"RXS1 state of 10")

    [listed] = await official.list_checkpoints(NS, HUB, CG)
    await official.update_checkpoint({**listed, "offset": "200", "sequence_number": 20})  # metadata only

    [record] = [r for r in await store.list_ownership(NS, HUB, CG) if r.partition_id == "1"]
    [again] = await store.claim_ownership([Ownership(NS, HUB, CG, "1", "rx2", etag=record.etag)])
    with caplog.at_level(logging.WARNING, logger="rxhubs.stores"):
        checkpoint, state = await store.fence_with_state(again)
    assert checkpoint is not None and checkpoint.sequence_number == 20
    assert state is None  # the body is the state of 10, not of 20: never restored with 20
    assert "written without state" in caplog.text
