"""The blob store's single-blob requests sent over aiohttp and signed by the store (``rxhubs/stores/_blob_lean.py``).

The contract suite runs the store both ways ("blob": built from a connection string, the lean path; "blob-aio-client":
given a ``ContainerClient``, the SDK's path). These tests show that the lean path is the one taken (the SDK's
generated operations are made to fail), that it is left to the SDK where the user brings pipeline options, that its
answers raise what the SDK raises, and that it retries as the SDK's retry policy does.
"""

from __future__ import annotations

import asyncio
import base64
import os
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from aiohttp import web
from azure.core import MatchConditions
from azure.core.exceptions import (
    ClientAuthenticationError,
    HttpResponseError,
    ResourceExistsError,
    ResourceModifiedError,
    ResourceNotFoundError,
    ServiceRequestError,
)
from azure.storage.blob import ContainerSasPermissions, generate_container_sas
from azure.storage.blob._generated.aio.operations import _blob_operations
from azure.storage.blob.aio import ContainerClient

from rxhubs import Checkpoint, Ownership
from rxhubs.errors import StoreError
from rxhubs.stores import BlobCheckpointStore
from rxhubs.stores._blob_client import _client_options
from rxhubs.stores._blob_lean import LeanAccount, LeanBlob, lean_account
from rxhubs.testing._azurite import ACCOUNT_KEY, ACCOUNT_NAME

NS, HUB, CG = "ns.example", "lean", "$Default"


@pytest.fixture
def sdk_blob_calls_fail(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The SDK's generated single-blob operations raise: only a path that does not use them can succeed."""
    called: list[str] = []

    def refuse(name: str) -> Any:
        async def refused(*args: Any, **kwargs: Any) -> Any:
            called.append(name)
            raise AssertionError(f"the SDK's {name} was called")

        return refused

    for name in ("set_metadata", "get_properties"):
        monkeypatch.setattr(_blob_operations.BlobOperations, name, refuse(name))
    yield called


async def _round_trip(store: BlobCheckpointStore) -> None:
    """Claim, renew, fence, checkpoint (fenced and not) and release four partitions; check what the store holds."""
    won = await store.claim_ownership([Ownership(NS, HUB, CG, str(p), "a") for p in range(4)])
    assert sorted(o.partition_id for o in won) == ["0", "1", "2", "3"]
    renewed = await store.claim_ownership(won)
    assert [o.etag for o in renewed] != [o.etag for o in won] and len(renewed) == 4
    assert await store.fence(renewed[0]) is None  # no checkpoint yet
    await store.update_checkpoint_fenced(Checkpoint(NS, HUB, CG, "0", offset="700", sequence_number=7), renewed[0])
    await store.update_checkpoint(Checkpoint(NS, HUB, CG, "1", offset="900", sequence_number=9))
    stale = await store.claim_ownership(won[2:3])  # an etag that changed since: lost, as the SDK's 412 says
    assert stale == []
    checkpoints = {c.partition_id: (c.sequence_number, c.offset) for c in await store.list_checkpoints(NS, HUB, CG)}
    assert checkpoints == {"0": (7, "700"), "1": (9, "900")}
    owners = {o.partition_id: o.owner_id for o in await store.list_ownership(NS, HUB, CG)}
    assert owners == {"0": "a", "1": "a", "2": "a", "3": "a"}


async def test_a_store_built_from_an_account_key_sends_its_blob_requests_without_the_sdks_operations(
    azurite: Any, blob_container: str, sdk_blob_calls_fail: list[str]
) -> None:
    requests: list[str] = []

    def count(request: Any) -> None:  # the pipeline hook users (and the benchmarks) count requests with
        requests.append(f"{request.http_request.method} {str(request.http_request.url).split('?')[0][-1]}")

    async with BlobCheckpointStore.from_connection_string(
        azurite.connection_string, blob_container, raw_request_hook=count
    ) as store:
        assert isinstance(store._blob("x"), LeanBlob)
        await _round_trip(store)
    assert sdk_blob_calls_fail == []
    assert len(requests) >= 12 and "PUT 3" in requests, requests  # the lean requests reach the hook too


async def test_a_container_sas_authorizes_the_lean_requests_and_never_shows(
    azurite: Any, blob_container: str, sdk_blob_calls_fail: list[str]
) -> None:
    async with ContainerClient.from_connection_string(azurite.connection_string, blob_container) as admin:
        await admin.create_container()
    sas = generate_container_sas(
        ACCOUNT_NAME, blob_container, account_key=ACCOUNT_KEY,
        permission=ContainerSasPermissions(read=True, write=True, create=True, list=True),
        expiry=datetime.now(UTC) + timedelta(hours=1),
    )
    async with BlobCheckpointStore(f"{azurite.blob_endpoint}?{sas}", blob_container) as store:
        assert store._lean is not None and store._lean.key is None
        await _round_trip(store)
        assert "sig=" not in repr(store) and "sig=" not in repr(store._lean)
    assert sdk_blob_calls_fail == []
    forged = sas.replace("sig=", "sig=AAAA")
    async with BlobCheckpointStore(f"{azurite.blob_endpoint}?{forged}", blob_container) as store:
        with pytest.raises(StoreError) as refused:
            await store.update_checkpoint(Checkpoint(NS, HUB, CG, "9", offset="1", sequence_number=1))
        assert "refused the credentials" in str(refused.value) and not refused.value.retriable
        assert forged.split("sig=")[1].split("&")[0] not in str(refused.value)


async def test_a_wrong_account_key_is_refused_as_credentials_and_the_key_never_shows(
    azurite: Any, blob_container: str
) -> None:
    wrong = base64.b64encode(os.urandom(64)).decode()
    conn = azurite.connection_string.replace(ACCOUNT_KEY, wrong)
    assert wrong in conn
    async with BlobCheckpointStore.from_connection_string(conn, blob_container) as store:
        assert store._lean is not None and wrong not in repr(store._lean)
        with pytest.raises(StoreError) as refused:
            await store.update_checkpoint(Checkpoint(NS, HUB, CG, "0", offset="1", sequence_number=1))
    assert "refused the credentials" in str(refused.value) and not refused.value.retriable
    assert wrong not in str(refused.value)


async def test_the_answers_raise_what_the_sdk_raises(azurite: Any, blob_container: str) -> None:
    async with BlobCheckpointStore.from_connection_string(azurite.connection_string, blob_container) as store:
        blob = store._blob("dir/a")
        assert isinstance(blob, LeanBlob)
        with pytest.raises(ResourceNotFoundError) as missing_container:
            await blob.upload_blob(b"", overwrite=False, metadata={"x": "1"})
        assert missing_container.value.error_code == "ContainerNotFound"  # type: ignore[attr-defined]
        await store._ensure_container()
        with pytest.raises(ResourceNotFoundError) as missing:
            await blob.get_blob_properties()
        assert missing.value.status_code == 404
        written = await blob.upload_blob(b"state", overwrite=False, metadata={"a_1": "x", "a1": "y", "B_b": "z"})
        with pytest.raises(ResourceExistsError):
            await blob.upload_blob(b"", overwrite=False, metadata={"x": "1"})
        properties = await blob.get_blob_properties()
        assert properties.etag == written["etag"] and properties.size == 5
        assert {k.lower(): v for k, v in properties.metadata.items()} == {"a_1": "x", "a1": "y", "b_b": "z"}
        renewed = await blob.set_blob_metadata({"x": "2"}, etag=written["etag"],
                                               match_condition=MatchConditions.IfNotModified)
        assert renewed["etag"] != written["etag"] and isinstance(renewed["last_modified"], datetime)
        with pytest.raises(ResourceModifiedError):
            await blob.set_blob_metadata({"x": "3"}, etag=written["etag"],
                                         match_condition=MatchConditions.IfNotModified)
        with pytest.raises(ResourceModifiedError):
            await blob.upload_blob(b"", overwrite=True, etag=written["etag"],
                                   match_condition=MatchConditions.IfNotModified)
        download = await blob.download_blob()  # not a lean call: the SDK's client of the same blob
        assert await download.readall() == b"state"


def test_the_lean_path_is_left_to_the_sdk_when_the_user_brings_pipeline_options() -> None:
    conn = "UseDevelopmentStorage=true"

    def lean(**kwargs: Any) -> LeanAccount | None:
        return BlobCheckpointStore.from_connection_string(conn, "checkpoints", **kwargs)._lean

    assert lean() is not None
    assert lean(raw_request_hook=print) is not None
    assert lean(connection_timeout=3) is not None
    assert lean(retry_total=5) is None
    assert lean(proxies={"http": "http://127.0.0.1:3128"}) is None
    assert lean(user_agent="mine") is None
    given = ContainerClient.from_connection_string(conn, "checkpoints")
    assert BlobCheckpointStore(given)._lean is None

    class Token:  # an Entra ID credential: the SDK's bearer-token policy, not a signature
        async def get_token(self, *scopes: str, **kwargs: Any) -> Any:
            raise AssertionError("never asked")

    options = _client_options("https://acct.blob.core.windows.net", {})
    client = ContainerClient("https://acct.blob.core.windows.net", "checkpoints", credential=Token(), **options)
    assert lean_account(client, options, options["transport"]) is None
    assert BlobCheckpointStore("https://acct.blob.core.windows.net", "checkpoints", credential=Token())._lean is None


class _Busy:
    """A blob service that answers ``statuses`` in turn (then 200), and counts the requests."""

    def __init__(self, *statuses: int) -> None:
        self.statuses = list(statuses)
        self.requests = 0

    async def answer(self, request: web.Request) -> web.Response:
        self.requests += 1
        status = self.statuses.pop(0) if self.statuses else 200
        headers = {"ETag": '"0x1"', "Last-Modified": "Mon, 30 Nov 2026 12:00:00 GMT"}
        if status >= 300:
            headers["x-ms-error-code"] = "ServerBusy"
        body = "<Error><Code>ServerBusy</Code><Message>busy now</Message></Error>" if status >= 300 else ""
        return web.Response(status=status, headers=headers, text=body)


@pytest.fixture
async def busy_service() -> AsyncIterator[tuple[_Busy, str]]:
    busy = _Busy()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", busy.answer)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield busy, f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT_NAME};AccountKey={ACCOUNT_KEY};" \
                f"BlobEndpoint=http://127.0.0.1:{port}/{ACCOUNT_NAME};"
    await runner.cleanup()


async def test_a_busy_answer_is_retried_twice_as_the_sdk_retries_it(busy_service: tuple[_Busy, str]) -> None:
    busy, conn = busy_service
    async with BlobCheckpointStore.from_connection_string(conn, "checkpoints") as store:
        blob = store._blob("a")
        busy.statuses = [503, 500]
        written = await blob.set_blob_metadata({"x": "1"})
        assert written["etag"] == '"0x1"' and busy.requests == 3
        busy.statuses, busy.requests = [503, 503, 503, 503], 0
        with pytest.raises(HttpResponseError) as failed:
            await blob.set_blob_metadata({"x": "1"})
        assert failed.value.status_code == 503 and busy.requests == 3
        assert failed.value.error_code == "ServerBusy" and "busy now" in str(failed.value)  # type: ignore[attr-defined]
        busy.statuses, busy.requests = [412], 0  # a refusal that is an answer: never retried
        with pytest.raises(ResourceModifiedError):
            await blob.set_blob_metadata({"x": "1"}, etag='"0x0"', match_condition=MatchConditions.IfNotModified)
        assert busy.requests == 1
        busy.statuses, busy.requests = [403], 0
        with pytest.raises(ClientAuthenticationError):
            await blob.get_blob_properties()
        assert busy.requests == 1


async def test_a_refused_connection_is_not_retried(unused_tcp_port: int) -> None:
    conn = (f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT_NAME};AccountKey={ACCOUNT_KEY};"
            f"BlobEndpoint=http://127.0.0.1:{unused_tcp_port}/{ACCOUNT_NAME};")
    sent: list[float] = []
    async with BlobCheckpointStore.from_connection_string(
        conn, "checkpoints", raw_request_hook=lambda r: sent.append(asyncio.get_running_loop().time())
    ) as store:
        with pytest.raises(ServiceRequestError):
            await store._blob("a").set_blob_metadata({"x": "1"})
        assert len(sent) == 1
        with pytest.raises(StoreError) as failed:
            await store.update_checkpoint(Checkpoint(NS, HUB, CG, "0", offset="1", sequence_number=1))
        assert "connection refused" in str(failed.value) and failed.value.retriable
