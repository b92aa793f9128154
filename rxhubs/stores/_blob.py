"""The Azure Blob Storage checkpoint store, in the exact layout of the official Event Hubs blob store.

This module builds the store (clients, credentials, the container); the contract's verbs over blobs are
``_blob_contract``, the fencing verbs ``_blob_fence``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from azure.core.exceptions import (
    AzureError,
    ResourceExistsError,
    ResourceNotFoundError,
)
from azure.storage.blob import ContainerClient as SyncContainerClient
from azure.storage.blob.aio import ContainerClient

from rxhubs.errors import ConfigurationError, StoreError
from rxhubs.stores._blob_client import (
    _Blob,
    _check_container_name,
    _client_options,
    _code,
    _connection_string_secrets,
    _Container,
    _environment_proxies,
    _RecyclingTransport,
    _ThreadedContainer,
    _url_secrets,
    _wants_environment_proxies,
    storage_error,
)
from rxhubs.stores._blob_contract import _BlobContract, blob_prefix
from rxhubs.stores._blob_lean import LeanAccount, lean_account
from rxhubs.stores._common import logger, redact
from rxhubs.stores._contract import StatefulCheckpointStore

__all__ = ["BlobCheckpointStore", "blob_prefix"]


class BlobCheckpointStore(_BlobContract, StatefulCheckpointStore):
    """Ownership and checkpoints as empty blobs with metadata: the layout of ``azure-eventhub-checkpointstoreblob``.

    A consumer group moves between rxhubs and the official ``EventProcessor`` (Python, and the other SDKs that
    share the layout) in either direction without losing its place: the blob names are
    ``{namespace}/{hub}/{consumer group}/ownership/{partition}`` (metadata ``ownerid``) and
    ``.../checkpoint/{partition}`` (metadata ``offset``, ``sequencenumber``), all lower-cased.

    How the contract is kept:

    * a claim without an etag uploads the blob without overwrite (create-only: a blob that exists, even
      released, makes it lose); a claim with an etag sets the metadata ``If-Match`` that etag. A claim that
      loses (409/412/404) is left out of the result. Claims of several partitions are sent concurrently;
    * a checkpoint sets the blob's metadata and uploads the blob when it does not exist yet (never re-uploads,
      which is slow with soft delete on); :meth:`update_checkpoints` writes several concurrently;
    * fenced (:class:`~rxhubs.stores.FencedCheckpointStore`): ``fence`` stamps the checkpoint blob with the new
      owner's period (an extra metadata key, ``rxhubsfence``; the official store ignores it) and every fenced
      write is conditional on the blob's etag, so a former owner's write fails once the new owner fenced
      (``rxhubs.stores._blob_fence`` explains the scheme and its one window: a partition without checkpoint);
      operator state (``commit_state``) is the checkpoint blob's body, written with its metadata in one upload;
    * each listing is one request (``list_blobs`` with metadata) per 5,000 partitions;
    * etags come back without quotes; ``last_modified_time`` is the service's (one-second resolution);
    * malformed blobs (no ``ownerid``, a non-numeric ``offset`` or ``sequencenumber``, a foreign blob under the
      prefix) are logged: an ownership blob without owner is returned released (so it can be claimed with its
      etag), a bad checkpoint blob is skipped;
    * a missing container is created on the first write (``create_container=False`` turns that into a
      non-retriable :class:`~rxhubs.errors.StoreError`); listings of a missing container are empty;
    * failures become :class:`~rxhubs.errors.StoreError`: unreachable account, time-outs and 5xx are
      retriable; refused credentials (401/403) and other 4xx are not. Messages never carry the account key
      or a SAS token, nor does ``repr``.

    Unlike the official store, the client fails fast: two retries 0.5 s apart (none for a refused connection,
    which is told at once), 10 s to connect, 30 s to read
    (the Storage SDK's default can retry for over a minute, longer than a load-balancing interval); callers
    bound each call further (``store_timeout``). A call that timed out, was cancelled or could not reach the
    account drops the client's pooled connections and the next call opens new ones: a path that went silent
    leaves dead connections in the pool, which would fail every call after it heals. Proxy settings from the
    environment are read once. Pass ``retry_policy``, ``connection_timeout``, ``read_timeout``, ``proxies``,
    ``transport`` or any other azure-storage-blob client keyword to override.

    **An existing client.** ``BlobCheckpointStore(container_client)`` takes an
    ``azure.storage.blob.aio.ContainerClient`` or a sync ``azure.storage.blob.ContainerClient`` you built, as
    the official store's samples do. Its own credential, retry policy and transport apply (the fail-fast
    defaults above are only for clients the store builds), and the store never closes it, nor drops its
    connections after a failed call: you opened it, you close it (``async with client:``, ``client.close()``).
    A sync client's calls run in worker threads (``asyncio.to_thread``), so they never block the event loop.
    The store does not rebuild it as an aio client: a sync client may hold a sync token credential
    (``azure.identity.DefaultAzureCredential``), which an aio client cannot await, and pipeline settings
    (proxies, policies, transport) a copy would drop.

    Args:
        account_url: The blob service URL, e.g. ``https://myaccount.blob.core.windows.net``; or an existing
            ``ContainerClient`` (aio or sync), which then brings its container and credential.
        container_name: The container holding the blobs (not with a client).
        credential: An Azure credential (``azure.identity.aio.DefaultAzureCredential()``, a SAS or named-key
            credential), or None when ``account_url`` carries a SAS token (not with a client).
        create_container: Create the container on the first write if it does not exist.
        **client_kwargs: Passed to ``azure.storage.blob.aio.ContainerClient`` (not with a client).

    Raises:
        ConfigurationError: For an invalid container name or account URL, or a client given together with
            a container name, credential or client options.

    Example:
        >>> from azure.identity.aio import DefaultAzureCredential  # doctest: +SKIP
        >>> store = BlobCheckpointStore(  # doctest: +SKIP
        ...     "https://myaccount.blob.core.windows.net", "checkpoints", credential=DefaultAzureCredential()
        ... )
        >>> async with store:  # doctest: +SKIP
        ...     print(await store.list_checkpoints("myns.servicebus.windows.net", "telemetry", "$Default"))

        With a client you already have (sync or aio):

        >>> from azure.storage.blob import ContainerClient as SyncContainerClient
        >>> client = SyncContainerClient.from_connection_string("UseDevelopmentStorage=true", "checkpoints")
        >>> BlobCheckpointStore(client)
        BlobCheckpointStore('http://127.0.0.1:10000/devstoreaccount1/checkpoints')
        >>> client.close()
    """

    #: ``last_modified_time`` is whole seconds: a consumer gives a partition up this much before its expiry.
    timestamp_resolution = 1.0

    def __init__(
        self,
        account_url: str | ContainerClient | SyncContainerClient,
        container_name: str | None = None,
        *,
        credential: Any = None,
        create_container: bool = True,
        **client_kwargs: Any,
    ) -> None:
        if isinstance(account_url, ContainerClient | SyncContainerClient):
            if container_name is not None or credential is not None or client_kwargs:
                raise ConfigurationError(
                    "a ContainerClient brings its own container, credential and options: pass it alone"
                )
            _check_container_name(account_url.container_name)
            client: _Container = (
                account_url if isinstance(account_url, ContainerClient) else _ThreadedContainer(account_url)
            )
            self._setup(client, create_container, _url_secrets(account_url.url), owns_client=False)
            return
        if not isinstance(account_url, str):
            raise ConfigurationError(
                "BlobCheckpointStore takes an account URL and a container name, or an "
                f"azure.storage.blob(.aio) ContainerClient; got {type(account_url).__name__}"
            )
        _check_container_name(container_name)
        if not isinstance(account_url, str) or not account_url.startswith(("http://", "https://")):
            raise ConfigurationError("account_url must be an http(s) URL of a blob service")
        secrets = _url_secrets(account_url)
        options = _client_options(account_url, client_kwargs)
        try:
            built = ContainerClient(account_url, str(container_name), credential=credential, **options)
        except ValueError as exc:
            raise ConfigurationError(f"invalid blob store settings: {redact(str(exc), secrets)}") from exc
        self._setup(built, create_container, secrets, transport=options["transport"],
                    lean=lean_account(built, options, options["transport"]))

    @classmethod
    def from_connection_string(
        cls, conn_str: str, container_name: str, *, create_container: bool = True, **client_kwargs: Any
    ) -> BlobCheckpointStore:
        """A store from a storage account connection string (``UseDevelopmentStorage=true`` included).

        Args:
            conn_str: The connection string; it never appears in logs, reprs or error messages.
            container_name: The container holding the blobs.
            create_container: Create the container on the first write if it does not exist.
            **client_kwargs: Passed to ``azure.storage.blob.aio.ContainerClient``.

        Raises:
            ConfigurationError: For a malformed connection string or an invalid container name.

        Example:
            >>> store = BlobCheckpointStore.from_connection_string(
            ...     "UseDevelopmentStorage=true", "checkpoints"
            ... )
            >>> store
            BlobCheckpointStore('http://127.0.0.1:10000/devstoreaccount1/checkpoints')
        """
        _check_container_name(container_name)
        secrets = _connection_string_secrets(conn_str)
        if not isinstance(conn_str, str) or not conn_str.strip():
            raise ConfigurationError("the storage connection string is empty")
        try:
            options = _client_options(None, client_kwargs)
            client = ContainerClient.from_connection_string(conn_str, container_name, **options)
            if _wants_environment_proxies(client_kwargs) and _environment_proxies(client.url):
                options = _client_options(client.url, client_kwargs)
                client = ContainerClient.from_connection_string(conn_str, container_name, **options)
        except (ValueError, AzureError) as exc:
            raise ConfigurationError(
                "malformed storage connection string (expected e.g. 'DefaultEndpointsProtocol=https;"
                "AccountName=...;AccountKey=...;EndpointSuffix=core.windows.net'): "
                f"{redact(str(exc), secrets)}"
            ) from exc
        store = cls.__new__(cls)
        store._setup(client, create_container, secrets, transport=options["transport"],
                     lean=lean_account(client, options, options["transport"]))
        return store

    def _setup(self, client: _Container, create_container: bool, secrets: list[str], *, owns_client: bool = True,
               transport: object = None, lean: LeanAccount | None = None) -> None:
        key = getattr(client.credential, "account_key", None)
        self._secrets = [s for s in [*secrets, key if isinstance(key, str) else ""] if s]
        self._client = client
        self._owns_client = owns_client
        self._create_container = create_container
        self._container_ready = False
        self._container_lock = asyncio.Lock()
        self._blobs: dict[str, _Blob] = {}
        self._init_fencing()
        self._url = client.url.split("?", 1)[0]
        self._stale, self._recycle_lock = False, asyncio.Lock()
        self._transport = transport if isinstance(transport, _RecyclingTransport) else None
        self._lean = lean  # single-blob requests over aiohttp, signed by the store (_blob_lean), or None: the SDK's

    @property
    def container_name(self) -> str:
        """The container holding the blobs."""
        return str(self._client.container_name)

    @property
    def url(self) -> str:
        """The container's URL, without any SAS token."""
        return self._url

    # -- helpers ---------------------------------------------------------------------------------------

    def _blob(self, name: str) -> _Blob:
        blob = self._blobs.get(name)
        if blob is None:
            sdk = self._client.get_blob_client(name)
            blob = self._blobs[name] = sdk if self._lean is None else self._lean.blob(name, sdk)
        return blob

    def _error(self, exc: BaseException, what: str) -> StoreError:
        """Translate an azure-storage-blob / transport failure into a StoreError with a safe message."""
        error = storage_error(exc, f"blob store {self._url}: {what}", self.container_name, self._secrets)
        if error.retriable:
            self._mark_stale()  # a claim failing next to won ones is logged, not raised: mark it here
        return error

    async def _ensure_container(self) -> None:
        if not self._create_container:
            raise StoreError(
                f"blob store {self._url}: container {self.container_name!r} does not exist "
                "(create it, or pass create_container=True)",
                retriable=False,
            )
        async with self._container_lock:
            if self._container_ready:
                return
            try:
                await self._client.create_container()
                logger.info("blob store %s: created container %r", self._url, self.container_name)
            except ResourceExistsError:
                pass
            self._container_ready = True

    async def _create_only(self, blob: _Blob, metadata: dict[str, str], data: bytes = b"") -> dict[str, Any] | None:
        """Upload a blob (empty unless ``data``) without overwrite: its properties, or None when it exists."""
        for attempt in (1, 2):
            try:
                return await blob.upload_blob(data, overwrite=False, metadata=metadata)
            except ResourceExistsError:
                return None
            except ResourceNotFoundError as exc:
                if attempt == 2 or _code(exc) != ", ContainerNotFound":
                    raise
                await self._ensure_container()
        raise AssertionError("unreachable")  # pragma: no cover

    # -- life cycle ------------------------------------------------------------------------------------

    async def close(self) -> None:
        """Close the HTTP session of the client the store built. Idempotent; a client you passed stays open."""
        if self._owns_client:
            await self._client.close()

    async def __aenter__(self) -> BlobCheckpointStore:
        if self._owns_client:
            await self._client.__aenter__()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"BlobCheckpointStore({self._url!r})"
