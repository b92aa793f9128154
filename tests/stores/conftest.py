"""Store harnesses: every store of the contract suite, each with a way to open a second client on the same
backing (for concurrency) and, where records can be malformed, a way to write garbage."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from azure.eventhub.extensions.checkpointstoreblobaio import BlobCheckpointStore as OfficialAioStore
from azure.storage.blob import ContainerClient as SyncContainerClient
from azure.storage.blob.aio import ContainerClient

from rxhubs.stores import (
    BlobCheckpointStore,
    CheckpointStore,
    InMemoryCheckpointStore,
    SdkCheckpointStore,
    SqliteCheckpointStore,
)
from rxhubs.testing._azurite import Azurite
from tests.stores.sdk_fake import DictBacking, DictSdkStore

NS = "Test-NS.servicebus.windows.net"
HUB = "Telemetry"
CG = "$Default"

#: Kinds of garbage a harness can write: an ownership without owner (partition "0"), a checkpoint with a
#: non-numeric sequence number ("1"), one with an offset that cannot be one ("2": a quote; offsets are opaque
#: strings, not numbers), and a foreign record under the prefix that must be ignored entirely.
CORRUPTIONS = ("ownership-without-owner", "checkpoint-bad-sequence", "checkpoint-bad-offset", "foreign")

Corrupt = Callable[[str], Awaitable[None]]


@dataclass
class Harness:
    name: str
    store: CheckpointStore
    another: Callable[[], Awaitable[CheckpointStore]]
    corrupt: Corrupt | None = None
    cleanups: list[Callable[[], Awaitable[Any]]] = field(default_factory=list)
    #: False for the official store on Azurite: it claims create-only by set-metadata If-None-Match:*, which
    #: Azurite ignores (real Azure honours it), so a create-only claim of an existing record wins there.
    create_only_enforced: bool = True


ALL_STORES = ["memory", "sqlite", "blob", "blob-aio-client", "blob-sync-client", "sdk-official-aio", "sdk-dict-sync"]
NEEDS_AZURITE = {"blob", "blob-aio-client", "blob-sync-client", "sdk-official-aio"}


def _params(names: list[str]) -> list[Any]:
    return [pytest.param(n, id=n, marks=[pytest.mark.azurite] if n in NEEDS_AZURITE else []) for n in names]


async def _memory(request: pytest.FixtureRequest, tmp_path: Path) -> Harness:
    store = InMemoryCheckpointStore()

    async def another() -> CheckpointStore:
        return store  # one process, one store: concurrency is between tasks

    return Harness("memory", store, another)


async def _sqlite(request: pytest.FixtureRequest, tmp_path: Path) -> Harness:
    path = tmp_path / "checkpoints.sqlite"
    opened: list[SqliteCheckpointStore] = []

    async def another() -> CheckpointStore:
        store = SqliteCheckpointStore(path)
        opened.append(store)
        return store

    async def corrupt(kind: str) -> None:
        await first.list_ownership(NS, HUB, CG)  # make sure the schema exists
        key = (NS.lower(), HUB.lower(), CG.lower())
        with sqlite3.connect(path) as db:
            if kind == "ownership-without-owner":
                db.execute("INSERT INTO rxhubs_ownership VALUES (?, ?, ?, '0', NULL, 'noon', 'e-77', NULL)", key)
            elif kind == "checkpoint-bad-sequence":
                db.execute("INSERT INTO rxhubs_checkpoint VALUES (?, ?, ?, '1', '100', 'many')", key)
            elif kind == "checkpoint-bad-offset":
                db.execute("INSERT INTO rxhubs_checkpoint VALUES (?, ?, ?, '2', 'x''1f', 5)", key)
            elif kind == "foreign":
                db.execute("INSERT INTO rxhubs_checkpoint VALUES (?, ?, ?, '', '1', 1)", key)
                db.execute("INSERT INTO rxhubs_ownership VALUES (?, ?, ?, X'00', 'x', 1.0, 'e', NULL)", key)

    async def close_all() -> None:
        for store in opened:
            await store.close()

    first = await another()
    return Harness("sqlite", first, another, corrupt, [close_all])


async def _raw_container(server: Azurite, container: str) -> ContainerClient:
    client = ContainerClient.from_connection_string(server.connection_string, container)
    await client.__aenter__()
    return client


def _blob_corrupt(raw: ContainerClient) -> Corrupt:
    prefix = f"{NS}/{HUB}/{CG}/".lower()

    async def corrupt(kind: str) -> None:
        if kind == "ownership-without-owner":
            await raw.upload_blob(prefix + "ownership/0", b"", metadata={"owner": "typo"})
        elif kind == "checkpoint-bad-sequence":
            await raw.upload_blob(prefix + "checkpoint/1", b"", metadata={"offset": "100", "sequencenumber": "many"})
        elif kind == "checkpoint-bad-offset":
            await raw.upload_blob(prefix + "checkpoint/2", b"", metadata={"offset": "x'1f", "sequencenumber": "5"})
        elif kind == "foreign":
            await raw.upload_blob(prefix + "checkpoint/0/notes.txt", b"hello", metadata={"sequencenumber": "1"})
            await raw.upload_blob(prefix + "ownership/archive/0", b"", metadata={"ownerid": "ghost"})

    return corrupt


async def _blob(request: pytest.FixtureRequest, tmp_path: Path) -> Harness:
    server: Azurite = request.getfixturevalue("azurite")
    container: str = request.getfixturevalue("blob_container")
    opened: list[BlobCheckpointStore] = []

    async def another() -> CheckpointStore:
        store = BlobCheckpointStore.from_connection_string(server.connection_string, container)
        opened.append(store)
        return store

    raw = await _raw_container(server, container)
    await raw.create_container()

    async def close_all() -> None:
        for store in opened:
            await store.close()
        await raw.close()

    return Harness("blob", await another(), another, _blob_corrupt(raw), [close_all])


async def _blob_on_client(request: pytest.FixtureRequest, kind: str) -> Harness:
    """``BlobCheckpointStore(container_client)``: the user's own aio or sync client, which the store never closes."""
    server: Azurite = request.getfixturevalue("azurite")
    container: str = request.getfixturevalue("blob_container")
    clients: list[Any] = []

    async def another() -> CheckpointStore:
        if kind == "aio":
            client: Any = ContainerClient.from_connection_string(server.connection_string, container)
        else:
            client = SyncContainerClient.from_connection_string(server.connection_string, container)
        clients.append(client)
        return BlobCheckpointStore(client)

    raw = await _raw_container(server, container)
    await raw.create_container()

    async def close_all() -> None:
        for client in clients:
            if kind == "aio":
                await client.close()
            else:
                client.close()
        await raw.close()

    return Harness(f"blob-{kind}-client", await another(), another, _blob_corrupt(raw), [close_all])


async def _blob_aio_client(request: pytest.FixtureRequest, tmp_path: Path) -> Harness:
    return await _blob_on_client(request, "aio")


async def _blob_sync_client(request: pytest.FixtureRequest, tmp_path: Path) -> Harness:
    return await _blob_on_client(request, "sync")


async def _sdk_official_aio(request: pytest.FixtureRequest, tmp_path: Path) -> Harness:
    server: Azurite = request.getfixturevalue("azurite")
    container: str = request.getfixturevalue("blob_container")
    raw = await _raw_container(server, container)
    await raw.create_container()  # the official store does not create its container
    opened: list[SdkCheckpointStore] = []

    async def another() -> CheckpointStore:
        store = SdkCheckpointStore(OfficialAioStore.from_connection_string(server.connection_string, container))
        opened.append(store)
        return store

    async def close_all() -> None:
        for store in opened:
            await store.close()
        await raw.close()

    # No corrupt(): the official store itself raises KeyError/ValueError on malformed blobs (SDK issue 13060).
    return Harness("sdk-official-aio", await another(), another, None, [close_all], create_only_enforced=False)


async def _sdk_dict_sync(request: pytest.FixtureRequest, tmp_path: Path) -> Harness:
    backing = DictBacking()

    async def another() -> CheckpointStore:
        return SdkCheckpointStore(DictSdkStore(backing))

    async def corrupt(kind: str) -> None:
        key = (NS.lower(), HUB.lower(), CG.lower())
        own = backing.ownership.setdefault(key, {})
        cps = backing.checkpoints.setdefault(key, {})
        base = {"fully_qualified_namespace": NS, "eventhub_name": HUB, "consumer_group": CG}
        if kind == "ownership-without-owner":
            own["0"] = {**base, "partition_id": "0", "etag": "v-77", "last_modified_time": 1.0}
        elif kind == "checkpoint-bad-sequence":
            cps["1"] = {**base, "partition_id": "1", "offset": "100", "sequence_number": "many"}
        elif kind == "checkpoint-bad-offset":
            cps["2"] = {**base, "partition_id": "2", "offset": "x'1f", "sequence_number": 5}
        elif kind == "foreign":
            cps["junk"] = "not a record"
            own["junk"] = ["not", "a", "record"]

    return Harness("sdk-dict-sync", await another(), another, corrupt)


_FACTORIES = {
    "memory": _memory,
    "sqlite": _sqlite,
    "blob": _blob,
    "blob-aio-client": _blob_aio_client,
    "blob-sync-client": _blob_sync_client,
    "sdk-official-aio": _sdk_official_aio,
    "sdk-dict-sync": _sdk_dict_sync,
}


@pytest.fixture(params=_params(ALL_STORES))
async def harness(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Harness]:
    """Each store of the contract suite in turn."""
    h = await _FACTORIES[request.param](request, tmp_path)
    try:
        yield h
    finally:
        for cleanup in h.cleanups:
            await cleanup()


@pytest.fixture(params=_params([name for name in ALL_STORES if name not in ("memory", "sdk-official-aio")]))
async def corruptible(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Harness]:
    """The stores that can hold malformed records written behind their back."""
    h = await _FACTORIES[request.param](request, tmp_path)
    assert h.corrupt is not None
    try:
        yield h
    finally:
        for cleanup in h.cleanups:
            await cleanup()


FENCED_STORES = ["memory", "sqlite", "blob", "blob-aio-client", "blob-sync-client"]


@pytest.fixture(params=_params(FENCED_STORES))
async def fenced(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Harness]:
    """The stores that fence former owners' checkpoint writes (``FencedCheckpointStore``)."""
    h = await _FACTORIES[request.param](request, tmp_path)
    try:
        yield h
    finally:
        for cleanup in h.cleanups:
            await cleanup()
