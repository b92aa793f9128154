"""The SDK-interface adapter and as_checkpoint_store's detection."""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Iterable
from typing import Any

import pytest
from azure.eventhub import CheckpointStore as SdkSyncInterface
from azure.eventhub.extensions.checkpointstoreblob import BlobCheckpointStore as OfficialSyncStore
from azure.eventhub.extensions.checkpointstoreblobaio import BlobCheckpointStore as OfficialAioStore
from azure.storage.blob.aio import ContainerClient

from rxhubs import Checkpoint, Ownership
from rxhubs.errors import ConfigurationError, StoreError
from rxhubs.stores import (
    CheckpointStore,
    InMemoryCheckpointStore,
    SdkCheckpointStore,
    SqliteCheckpointStore,
    as_checkpoint_store,
)
from rxhubs.testing._azurite import Azurite
from tests.stores.sdk_fake import DictSdkStore

NS, HUB, CG = "ns", "hub", "$Default"


async def test_sync_sdk_methods_run_off_the_event_loop_thread() -> None:
    fake = DictSdkStore()
    store = SdkCheckpointStore(fake)

    await store.claim_ownership([Ownership(NS, HUB, CG, "0", "a")])
    await store.update_checkpoint(Checkpoint(NS, HUB, CG, "0", "10", 1))
    await store.list_ownership(NS, HUB, CG)
    await store.list_checkpoints(NS, HUB, CG)

    assert fake.threads and threading.current_thread().name not in fake.threads


class KeepsOnErrorStore:
    """Like the official blob store on an unexpected error: returns the claim unchanged, as if won."""

    async def list_ownership(self, *args: Any) -> list[dict[str, Any]]:
        return []

    async def claim_ownership(self, ownership_list: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
        return [dict(o) for o in ownership_list]

    async def update_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        raise RuntimeError("storage said no; AccountKey=c2VjcmV0 should never be shown")

    async def list_checkpoints(self, *args: Any) -> list[dict[str, Any]]:
        return [
            {"partition_id": "0", "offset": "None", "sequence_number": "7"},  # the official str(None) artefact
            {"partition_id": "1", "offset": 4096, "sequence_number": 8},
        ]


async def test_a_claim_returned_without_a_new_etag_is_lost() -> None:
    store = SdkCheckpointStore(KeepsOnErrorStore())

    won = await store.claim_ownership([Ownership(NS, HUB, CG, "0", "a"), Ownership(NS, HUB, CG, "1", "a", etag="e1")])

    assert won == []


async def test_errors_become_retriable_store_errors_without_secrets() -> None:
    store = SdkCheckpointStore(KeepsOnErrorStore())
    with pytest.raises(StoreError, match=r"KeepsOnErrorStore\.update_checkpoint failed: RuntimeError") as info:
        await store.update_checkpoint(Checkpoint(NS, HUB, CG, "0", "1", 1))
    assert info.value.retriable is True
    assert isinstance(info.value.__cause__, RuntimeError)
    assert "c2VjcmV0" not in str(info.value)


async def test_sdk_checkpoint_values_are_normalised() -> None:
    listed = await SdkCheckpointStore(KeepsOnErrorStore()).list_checkpoints(NS, HUB, CG)
    assert listed == [Checkpoint(NS, HUB, CG, "0", None, 7), Checkpoint(NS, HUB, CG, "1", "4096", 8)]


class DatetimeStore(KeepsOnErrorStore):
    def list_ownership(self, *args: Any) -> list[dict[str, Any]]:  # type: ignore[override]
        when = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
        return [
            {"partition_id": "0", "owner_id": "a", "etag": '"0x8D"', "last_modified_time": when},
            {"partition_id": "1", "owner_id": None, "etag": "0x9", "last_modified_time": 5},
        ]


async def test_sdk_ownership_times_and_etags_are_normalised() -> None:
    listed = await SdkCheckpointStore(DatetimeStore()).list_ownership(NS, HUB, CG)
    assert listed == [
        Ownership(NS, HUB, CG, "0", "a", dt.datetime(2026, 1, 1, tzinfo=dt.UTC).timestamp(), "0x8D"),
        Ownership(NS, HUB, CG, "1", "", 5.0, "0x9"),  # None: how the official store lists a released owner
    ]


def test_a_store_without_the_verbs_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="missing list_ownership, claim_ownership"):
        SdkCheckpointStore(object())


async def test_close_closes_the_wrapped_store() -> None:
    closed: list[str] = []

    class Closable(DictSdkStore):
        def close(self) -> None:
            closed.append(threading.current_thread().name)

    async with SdkCheckpointStore(Closable()):
        pass
    assert len(closed) == 1


# -- as_checkpoint_store --------------------------------------------------------------------------------


async def test_rxhubs_stores_are_taken_as_they_are(tmp_path: Any) -> None:
    memory = InMemoryCheckpointStore()
    sqlite = SqliteCheckpointStore(tmp_path / "x.sqlite")
    wrapped = SdkCheckpointStore(DictSdkStore())
    for store in (memory, sqlite, wrapped):
        assert as_checkpoint_store(store) is store
    await sqlite.close()


@pytest.mark.azurite
async def test_the_official_blob_stores_are_wrapped_and_work(azurite: Azurite, blob_container: str) -> None:
    async with ContainerClient.from_connection_string(azurite.connection_string, blob_container) as raw:
        await raw.create_container()
    aio = OfficialAioStore.from_connection_string(azurite.connection_string, blob_container)
    sync = OfficialSyncStore.from_connection_string(azurite.connection_string, blob_container)
    try:
        adapted = [as_checkpoint_store(aio), as_checkpoint_store(sync)]
        assert all(isinstance(a, SdkCheckpointStore) for a in adapted)
        assert [a.sdk_store for a in adapted] == [aio, sync]  # type: ignore[attr-defined]
        # The sync official store runs in a worker thread; both see what the other wrote.
        await adapted[1].update_checkpoint(Checkpoint(NS, HUB, CG, "0", "4096", 41))
        await adapted[0].update_checkpoint(Checkpoint(NS, HUB, CG, "1", "8192", 82))
        for store in adapted:
            assert sorted(c.sequence_number for c in await store.list_checkpoints(NS, HUB, CG)) == [41, 82]
    finally:
        await aio.close()
        sync.close()


class SubclassesTheSdkInterface(SdkSyncInterface, DictSdkStore):  # type: ignore[misc]
    pass


class TypedUnannotatedSubclass(CheckpointStore):
    async def list_ownership(self, a, b, c):  # type: ignore[no-untyped-def]
        return []

    async def claim_ownership(self, ownerships):  # type: ignore[no-untyped-def]
        return []

    async def update_checkpoint(self, checkpoint):  # type: ignore[no-untyped-def]
        return None

    async def list_checkpoints(self, a, b, c):  # type: ignore[no-untyped-def]
        return []


class TypedByAnnotation:
    async def list_ownership(self, ns: str, hub: str, cg: str) -> list[Ownership]:
        return []

    async def claim_ownership(self, ownerships: Iterable[Ownership]) -> list[Ownership]:
        return []

    async def update_checkpoint(self, checkpoint: Checkpoint) -> None:
        return None

    async def list_checkpoints(self, ns: str, hub: str, cg: str) -> list[Checkpoint]:
        return []


class DictByAnnotation(TypedByAnnotation):
    async def update_checkpoint(self, checkpoint: dict[str, Any]) -> None:  # type: ignore[override]
        return None


class Unannotated(TypedByAnnotation):
    async def update_checkpoint(self, checkpoint):  # type: ignore[no-untyped-def, override]
        return None


def test_detection_by_class_then_annotation() -> None:
    typed_subclass, typed_annotated = TypedUnannotatedSubclass(), TypedByAnnotation()
    assert as_checkpoint_store(typed_subclass) is typed_subclass
    assert as_checkpoint_store(typed_annotated) is typed_annotated
    assert isinstance(as_checkpoint_store(SubclassesTheSdkInterface()), SdkCheckpointStore)
    assert isinstance(as_checkpoint_store(DictByAnnotation()), SdkCheckpointStore)
    with pytest.raises(ConfigurationError, match="cannot tell"):
        as_checkpoint_store(Unannotated())
    with pytest.raises(ConfigurationError, match="not a checkpoint store"):
        as_checkpoint_store("memory:")
