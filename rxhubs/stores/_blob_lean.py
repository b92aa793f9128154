"""The blob store's requests on one blob, sent straight over aiohttp and signed here (private).

azure-storage-blob spends about 2.4 ms of the consumer's CPU on each request (its pipeline's dozen policies, the
generated operation's serialization, the deserialization of the answer's headers into a dict), against 0.6 ms for
the same request signed with the account key and sent with aiohttp (2,000 conditional metadata writes to Azurite,
16 at a time, on this 2-core machine; 2.8 ms against 0.6 with the SDK's defaults). Those are the requests an owner
of many partitions makes most: renewals, releases and hands (a metadata write on an ownership blob) and checkpoints
(one on a checkpoint blob). An owner of 1,024 partitions handing 896 of them to seven newcomers makes about 1,800
of them at once, and spent 4 s of CPU on the storage client alone, beside 1,024 partition streams.

So when the store builds its client itself with an account key (a connection string with ``AccountKey``, the
development storage's included, or a ``StorageSharedKeyCredential`` / ``AzureNamedKeyCredential``) or a SAS token,
and with no pipeline option of the user's but the request and response hooks, the calls it makes on one blob go
through :class:`LeanBlob`: ``set_blob_metadata``, ``get_blob_properties`` and ``upload_blob`` of a small body. The
request is the one the SDK sends (the same headers, conditions, service version and signature), over the same HTTP
session (which the store recycles after a failure, :class:`~rxhubs.stores._blob_client._RecyclingTransport`), with
the same time-outs and retries (two, about 0.5 s apart, after a dropped connection, a time-out, 408 or 5xx but 501
and 505; never after a refused connection), and its answers raise the SDK's exceptions (412
``ResourceModifiedError``, 404 ``ResourceNotFoundError``, 409 ``ResourceExistsError``, 401/403
``ClientAuthenticationError``, others ``HttpResponseError``, transport failures ``ServiceRequestError`` /
``ServiceResponseError``): the store's code above cannot tell the two paths apart. Listing has its own lean path
(:mod:`rxhubs.stores._blob_listing`); downloads and the container's creation go through the SDK; so does every
call of a store given a ``ContainerClient``, an Entra ID credential, a transport, proxies or a retry policy.
"""

from __future__ import annotations

import asyncio
import base64
import email.utils
import functools
import hashlib
import hmac
import random
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import quote, urlsplit

import aiohttp
from azure.core import MatchConditions
from azure.core.exceptions import (
    AzureError,
    ClientAuthenticationError,
    HttpResponseError,
    ResourceExistsError,
    ResourceModifiedError,
    ResourceNotFoundError,
    ResourceNotModifiedError,
    ServiceRequestError,
    ServiceResponseError,
)
from yarl import URL

from rxhubs.stores._blob_client import refused

if TYPE_CHECKING:
    from rxhubs.stores._blob_client import _RecyclingTransport

__all__ = ["LeanAccount", "LeanBlob", "LeanProperties", "lean_account"]

#: Client options the lean path honours (the store's own defaults, and the hooks the benchmarks count with).
_HONOURED = frozenset({"raw_request_hook", "raw_response_hook", "connection_timeout", "read_timeout",
                       "retry_policy", "use_env_settings", "transport"})
#: The largest body sent by the lean path (a checkpoint's state; a larger one goes through the SDK's upload).
_LARGEST_BODY = 4 * 1024 * 1024
#: The headers a shared-key signature covers, in the order it covers them (``Content-Length`` 0 counts as empty).
_SIGNED = ("content-encoding", "content-language", "content-length", "content-md5", "content-type", "date",
           "if-modified-since", "if-match", "if-none-match", "if-unmodified-since", "range")
_MESSAGE = re.compile(rb"<Message>(.*?)</Message>", re.DOTALL)
_ERRORS: dict[int, type[HttpResponseError]] = {
    304: ResourceNotModifiedError, 404: ResourceNotFoundError, 409: ResourceExistsError, 412: ResourceModifiedError,
}


@dataclass(frozen=True)
class LeanProperties:
    """What ``get_blob_properties`` answered that the store reads: the etag, the metadata, the size."""

    etag: str
    metadata: dict[str, str]
    size: int
    last_modified: datetime | None = None


@dataclass
class LeanAccount:
    """How to send one container's single-blob requests: its URL, signature and HTTP session.

    ``key`` signs each request (shared key); without it ``query`` (a SAS token) authorizes it.
    """

    transport: _RecyclingTransport
    container_url: str
    account_name: str
    key: bytes | None = field(repr=False)
    query: str = field(repr=False)
    api_version: str = ""
    request_hook: Callable[[Any], None] | None = None
    response_hook: Callable[[Any], None] | None = None
    #: The store's retry policy (``_FailFastRetry``): its retries after the first attempt, its pause and jitter.
    retry: Any = None

    def blob(self, name: str, sdk_blob: Any) -> LeanBlob:
        """``name``'s calls: the hot ones here, the others (downloads) through ``sdk_blob``."""
        return LeanBlob(self, URL(f"{self.container_url}/{quote(name, safe='~/')}"), sdk_blob)

    def _authorize(self, method: str, url: URL, headers: dict[str, str]) -> URL:
        """Sign ``headers`` (shared key) or add the SAS token to ``url``; the URL to send."""
        if self.key is None:
            return URL(f"{url}{'&' if url.query_string else '?'}{self.query}", encoded=True)
        order = _service_order(tuple(h for h in headers if h[:5].lower() == "x-ms-"))
        lower = {k.lower(): v for k, v in headers.items()}
        if lower.get("content-length") == "0":
            del lower["content-length"]
        query = "".join(f"\n{k}:{v}" for k, v in sorted(url.query.items()))
        to_sign = (
            "\n".join((method, *(lower.get(h, "") for h in _SIGNED), ""))
            + "".join(f"{lower_name}:{headers[name]}\n" for lower_name, name in order)
            + f"/{self.account_name}{url.raw_path}{query}"
        )
        signature = base64.b64encode(hmac.new(self.key, to_sign.encode(), hashlib.sha256).digest()).decode()
        headers["Authorization"] = f"SharedKey {self.account_name}:{signature}"
        return url

    async def send(
        self, method: str, url: URL, headers: dict[str, str], body: bytes | None = None
    ) -> tuple[int, Mapping[str, str]]:
        """Send one request (retried as the SDK retries it); its status and headers once it succeeded.

        Raises:
            HttpResponseError: The service's refusal, as the SDK's exception for its status.
            ServiceRequestError | ServiceResponseError: The request could not be sent, or its answer not read.
        """
        retries, backoff, jitter = self.retry.total_retries, self.retry.backoff, self.retry.random_jitter_range
        attempt = 0
        while True:
            try:
                status, answer, text = await self._once(method, url, dict(headers), body)
            except AzureError as exc:
                if attempt >= retries or refused(exc):
                    raise
            else:
                if status < 300:
                    return status, answer
                if attempt >= retries or not (status == 408 or (status >= 500 and status not in (501, 505))):
                    raise _refusal(status, answer, text)
            attempt += 1
            await asyncio.sleep(backoff + random.uniform(-jitter, jitter))

    async def _once(
        self, method: str, url: URL, headers: dict[str, str], body: bytes | None
    ) -> tuple[int, Mapping[str, str], bytes]:
        headers["x-ms-date"] = email.utils.formatdate(usegmt=True)
        headers["x-ms-version"] = self.api_version
        if body is not None:
            headers["Content-Length"] = str(len(body))  # signed: aiohttp would add it after the signature
        target = self._authorize(method, url, headers)
        hooked = self._hook_request(method, target, headers)
        config = self.transport.connection_config
        timeout = aiohttp.ClientTimeout(sock_connect=config.timeout, sock_read=config.read_timeout)
        async with self.transport.borrow() as session:
            try:
                async with session.request(method, target, headers=headers, data=body, timeout=timeout,
                                           allow_redirects=False, skip_auto_headers=("Content-Type",)) as response:
                    text = await response.read() if response.status >= 300 else b""
                    status, answer = response.status, response.headers
            except aiohttp.ClientResponseError as err:
                raise ServiceResponseError(err, error=err) from err
            except TimeoutError as err:
                raise ServiceResponseError(err, error=err) from err
            except aiohttp.ClientError as err:
                raise ServiceRequestError(err, error=err) from err
        if hooked is not None and self.response_hook is not None:
            self.response_hook(_HookedResponse(hooked.http_request, _Answer(status, answer, hooked.http_request)))
        return status, answer, text

    def _hook_request(self, method: str, url: URL, headers: dict[str, str]) -> Any:
        if self.request_hook is None and self.response_hook is None:
            return None
        from azure.core.pipeline import PipelineContext, PipelineRequest
        from azure.core.rest import HttpRequest

        hooked = PipelineRequest(HttpRequest(method, str(url), headers=headers), PipelineContext(None))
        if self.request_hook is not None:
            self.request_hook(hooked)
        return hooked


@dataclass(frozen=True)
class _Answer:
    """What a response hook reads of an answer: its status, headers and request."""

    status_code: int
    headers: Mapping[str, str]
    request: Any


@dataclass(frozen=True)
class _HookedResponse:
    """The ``PipelineResponse`` shape a response hook is given (``http_request``, ``http_response``)."""

    http_request: Any
    http_response: _Answer


class LeanBlob:
    """One blob's ``set_blob_metadata``, ``get_blob_properties`` and ``upload_blob``, sent by :class:`LeanAccount`.

    Any other call (``download_blob``) goes to the SDK's client of the same blob.
    """

    def __init__(self, account: LeanAccount, url: URL, sdk_blob: Any) -> None:
        self._account = account
        self._url = url
        self._sdk = sdk_blob

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sdk, name)

    async def set_blob_metadata(self, metadata: dict[str, str] | None = None, **kwargs: Any) -> dict[str, Any]:
        headers = {f"x-ms-meta-{k}": v for k, v in (metadata or {}).items()}
        _conditions(headers, kwargs.pop("etag", None), kwargs.pop("match_condition", None))
        if kwargs:
            return dict(await self._sdk.set_blob_metadata(metadata, **kwargs))
        _, answer = await self._account.send("PUT", self._url.with_query("comp=metadata"), headers)
        return _written(answer)

    async def get_blob_properties(self, **kwargs: Any) -> Any:
        if kwargs:
            return await self._sdk.get_blob_properties(**kwargs)
        _, answer = await self._account.send("HEAD", self._url, {})
        metadata = {k[10:]: v for k, v in answer.items() if k[:10].lower() == "x-ms-meta-"}
        modified = answer.get("Last-Modified")
        return LeanProperties(
            etag=answer.get("ETag", ""), metadata=metadata, size=int(answer.get("Content-Length") or 0),
            last_modified=email.utils.parsedate_to_datetime(modified) if modified else None,
        )

    async def upload_blob(self, data: bytes, **kwargs: Any) -> dict[str, Any]:
        overwrite = kwargs.pop("overwrite", False)
        metadata: dict[str, str] = kwargs.pop("metadata", None) or {}
        etag, condition = kwargs.pop("etag", None), kwargs.pop("match_condition", None)
        if kwargs or not isinstance(data, bytes) or len(data) > _LARGEST_BODY:
            return dict(await self._sdk.upload_blob(data, overwrite=overwrite, metadata=metadata, etag=etag,
                                                    match_condition=condition, **kwargs))
        headers = {"x-ms-blob-type": "BlockBlob", "Content-Type": "application/octet-stream",
                   **{f"x-ms-meta-{k}": v for k, v in metadata.items()}}
        if not overwrite and etag is None:
            headers["If-None-Match"] = "*"
        _conditions(headers, etag, condition)
        _, answer = await self._account.send("PUT", self._url, headers, data)
        return _written(answer)


def lean_account(client: Any, options: Mapping[str, Any], transport: object) -> LeanAccount | None:
    """The lean path of ``client`` (a ``ContainerClient`` the store built with ``options``), or None: the SDK's.

    Example:
        >>> from azure.storage.blob.aio import ContainerClient
        >>> from rxhubs.stores._blob_client import _client_options
        >>> options = _client_options(None, {})
        >>> client = ContainerClient.from_connection_string("UseDevelopmentStorage=true", "checkpoints", **options)
        >>> lean = lean_account(client, options, options["transport"])
        >>> lean.container_url, lean.account_name, lean.key is not None
        ('http://127.0.0.1:10000/devstoreaccount1/checkpoints', 'devstoreaccount1', True)
        >>> lean_account(client, {**options, "proxies": {"http": "http://proxy:3128"}}, options["transport"]) is None
        True
    """
    from rxhubs.stores._blob_client import _FailFastRetry, _RecyclingTransport

    if not isinstance(transport, _RecyclingTransport) or options.get("transport") is not transport:
        return None
    if set(options) - _HONOURED or not isinstance(options.get("retry_policy"), _FailFastRetry):
        return None
    url, version = getattr(client, "url", None), getattr(client, "api_version", None)
    account = getattr(client, "account_name", None)
    if not isinstance(url, str) or not isinstance(version, str) or not isinstance(account, str):
        return None
    base, _, query = url.partition("?")
    credential = getattr(client, "credential", None)
    key = getattr(credential, "account_key", None)
    if isinstance(key, str) and getattr(credential, "account_name", None) == account:
        try:
            secret: bytes | None = base64.b64decode(key, validate=True)
        except ValueError:
            return None
    elif credential is None and "sig=" in query:
        secret = None
    else:
        return None
    if urlsplit(base).scheme not in ("http", "https"):
        return None
    return LeanAccount(cast("_RecyclingTransport", transport), base.rstrip("/"), account, secret, query, version,
                       options.get("raw_request_hook"), options.get("raw_response_hook"), options["retry_policy"])


def _conditions(headers: dict[str, str], etag: str | None, condition: MatchConditions | None) -> None:
    if condition == MatchConditions.IfNotModified and etag:
        headers["If-Match"] = etag
    elif condition == MatchConditions.IfModified and etag:
        headers["If-None-Match"] = etag
    elif condition == MatchConditions.IfPresent:
        headers["If-Match"] = "*"
    elif condition == MatchConditions.IfMissing:
        headers["If-None-Match"] = "*"


def _written(answer: Mapping[str, str]) -> dict[str, Any]:
    modified = answer.get("Last-Modified")
    return {"etag": answer.get("ETag"),
            "last_modified": email.utils.parsedate_to_datetime(modified) if modified else None}


def _refusal(status: int, answer: Mapping[str, str], body: bytes) -> HttpResponseError:
    """The SDK's exception for a refusal: its type by status, its ``error_code`` from ``x-ms-error-code``."""
    code = answer.get("x-ms-error-code")
    found = _MESSAGE.search(body)
    message = found.group(1).decode("utf-8", "replace").strip() if found else f"HTTP {status}"
    kind = ClientAuthenticationError if status in (401, 403) else _ERRORS.get(status, HttpResponseError)
    error = kind(message=f"{message}\nErrorCode:{code}" if code else message)
    error.status_code, error.reason, error.error_code = status, message.splitlines()[0], code  # type: ignore[attr-defined]
    return error


@functools.lru_cache(maxsize=256)
def _service_order(names: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """``x-ms-`` header names (lower-cased, as given) in the order the service sorts them for a signature.

    The SDK's own comparison (the service's: hyphens weigh nothing, ``_`` sorts before digits).

    Example:
        >>> _service_order(("x-ms-version", "x-ms-meta-OwnerId", "x-ms-date"))
        (('x-ms-date', 'x-ms-date'), ('x-ms-meta-ownerid', 'x-ms-meta-OwnerId'), ('x-ms-version', 'x-ms-version'))
    """
    from azure.storage.blob._shared.authentication import _storage_header_sort

    return tuple(_storage_header_sort([(n.lower(), n) for n in names]))
