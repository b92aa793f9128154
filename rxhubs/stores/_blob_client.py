"""What the blob store talks through: an aio ``ContainerClient``, or a sync one run in worker threads.

Also the small helpers around it: container-name checks, client options (proxies read from the environment
once), and the secrets a URL or connection string carries (so messages can redact them).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import re
import urllib.request
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeAlias, TypeVar
from urllib.parse import parse_qsl, urlsplit

import aiohttp
from azure.core.exceptions import ClientAuthenticationError, HttpResponseError, ResourceNotFoundError
from azure.core.pipeline.transport import AioHttpTransport
from azure.storage.blob import ContainerClient as SyncContainerClient
from azure.storage.blob.aio import ContainerClient, LinearRetry

from rxhubs.errors import ConfigurationError, StoreError
from rxhubs.stores._common import logger, redact

if TYPE_CHECKING:
    from azure.storage.blob import BlobClient as SyncBlobClient
    from azure.storage.blob.aio import BlobClient

    from rxhubs.stores._blob_lean import LeanBlob

_T = TypeVar("_T")
_P = ParamSpec("_P")
_S = TypeVar("_S", bound="_Recycling")

#: How long dropping the old connections may take before the store goes on without waiting for it.
_CLOSE_TIMEOUT = 2.0

_CONTAINER_NAME = re.compile(r"[a-z0-9](?!.*--)[a-z0-9-]{1,61}[a-z0-9]")
_SECRET_KEYS = {"accountkey", "sharedaccesssignature", "sig"}


class _ThreadedBlob:
    """The calls the store makes on a blob, over a sync ``BlobClient``, each in a worker thread."""

    def __init__(self, blob: SyncBlobClient) -> None:
        self._blob = blob

    async def upload_blob(self, data: bytes, **kwargs: Any) -> dict[str, Any]:
        return await _in_thread(self._blob.upload_blob, data, **kwargs)

    async def set_blob_metadata(self, metadata: dict[str, str], **kwargs: Any) -> dict[str, Any]:
        return await _in_thread(self._blob.set_blob_metadata, metadata, **kwargs)

    async def get_blob_properties(self, **kwargs: Any) -> Any:
        return await _in_thread(self._blob.get_blob_properties, **kwargs)

    async def download_blob(self, **kwargs: Any) -> _ThreadedDownload:
        return _ThreadedDownload(await _in_thread(self._blob.download_blob, **kwargs))


class _ThreadedDownload:
    """A sync ``StorageStreamDownloader`` as the aio one looks: ``properties``, and ``await readall()``."""

    def __init__(self, downloader: Any) -> None:
        self._downloader = downloader
        self.properties = downloader.properties

    async def readall(self) -> bytes:
        return bytes(await _in_thread(self._downloader.readall))


class _ThreadedContainer:
    """The calls the store makes on a container, over a sync ``ContainerClient``, each in a worker thread.

    The event loop never waits on the sync client's socket: every request (a listing with all its pages, too)
    runs through ``asyncio.to_thread``. Azure SDK clients are thread-safe, so concurrent claims are fine.
    """

    def __init__(self, client: SyncContainerClient) -> None:
        self._sync = client

    @property
    def url(self) -> str:
        return str(self._sync.url)

    @property
    def container_name(self) -> str:
        return str(self._sync.container_name)

    @property
    def credential(self) -> Any:
        return self._sync.credential

    def get_blob_client(self, name: str) -> _ThreadedBlob:
        return _ThreadedBlob(self._sync.get_blob_client(name))

    async def create_container(self) -> Any:
        return await _in_thread(self._sync.create_container)

    async def list_blobs(self, **kwargs: Any) -> AsyncIterator[Any]:
        for blob in await _in_thread(lambda: list(self._sync.list_blobs(**kwargs))):
            yield blob

    async def close(self) -> None:
        await _in_thread(self._sync.close)

    async def __aenter__(self) -> _ThreadedContainer:
        return self


_Container: TypeAlias = "ContainerClient | _ThreadedContainer"
_Blob: TypeAlias = "BlobClient | _ThreadedBlob | LeanBlob"


class _RecyclingTransport(AioHttpTransport):  # type: ignore[misc]
    """azure-core's aiohttp transport, whose HTTP session (every pooled connection) can be swapped for a new one.

    The old session is closed once the requests still going through it have ended (answered, failed, or
    cancelled by their caller's deadline): closing an aiohttp session closes the connections its requests are
    using, so closing it at once failed every other store call in flight, each of which then timed out and
    swapped the session again (seen after an Azurite outage on a loaded machine: every call missed its deadline
    for seconds after the heal).
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._trust_env = bool(kwargs.get("use_env_settings", True))
        self._in_flight: dict[aiohttp.ClientSession, int] = {}
        self._retired: set[aiohttp.ClientSession] = set()
        self._closing: set[asyncio.Task[None]] = set()

    async def send(self, request: Any, **kwargs: Any) -> Any:
        async with self.borrow():
            return await super().send(request, **kwargs)

    @contextlib.asynccontextmanager
    async def borrow(self) -> AsyncIterator[aiohttp.ClientSession]:
        """The session to send one request through (the store's lean path too, :mod:`._blob_lean`).

        A session swapped by :meth:`recycle` meanwhile is closed once the last request borrowing it has ended.
        """
        await self.open()
        session: aiohttp.ClientSession = self.session
        self._in_flight[session] = self._in_flight.get(session, 0) + 1
        try:
            yield session
        finally:
            left = self._in_flight.pop(session) - 1
            if left:
                self._in_flight[session] = left
            elif session in self._retired:
                self._retired.discard(session)
                task = asyncio.ensure_future(_close(session))
                self._closing.add(task)
                task.add_done_callback(self._closing.discard)

    async def recycle(self) -> None:
        """Go on with a new session; close the old one once its requests have ended (never wait long on it)."""
        old: aiohttp.ClientSession | None = self.session  # type: ignore[has-type]
        if old is None:
            return  # never opened, or closed with the client: the next request opens a new one
        self.session = aiohttp.ClientSession(
            trust_env=self._trust_env, cookie_jar=aiohttp.DummyCookieJar(), auto_decompress=False
        )
        if self._in_flight.get(old):
            self._retired.add(old)
        else:
            await _close(old)

    async def close(self) -> None:
        await super().close()
        retired, self._retired = list(self._retired), set()
        for session in retired:
            await _close(session)
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)


async def _close(session: aiohttp.ClientSession) -> None:
    """Close a session the store no longer uses (its connections may be dead: never wait long on it)."""
    try:
        async with asyncio.timeout(_CLOSE_TIMEOUT):
            await session.close()
    except Exception as exc:  # the old session is dropped either way
        logger.debug("closing an HTTP session: %r", exc)


class _Recycling:
    """Drops the pooled HTTP connections of a client the store built after a call failed or was abandoned.

    A call that timed out, was cancelled (a caller's ``store_timeout``) or could not reach the account may have
    left dead connections in the pool (a path that went silent keeps them open but mute); reusing one would fail
    the next call too, and the next, until the ownership expired. So such a call marks the transport *stale*,
    and the next call first swaps its HTTP session for a new one. A client passed in by the user (or built
    with the user's ``transport``) is left alone.
    """

    _transport: _RecyclingTransport | None
    _url: str
    _stale: bool
    _recycle_lock: asyncio.Lock

    def _mark_stale(self) -> None:
        self._stale = self._transport is not None

    async def _fresh(self) -> None:
        if not self._stale or self._transport is None:
            return
        async with self._recycle_lock:
            if not self._stale:
                return
            self._stale = False
            logger.debug("blob store %s: a call failed or timed out: going on over new connections", self._url)
            await self._transport.recycle()


def recycling(
    method: Callable[Concatenate[_S, _P], Coroutine[Any, Any, _T]],
) -> Callable[Concatenate[_S, _P], Coroutine[Any, Any, _T]]:
    """Run a store call on fresh connections if the last one failed; mark them stale if this one fails."""

    @functools.wraps(method)
    async def call(self: _S, /, *args: _P.args, **kwargs: _P.kwargs) -> _T:
        await self._fresh()
        try:
            return await method(self, *args, **kwargs)
        except (asyncio.CancelledError, TimeoutError):
            self._mark_stale()
            raise
        except StoreError as exc:
            if exc.retriable:
                self._mark_stale()
            raise

    return call


async def _in_thread(fn: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
    return await asyncio.to_thread(functools.partial(fn, *args, **kwargs))


def _code(exc: BaseException) -> str:
    code = getattr(exc, "error_code", None)
    return f", {code}" if code else ""


def _check_container_name(name: object) -> None:
    if not isinstance(name, str) or not _CONTAINER_NAME.fullmatch(name):
        raise ConfigurationError(
            f"invalid blob container name {name!r}: 3-63 lower-case letters, digits and single hyphens, "
            "starting and ending with a letter or digit"
        )


def _url_secrets(url: str) -> list[str]:
    query = urlsplit(url).query
    return [query, *(v for k, v in parse_qsl(query) if k.lower() in _SECRET_KEYS)] if query else []


def _connection_string_secrets(conn_str: object) -> list[str]:
    if not isinstance(conn_str, str):
        return []
    secrets = [conn_str]
    for part in conn_str.split(";"):
        name, _, value = part.partition("=")
        if name.strip().lower() in _SECRET_KEYS and value:
            secrets.append(value.strip())
    return secrets


def _wants_environment_proxies(options: dict[str, Any]) -> bool:
    return not {"use_env_settings", "proxies", "transport"} & options.keys()


def refused(exc: BaseException | None) -> bool:
    """Whether ``exc`` (or what it wraps) is a refused connection: nothing listens at the account's address."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, ConnectionRefusedError):
            return True
        seen.add(id(exc))
        os_error = getattr(exc, "os_error", None)  # aiohttp's ClientConnectorError
        if isinstance(os_error, ConnectionRefusedError):
            return True
        exc = getattr(exc, "inner_exception", None) or exc.__cause__ or exc.__context__
    return False


class _FailFastRetry(LinearRetry):
    """The Storage SDK's linear retry, except that a refused connection is not retried.

    A refused connection is an answer, not a silence: nothing listens at the account's address (the service is
    down, or the address is wrong). Retrying it within the call only delays that answer past the caller's
    deadline (a balancing interval), so the user would be told "did not answer within N s" instead of "cannot
    reach the storage account". The caller's next call (the next renewal, the next checkpoint) is the retry.
    """

    def increment(self, settings: dict[str, Any], request: Any, response: Any = None, error: Any = None) -> bool:
        if refused(error):
            return False
        return bool(super().increment(settings, request, response=response, error=error))


def _client_options(url: str | None, options: dict[str, Any]) -> dict[str, Any]:
    """Fail-fast retries and time-outs, and proxies read once from the environment, unless overridden."""
    options = dict(options)
    if "retry_policy" not in options and "retry_total" not in options:
        options["retry_policy"] = _FailFastRetry(backoff=0.5, retry_total=2, random_jitter_range=0.2)  # type: ignore[arg-type]
    options.setdefault("connection_timeout", 10)
    options.setdefault("read_timeout", 30)
    if _wants_environment_proxies(options):
        # aiohttp would look up netrc and proxy variables in a thread on every request; do it once here.
        options["use_env_settings"] = False
        proxies = _environment_proxies(url) if url else None
        if proxies:
            options["proxies"] = proxies
    if "transport" not in options:  # one the store can swap the HTTP session of (see _Recycling)
        names = ("connection_timeout", "read_timeout", "use_env_settings", "connection_data_block_size")
        options["transport"] = _RecyclingTransport(**{k: options[k] for k in names if k in options})
    return options


def _environment_proxies(url: str) -> dict[str, str] | None:
    parts = urlsplit(url)
    host = parts.hostname or ""
    proxies = urllib.request.getproxies()
    proxy = proxies.get(parts.scheme)
    if not proxy or urllib.request.proxy_bypass(host):
        return None
    return {parts.scheme: proxy}


def storage_error(exc: BaseException, where: str, container_name: str, secrets: list[str]) -> StoreError:
    """An azure-storage-blob / transport failure as a :class:`~rxhubs.errors.StoreError`, secrets redacted.

    Refused credentials and a missing container are not retriable; time-outs, 5xx, 408 and 429 are. A refused
    connection says so ("cannot reach the storage account (connection refused: ...)").
    """
    if isinstance(exc, ClientAuthenticationError) or (
        isinstance(exc, HttpResponseError) and exc.status_code in (401, 403)
    ):
        return StoreError(
            f"{where}: the storage account refused the credentials (HTTP {getattr(exc, 'status_code', '?')}"
            f"{_code(exc)}); check the key, SAS token or role assignment",
            retriable=False,
        )
    if isinstance(exc, ResourceNotFoundError) and _code(exc) == ", ContainerNotFound":
        return StoreError(
            f"{where}: container {container_name!r} does not exist (create it, or let the store create "
            "it with create_container=True)",
            retriable=False,
        )
    if isinstance(exc, HttpResponseError) and exc.status_code is not None:
        retriable = exc.status_code >= 500 or exc.status_code in (408, 429)
        message = redact(str(exc.message or exc.reason or ""), secrets).splitlines()
        return StoreError(
            f"{where}: HTTP {exc.status_code}{_code(exc)}: {message[0] if message else ''}".rstrip(": "),
            retriable=retriable,
        )
    text = redact(str(exc), secrets).splitlines()
    why = "connection refused: is the service running at that address? " if refused(exc) else ""
    return StoreError(
        f"{where}: cannot reach the storage account ({why}{type(exc).__name__}: {text[0] if text else ''})".rstrip(),
        retriable=True,
    )
