"""One management link kept open for a run of management calls (private; the Spark driver's planning uses it).

azure-eventhub (5.15) opens a new connection for every management call (hub properties, one partition's
properties), authenticates it, attaches the ``$management`` link and polls it every 50 ms until it is ready:
about 0.4 s per call against a local emulator, of which the request itself takes 2-5 ms. A Spark query's driver
makes two rounds of them before its first micro-batch (the partition ids, then every partition's properties).

:class:`ManagementLink` opens the SDK's own management client once (its connection, CBS authentication and link,
polled every millisecond) and sends the SDK's own request messages on it, one at a time, each with a fresh token:
about 40 ms to open, then a few ms per request. It answers only what it can answer cleanly: on any failure (a
private part of the SDK missing, a connection the service closed, a status code of 400 or more, more than
:data:`TIMEOUT` seconds) it closes its link and returns None, and the caller makes the SDK's call instead, with
its retries and its errors, as before. A link unused for :data:`MAX_IDLE` seconds is reopened before use: nothing
reads its connection between calls, so the service's keep-alive and close frames are not answered meanwhile.

Example:
    >>> link = ManagementLink()
    >>> link.requests, link.off
    (0, None)
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import Any

__all__ = ["MAX_IDLE", "TIMEOUT", "ManagementLink", "eventhub_properties", "partition_properties"]

_log = logging.getLogger("rxhubs.transport")

#: Seconds a kept link may sit unused before it is reopened instead of used.
MAX_IDLE = 20.0
#: Seconds opening the link and one request may take before the caller falls back to the SDK's call.
TIMEOUT = 5.0

_CLIENT_PARTS = ("_amqp_transport", "_create_auth_async", "_address", "_config", "eventhub_name")
_TRANSPORT_PARTS = ("create_mgmt_client", "build_message", "get_updated_token_async", "mgmt_client_request_async")
_MGMT_PARTS = ("open_async", "client_ready_async", "close_async")


class ManagementLink:
    """The SDK's management client, opened once and reused; see the module documentation.

    ``client``: the azure-eventhub aio client (producer or consumer) whose address, credential and configuration
    the link uses. Not safe across event loops: the link belongs to the loop that opened it.
    """

    def __init__(self) -> None:
        self._mgmt: Any = None
        self._auth: Any = None
        self._client: Any = None
        self._used = 0.0
        self._lock: asyncio.Lock | None = None
        self._closing: set[asyncio.Task[None]] = set()
        #: Requests answered on the kept link (for tests and the profile); why it is off for good, if it is.
        self.requests = 0
        self.opened = 0
        self.off: str | None = None

    async def request(self, client: Any, properties: Mapping[str, str], operation_type: bytes) -> Any | None:
        """The response's ``value`` for a READ of ``operation_type``, or None: the caller then asks the SDK."""
        if self.off is not None:
            return None
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            try:
                async with asyncio.timeout(TIMEOUT):
                    value = await self._request(client, properties, operation_type)
            except asyncio.CancelledError:
                self._discard()
                raise
            except NotImplementedError as exc:
                self.off = str(exc)
                _log.info("management calls through azure-eventhub's own path: %s", exc)
                self._discard()
                return None
            except Exception as exc:  # the SDK's call decides what this was (and retries it)
                _log.debug("the kept management link failed (%s); asking through azure-eventhub", type(exc).__name__)
                self._discard()
                return None
        return value

    async def _request(self, client: Any, properties: Mapping[str, str], operation_type: bytes) -> Any | None:
        from azure.eventhub._constants import MGMT_STATUS_CODE, MGMT_STATUS_DESC, READ_OPERATION

        mgmt = await self._open(client)
        transport = client._amqp_transport
        message = transport.build_message(application_properties=dict(properties))
        message.application_properties["security_token"] = await transport.get_updated_token_async(self._auth)
        status, _, response = await transport.mgmt_client_request_async(
            mgmt, message, operation=READ_OPERATION, operation_type=operation_type,
            status_code_field=MGMT_STATUS_CODE, description_fields=MGMT_STATUS_DESC,
        )
        if int(status) >= 400:  # the SDK's call asks again and raises its own error for it
            return None
        self._used = time.monotonic()
        self.requests += 1
        return response.value

    async def _open(self, client: Any) -> Any:
        if self._mgmt is not None and (client is not self._client or time.monotonic() - self._used > MAX_IDLE):
            self._discard()
        if self._mgmt is not None:
            return self._mgmt
        _check(client, _CLIENT_PARTS, "client")
        transport = client._amqp_transport
        _check(transport, _TRANSPORT_PARTS, "transport")
        auth = await client._create_auth_async()
        mgmt = transport.create_mgmt_client(client._address, mgmt_auth=auth, config=client._config)
        _check(mgmt, _MGMT_PARTS, "management client")
        self._mgmt, self._auth, self._client = mgmt, auth, client
        await mgmt.open_async()
        while not await mgmt.client_ready_async():  # noqa: ASYNC110 - the SDK's readiness is polled, as it does
            await asyncio.sleep(0.001)
        self._used = time.monotonic()
        self.opened += 1
        return mgmt

    def _discard(self) -> None:
        mgmt, self._mgmt, self._auth, self._client = self._mgmt, None, None, None
        if mgmt is not None:
            task = asyncio.get_running_loop().create_task(_close(mgmt))
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    async def close(self) -> None:
        """Close the link (and wait for links being closed); never raises."""
        self._discard()
        if self._closing:
            await asyncio.wait(set(self._closing), timeout=TIMEOUT)


def _check(thing: Any, names: tuple[str, ...], what: str) -> None:
    missing = [name for name in names if not hasattr(thing, name)]
    if missing:
        raise NotImplementedError(f"azure-eventhub's {what} has no {', '.join(missing)}")


async def _close(mgmt: Any) -> None:
    try:
        await mgmt.close_async()
    except Exception as exc:  # closing a link that failed: nothing to report
        _log.debug("closing a management link failed: %s", type(exc).__name__)


async def eventhub_properties(link: ManagementLink, client: Any) -> dict[str, Any] | None:
    """The hub's properties as azure-eventhub's ``get_eventhub_properties`` returns them, or None (ask the SDK)."""
    from azure.eventhub._constants import MGMT_OPERATION
    from azure.eventhub._utils import utc_from_timestamp

    value = await link.request(client, {"name": client.eventhub_name}, MGMT_OPERATION)
    if not value:
        return None
    return {
        "eventhub_name": value[b"name"].decode("utf-8"),
        "created_at": utc_from_timestamp(float(value[b"created_at"]) / 1000),
        "partition_ids": [p.decode("utf-8") for p in value[b"partition_ids"]],
    }


async def partition_properties(link: ManagementLink, client: Any, partition_id: str) -> dict[str, Any] | None:
    """One partition's properties as azure-eventhub's ``get_partition_properties`` returns them, or None."""
    from azure.eventhub._constants import MGMT_PARTITION_OPERATION
    from azure.eventhub._utils import utc_from_timestamp

    value = await link.request(client, {"name": client.eventhub_name, "partition": partition_id},
                               MGMT_PARTITION_OPERATION)
    if not value:
        return None
    return {
        "eventhub_name": value[b"name"].decode("utf-8"),
        "id": value[b"partition"].decode("utf-8"),
        "beginning_sequence_number": value[b"begin_sequence_number"],
        "last_enqueued_sequence_number": value[b"last_enqueued_sequence_number"],
        "last_enqueued_offset": value[b"last_enqueued_offset"].decode("utf-8"),
        "is_empty": value[b"is_partition_empty"],
        "last_enqueued_time_utc": utc_from_timestamp(float(value[b"last_enqueued_time_utc"]) / 1000),
    }
