"""``rxhubs.EventHub``: the hub protocol over azure-eventhub's public aio API.

It holds the connection settings and a producer client (for properties and ``send``), and makes
:class:`~rxhubs.transport._receiver.AzurePartitionReceiver` s, one per partition read.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from azure.eventhub.aio import EventHubConsumerClient, EventHubProducerClient

from rxhubs._models import EventHubProperties, PartitionContext, PartitionProperties, Position
from rxhubs.errors import ConfigurationError, NotFoundError, ReceiverClosedError, TransportError
from rxhubs.transport._base import DEFAULT_CONSUMER_GROUP, check_receiver_args
from rxhubs.transport._clients import SdkClients
from rxhubs.transport._connection_string import (
    ConnectionString,
    check_eventhub_name,
    parse_connection_string,
)
from rxhubs.transport._errors import translate_error
from rxhubs.transport._liveness import bounded
from rxhubs.transport._native_send import Senders
from rxhubs.transport._options import ClientOptions, check_credential
from rxhubs.transport._orphans import Orphans
from rxhubs.transport._publisher import OutgoingEvent, check_routing, outgoing_events
from rxhubs.transport._receiver import AzurePartitionReceiver
from rxhubs.transport._warm import WarmSessions

if TYPE_CHECKING:
    from types import TracebackType

__all__ = ["EventHub"]

_log = logging.getLogger("rxhubs.transport.azure")
_T = TypeVar("_T")

_NS_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.-]{0,252}(:[0-9]{1,5})?$")


class EventHub:
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

    def _producer_client(self) -> EventHubProducerClient:
        if self._closed:
            raise TransportError(f"{self!r} is closed", retriable=False)
        if self._producer is None:
            self._producer = self._clients.producer()
        return self._producer

    async def _retrying(
        self,
        what: str,
        operation: Callable[[EventHubProducerClient], Coroutine[Any, Any, _T]],
        timeout: float | None = None,
    ) -> _T:
        """Run ``operation`` with the hub's retries; each attempt bounded by ``timeout`` seconds (None: not)."""
        attempt = 0
        while True:
            client = self._producer_client()
            try:  # a management call opens its own connection: a retry does not reuse a silent one
                return await (operation(client) if timeout is None else bounded(operation(client), timeout, what))
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                error = translate_error(exc, what, self._secrets)
                if not error.retriable or attempt >= self._retry_total:
                    raise error from exc
                delay = self._backoff_factor if self._fixed_backoff else self._backoff_factor * 2**attempt
                _log.info("%s failed (%s); retrying in %.2f s", what, error, min(delay, self._backoff_max))
                await asyncio.sleep(min(delay, self._backoff_max))
                attempt += 1

    async def get_properties(self) -> EventHubProperties:
        """The hub's name, creation time and partition ids.

        Raises:
            NotFoundError: The hub does not exist.
            AuthenticationError: The credentials were refused.
            TransportError: The service could not be reached (after the retries).

        Example:
            >>> async def show(hub):  # doctest: +SKIP
            ...     props = await hub.get_properties()
            ...     return props.partition_ids
        """
        what = f"get properties of event hub {self._eventhub_name!r}"
        raw = await self._retrying(
            what, lambda c: self._orphans.run(c.get_eventhub_properties()), self._liveness.management_timeout
        )
        if not raw:
            raise NotFoundError(f"event hub {self._eventhub_name!r} returned no properties")
        ids = tuple(str(p) for p in raw["partition_ids"])
        if self._producer is not None and self._partition_ids is not None and set(ids) - set(self._partition_ids):
            # the SDK's producer refuses partition ids it did not read when it opened: partitions were added
            self._retired.append(self._producer)
            self._producer = None
        self._partition_ids = ids
        created = raw.get("created_at")
        return EventHubProperties(name=str(raw["eventhub_name"]), created_at=created, partition_ids=ids)

    async def get_partition_ids(self) -> Sequence[str]:
        """The partition ids, in the service's order.

        Example:
            >>> async def ids(hub):  # doctest: +SKIP
            ...     return await hub.get_partition_ids()  # ['0', '1', '2', '3']
        """
        return list((await self.get_properties()).partition_ids)

    async def _check_partition(self, partition_id: str) -> None:
        if self._partition_ids is not None and partition_id in self._partition_ids:
            return
        async with self._ids_lock:  # receivers opening together share one management call
            if self._partition_ids is None or partition_id not in self._partition_ids:
                await self.get_properties()  # (re)load: partitions can be added to a hub
            assert self._partition_ids is not None
            if partition_id not in self._partition_ids:
                raise NotFoundError(
                    f"event hub {self._eventhub_name!r} has no partition {partition_id!r} "
                    f"(partitions: {', '.join(self._partition_ids)})"
                )

    async def get_partition_properties(self, partition_id: str) -> PartitionProperties:
        """One partition's properties.

        Raises:
            NotFoundError: Unknown hub or partition.
            ConfigurationError: ``partition_id`` is not a non-empty str.

        Example:
            >>> async def lag(hub):  # doctest: +SKIP
            ...     p = await hub.get_partition_properties("0")
            ...     return p.last_enqueued_sequence_number
        """
        if not isinstance(partition_id, str) or not partition_id:
            raise ConfigurationError(f"partition_id must be a non-empty str, got {partition_id!r}")
        await self._check_partition(partition_id)
        raw = await self._retrying(
            f"get properties of partition {partition_id!r} of {self._eventhub_name!r}",
            lambda c: self._orphans.run(c.get_partition_properties(partition_id)),
            self._liveness.management_timeout,
        )
        if not raw:
            raise NotFoundError(f"event hub {self._eventhub_name!r} has no partition {partition_id!r}")
        return PartitionProperties(
            eventhub_name=str(raw["eventhub_name"]),
            partition_id=str(raw["id"]),
            beginning_sequence_number=int(raw["beginning_sequence_number"]),
            last_enqueued_sequence_number=int(raw["last_enqueued_sequence_number"]),
            last_enqueued_offset=str(raw["last_enqueued_offset"]),
            last_enqueued_time_utc=raw.get("last_enqueued_time_utc"),
            is_empty=bool(raw["is_empty"]),
        )

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

    # -- sending ---------------------------------------------------------------------------------------------

    async def send(
        self,
        bodies: Iterable[bytes | str],
        partition_id: str | None = None,
        partition_key: str | None = None,
        properties: Mapping[str, Any] | None = None,
    ) -> None:
        """Send events (a convenience for demos and tests; in a pipeline, ``hops.publish`` sends with :meth:`publish`).

        Events go in as few batches as fit, in order. Without ``partition_id`` or ``partition_key`` the
        service picks partitions round robin.

        Args:
            bodies: Event bodies (str is sent as UTF-8).
            partition_id: Send to this partition.
            partition_key: Or let the service hash this key to a partition.
            properties: Application properties set on every event.

        Raises:
            ConfigurationError: Bad arguments, or an event too large for the hub.
            NotFoundError: Unknown hub or partition.

        Example:
            >>> async def seed(hub):  # doctest: +SKIP
            ...     await hub.send([b'{"t": 21.5}', b'{"t": 21.7}'], partition_id="0")
        """
        events = outgoing_events(bodies, properties)
        check_routing(partition_id, partition_key)
        if partition_id is not None:
            await self._check_partition(partition_id)
        await self._send(events, partition_id, partition_key)

    async def publish(
        self,
        events: Sequence[OutgoingEvent],
        *,
        partition_id: str | None = None,
        partition_key: str | None = None,
    ) -> None:
        """Send events, each with its own properties, in order (what :func:`rxhubs.operators.publish` calls).

        Events go in as few batches as fit the hub's maximum message size, to ``partition_id``, or with
        ``partition_key``, or (neither) where the service puts them; retriable failures are retried with the
        hub's retry settings, resending only what was not acknowledged. Raises ``ConfigurationError`` (bad
        routing, an event over the maximum size), ``NotFoundError`` or ``TransportError`` (after the retries).

        Example:
            >>> from rxhubs.transport._publisher import OutgoingEvent
            >>> async def forward(hub):  # doctest: +SKIP
            ...     await hub.publish([OutgoingEvent(b"x", {"source": "a"})], partition_key="device-7")
        """
        check_routing(partition_id, partition_key)
        if partition_id is not None:
            await self._check_partition(partition_id)
        await self._send(list(events), partition_id, partition_key)

    async def _send(self, pending: list[OutgoingEvent], partition_id: str | None, partition_key: str | None) -> None:
        where = f"partition {partition_id!r}" if partition_id is not None else f"{self._eventhub_name!r}"
        if pending:  # acknowledged batches leave `pending`: a retry resends only the rest
            await self._retrying(
                f"send to {where}", lambda client: self._senders.send(client, pending, partition_id, partition_key)
            )

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
        producers = [*self._retired, *([self._producer] if self._producer is not None else [])]
        self._producer, self._retired = None, []
        await self._senders.close(producers)  # the native links, then the SDK's producer clients

    async def __aenter__(self) -> EventHub:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()
