"""``rxhubs.EventHub``: the hub protocol over azure-eventhub's public aio API.

It holds the connection settings and a producer client (for properties and ``send``), and makes
:class:`~rxhubs.transport._receiver.AzurePartitionReceiver` s, one per partition read. Its management calls
(``_hub_management``) and sends (``_hub_sending``) live beside it, as the private bases of :class:`EventHub`.
"""

from __future__ import annotations

import asyncio
import logging
import re
from typing import TYPE_CHECKING, Any

from azure.eventhub.aio import EventHubConsumerClient, EventHubProducerClient

from rxhubs._models import PartitionContext, Position
from rxhubs.errors import ConfigurationError, ReceiverClosedError
from rxhubs.transport._base import DEFAULT_CONSUMER_GROUP, check_receiver_args
from rxhubs.transport._clients import SdkClients
from rxhubs.transport._connection_string import (
    ConnectionString,
    check_eventhub_name,
    parse_connection_string,
)
from rxhubs.transport._hub_sending import _Sends
from rxhubs.transport._native_send import Senders
from rxhubs.transport._options import ClientOptions, check_credential
from rxhubs.transport._orphans import Orphans
from rxhubs.transport._receiver import AzurePartitionReceiver
from rxhubs.transport._warm import WarmSessions

if TYPE_CHECKING:
    from types import TracebackType

__all__ = ["EventHub"]

_log = logging.getLogger("rxhubs.transport.azure")

_NS_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.-]{0,252}(:[0-9]{1,5})?$")


class EventHub(_Sends):
    """One Azure event hub (or a local emulator's), read through azure-eventhub's aio clients.

    Build it from a connection string with :meth:`from_connection_string`, or from a namespace, a hub name
    and a credential: an azure-identity async credential (``DefaultAzureCredential`` from
    ``azure.identity.aio``), an ``azure.core.credentials.AzureSasCredential`` or an
    ``AzureNamedKeyCredential``. Keyword options go to the SDK clients: ``retry_total``,
    ``retry_backoff_factor``, ``retry_backoff_max``, ``retry_mode``, ``transport_type``, ``http_proxy``,
    ``custom_endpoint_address``, ``connection_verify``, ``ssl_context``, ``socket_timeout``,
    ``auth_timeout``, ``user_agent``, ``logging_enable``; anything else is a
    :class:`~rxhubs.errors.ConfigurationError`. Management calls and :meth:`send` retry retriable errors
    themselves with those retry settings, and fail at once on a non-retriable one (an unknown hub, bad
    credentials) instead of backing off first as the SDK does. Dead paths are rxhubs' own business:
    ``idle_timeout`` (default 10 s; None: off), ``open_timeout`` (30 s), ``management_timeout`` (30 s), see
    ``docs/operations.md`` ("Liveness").

    ``track_last_enqueued_event_properties`` (default True) makes receivers report the partition's newest
    event with every delivery (:attr:`PartitionReceiver.last_enqueued_event_properties`, for lag). It costs
    the SDK about a quarter of its receive throughput (it decodes extra annotations on every event); turn it
    off when lag is read another way (:meth:`get_partition_properties`).

    Args:
        fully_qualified_namespace: ``<namespace>.servicebus.windows.net`` (or ``host:port`` for an emulator).
        eventhub_name: The event hub.
        credential: An async token credential, ``AzureSasCredential`` or ``AzureNamedKeyCredential``.
        use_development_emulator: Connect without TLS to the port in ``fully_qualified_namespace``
            (what ``UseDevelopmentEmulator=true`` does in a connection string).
        **options: SDK client options, as listed above.

    Raises:
        ConfigurationError: A bad namespace, hub name, credential or option.

    Example:
        >>> import rxhubs
        >>> async def main(conn_str):  # doctest: +SKIP
        ...     async with rxhubs.EventHub.from_connection_string(conn_str, "telemetry") as hub:
        ...         async with hub.receiver("0", start=rxhubs.Position.earliest()) as receiver:
        ...             events = await receiver.receive_batch(100, max_wait=5.0)
    """

    def __init__(
        self,
        fully_qualified_namespace: str,
        eventhub_name: str,
        credential: Any,
        *,
        use_development_emulator: bool = False,
        **options: Any,
    ) -> None:
        if not isinstance(fully_qualified_namespace, str) or not _NS_RE.match(fully_qualified_namespace):
            raise ConfigurationError(
                "fully_qualified_namespace must look like <namespace>.servicebus.windows.net (no scheme, no path)"
            )
        check_credential(credential)
        if not isinstance(use_development_emulator, bool):
            raise ConfigurationError("use_development_emulator must be a bool")
        check_eventhub_name(eventhub_name)
        self._setup(fully_qualified_namespace, eventhub_name, None, credential, use_development_emulator, options)

    @classmethod
    def from_connection_string(cls, conn_str: str, eventhub_name: str | None = None, **options: Any) -> EventHub:
        """An :class:`EventHub` from a connection string (with ``EntityPath``, or ``eventhub_name`` given).

        Args:
            conn_str: ``Endpoint=sb://...;SharedAccessKeyName=...;SharedAccessKey=...[;EntityPath=...]``, or
                with ``SharedAccessSignature=...``; ``UseDevelopmentEmulator=true`` for a local emulator.
            eventhub_name: The hub, when the string has no ``EntityPath`` (if both, they must agree).
            **options: SDK client options (see the class documentation).

        Raises:
            ConfigurationError: A malformed string, no hub name, or an unknown option. The message never
                contains the key or signature.

        Example:
            >>> hub = EventHub.from_connection_string(
            ...     "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=root;SharedAccessKey=c2VjcmV0",
            ...     "telemetry", retry_total=5)
            >>> hub
            EventHub(fully_qualified_namespace='ns.servicebus.windows.net', eventhub_name='telemetry')
        """
        parsed = parse_connection_string(conn_str, eventhub_name)
        if parsed.eventhub_name is None:
            raise ConfigurationError(
                "no event hub name: add EntityPath=<hub> to the connection string or pass eventhub_name"
            )
        hub = cls.__new__(cls)
        hub._setup(
            parsed.fully_qualified_namespace,
            parsed.eventhub_name,
            parsed,
            None,
            parsed.use_development_emulator,
            options,
        )
        return hub

    def _setup(
        self,
        namespace: str,
        eventhub_name: str,
        conn: ConnectionString | None,
        credential: Any,
        emulator: bool,
        options: dict[str, Any],
    ) -> None:
        settings = ClientOptions.parse(options)
        self._track_last_enqueued = settings.track_last_enqueued_event_properties
        self._namespace = namespace
        self._eventhub_name = eventhub_name
        self._conn = conn
        self._liveness = settings.liveness
        self._clients = SdkClients(
            namespace, eventhub_name, conn, credential, emulator, dict(settings.sdk), conn.secrets if conn else (),
            settings.liveness.advertised,
        )
        self._retry_total = settings.retry_total
        self._backoff_factor = settings.retry_backoff_factor
        self._backoff_max = settings.retry_backoff_max
        self._fixed_backoff = settings.fixed_backoff
        self._secrets = self._clients.secrets
        self._senders = Senders(self._secrets)  # the native send path's links (without it: SDK's send_batch)
        self._producer: EventHubProducerClient | None = None
        self._retired: list[EventHubProducerClient] = []  # producers that knew fewer partitions, closed last
        self._partition_ids: tuple[str, ...] | None = None
        self._ids_lock = asyncio.Lock()
        self._receivers: set[AzurePartitionReceiver] = set()
        self._orphans = Orphans()  # management calls whose caller gave up, closing their connections
        self._management_link = None  # (the Spark driver keeps one open: _management_link.py)
        self._warm = WarmSessions(self._clients, settings.liveness.open_timeout)  # opened ahead of a handover
        self._closed = False

    @property
    def fully_qualified_namespace(self) -> str:
        """The namespace host (with ``:port`` for an emulator)."""
        return self._namespace

    @property
    def eventhub_name(self) -> str:
        """The event hub's name."""
        return self._eventhub_name

    def __repr__(self) -> str:
        return f"EventHub(fully_qualified_namespace={self._namespace!r}, eventhub_name={self._eventhub_name!r})"

    def _new_consumer_client(self, consumer_group: str) -> EventHubConsumerClient:
        return self._clients.consumer(consumer_group)

    # -- receiving -------------------------------------------------------------------------------------------

    def receiver(
        self,
        partition_id: str,
        consumer_group: str = DEFAULT_CONSUMER_GROUP,
        start: Position | None = None,
        owner_level: int | None = None,
        prefetch: int = 300,
        track_last_enqueued_event_properties: bool | None = None,
    ) -> AzurePartitionReceiver:
        """A pull receiver for one partition; it attaches on the first pull and must be closed.

        Args:
            partition_id: The partition. An unknown one raises :class:`~rxhubs.errors.NotFoundError` from the
                first pull.
            consumer_group: The consumer group (an unknown one: ``NotFoundError`` from a pull).
            start: Where to start (a :class:`~rxhubs.Position`); default :meth:`Position.earliest`.
            owner_level: Owner level (epoch) for an exclusive reader; a reader with a higher one takes the
                partition and this one raises :class:`~rxhubs.errors.OwnershipLostError`.
            prefetch: Events the SDK asks the service for ahead of time (the AMQP link credit). Also the SDK
                batch size; the receiver buffers fewer than ``2 x prefetch`` converted events.
            track_last_enqueued_event_properties: Report the partition's newest event with each batch (None:
                the hub's setting, see the class documentation).

        Raises:
            ConfigurationError: Bad arguments (wrong types, a start that is not a :class:`~rxhubs.Position`).
            ReceiverClosedError: The hub was closed.

        Example:
            >>> async def first_events(hub):  # doctest: +SKIP
            ...     async with hub.receiver("0", "$Default", rxhubs.Position.earliest(), prefetch=1000) as r:
            ...         return await r.receive_batch(500, max_wait=2.0)
        """
        check_receiver_args(partition_id, consumer_group, owner_level, prefetch)
        if start is not None and not isinstance(start, Position):
            raise ConfigurationError(
                f"start must be an rxhubs.Position or None, got {type(start).__name__} "
                "(use Position.earliest(), Position.from_sequence_number(n), ...)"
            )
        position = Position.earliest() if start is None else start
        if self._closed:
            raise ReceiverClosedError(f"{self!r} is closed")
        context = PartitionContext(self._namespace, self._eventhub_name, consumer_group, partition_id)
        track = (
            self._track_last_enqueued
            if track_last_enqueued_event_properties is None
            else bool(track_last_enqueued_event_properties)
        )
        receiver = AzurePartitionReceiver(self, context, position, owner_level, prefetch, track)
        self._receivers.add(receiver)
        return receiver

    def _forget(self, receiver: AzurePartitionReceiver) -> None:
        self._receivers.discard(receiver)

    async def close(self) -> None:
        """Close every receiver this hub opened and its own connection; idempotent.

        Example:
            >>> async def done(hub):  # doctest: +SKIP
            ...     await hub.close()
        """
        if self._closed:
            return
        self._closed = True
        await asyncio.gather(*(r.close() for r in list(self._receivers)), self._warm.close(), return_exceptions=True)
        await self._orphans.close(timeout=5.0)
        if self._management_link is not None:
            await self._management_link.close()
        producers = [*self._retired, *([self._producer] if self._producer is not None else [])]
        self._producer, self._retired = None, []
        await self._senders.close(producers)  # the native links, then the SDK's producer clients

    async def __aenter__(self) -> EventHub:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()
