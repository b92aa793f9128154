"""``rxhubs.EventHub``: the hub protocol over azure-eventhub's public aio API, with a pull-based receiver.

How a receiver works (see ``docs/transport.md`` for the measurements behind it):

- Each receiver owns one ``EventHubConsumerClient`` and, from its first pull, one task running the SDK's
  ``receive_batch`` for its partition. The SDK's callback converts each batch to :class:`~rxhubs.Event` and
  puts it in a bounded buffer (under ``2 x prefetch`` events); when it is full the callback waits, the SDK
  stops reading the socket once its own buffer passes one batch, and the service stops sending: a receiver
  holds at most about ``4 x prefetch`` events however slowly it is pulled.
- ``receive_batch(max_count, max_wait)`` waits for the first buffered event or ``max_wait``, then returns
  what is buffered, up to ``max_count`` (SDK batches are split and merged as needed).
- The SDK's traps are closed off. After a steal or any error that exhausted its retries, the SDK would
  re-attach on its own every load-balancing interval **from the original starting position**, replaying
  everything. So the receiver's SDK client gets a load-balancing interval of days, the SDK task is
  cancelled on the first error, and the error is raised from the next pull (an
  :class:`~rxhubs.errors.OwnershipLostError` at once, discarding what was buffered, so two owners do not
  process the same events; other errors after the buffered events were handed out). A reopened receiver
  starts after the last event handed out, and every receiver drops any event at or below the highest
  sequence number it has buffered (the SDK's internal link retries may replay some).
- ``close()`` stops the SDK task without waiting for the SDK's once-a-second poll of its stopped
  partitions, then closes the client, so the link is released when ``close()`` returns.
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import logging
import re
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from azure.eventhub import EventData
from azure.eventhub import exceptions as sdk_errors
from azure.eventhub.aio import EventHubConsumerClient, EventHubProducerClient
from azure.eventhub.amqp import AmqpMessageBodyType

from rxhubs._models import (
    Event,
    EventHubProperties,
    LastEnqueuedEventProperties,
    PartitionContext,
    PartitionProperties,
    Position,
)
from rxhubs.errors import (
    AuthenticationError,
    ConfigurationError,
    NotFoundError,
    OwnershipLostError,
    ReceiverClosedError,
    RxHubsError,
    TransportError,
)
from rxhubs.transport._base import DEFAULT_CONSUMER_GROUP, ReceiverBase, check_receiver_args
from rxhubs.transport._connection_string import (
    ConnectionString,
    check_eventhub_name,
    parse_connection_string,
    redact,
)

if TYPE_CHECKING:
    from types import TracebackType

__all__ = ["AzurePartitionReceiver", "EventHub"]

_log = logging.getLogger("rxhubs.transport.azure")
_T = TypeVar("_T")

UTC = _dt.UTC

#: Options passed through to the SDK clients (see ``EventHubConsumerClient``'s documentation).
CLIENT_OPTIONS = frozenset(
    {
        "retry_total",
        "retry_backoff_factor",
        "retry_backoff_max",
        "retry_mode",
        "transport_type",
        "http_proxy",
        "custom_endpoint_address",
        "connection_verify",
        "ssl_context",
        "socket_timeout",
        "auth_timeout",
        "user_agent",
        "idle_timeout",
        "logging_enable",
    }
)

# The SDK re-attaches a failed partition every load-balancing interval, from the original position. A receiver
# never wants that: it cancels the SDK task on the first error anyway, and this makes sure it never happens.
_NEVER_REBALANCE = 10 * 24 * 3600.0
# Upper bound on each step of closing a receiver (normally milliseconds).
_CLOSE_STEP_TIMEOUT = 5.0

_NS_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.-]{0,252}(:[0-9]{1,5})?$")
_SEQ = b"x-opt-sequence-number"
_OFFSET = b"x-opt-offset"
_ENQUEUED = b"x-opt-enqueued-time"
_PKEY = b"x-opt-partition-key"
_DATA = AmqpMessageBodyType.DATA
_fromtimestamp = _dt.datetime.fromtimestamp


# -- conversion ------------------------------------------------------------------------------------------------


# Decoded names of the keys seen most (system properties repeat on every event).
_KEY_CACHE: dict[bytes, str] = {}


def _str_map(items: Mapping[Any, Any]) -> dict[str, Any]:
    """Keys to str; bytes values to str when they are UTF-8 (the AMQP stack hands strings back as bytes)."""
    out: dict[str, Any] = {}
    for key, value in items.items():
        if key.__class__ is bytes:
            name = _KEY_CACHE.get(key)
            if name is None:
                name = key.decode("utf-8", "replace")
                if len(_KEY_CACHE) < 1024:
                    _KEY_CACHE[key] = name
        else:
            name = key if key.__class__ is str else str(key)
        if value.__class__ is bytes:
            try:
                value = value.decode("utf-8")
            except UnicodeDecodeError:
                pass
        out[name] = value
    return out


# The AMQP properties section, as the SDK names its entries among system properties.
_MESSAGE_PROPERTIES = (
    ("message-id", "message_id"),
    ("user-id", "user_id"),
    ("to", "to"),
    ("subject", "subject"),
    ("reply-to", "reply_to"),
    ("correlation-id", "correlation_id"),
    ("content-type", "content_type"),
    ("content-encoding", "content_encoding"),
    ("absolute-expiry-time", "absolute_expiry_time"),
    ("creation-time", "creation_time"),
    ("group-id", "group_id"),
    ("group-sequence", "group_sequence"),
    ("reply-to-group-id", "reply_to_group_id"),
)


class SystemProperties(Mapping[str, Any]):
    """A received event's service-set properties (``x-opt-*`` annotations and the AMQP properties section).

    Decoded on first use: most consumers never look, and decoding them for every event would cost about a
    third of the conversion. Behaves as a read-only dict with str keys (it equals, and pickles as, one).

    Example:
        >>> sp = SystemProperties({b"x-opt-sequence-number": 7, b"x-opt-offset": b"896"}, None)
        >>> sp["x-opt-offset"], len(sp), sp == {"x-opt-sequence-number": 7, "x-opt-offset": "896"}
        ('896', 2, True)
    """

    __slots__ = ("_annotations", "_data", "_properties")

    def __init__(self, annotations: Mapping[Any, Any] | None, properties: Any) -> None:
        self._annotations = annotations
        self._properties = properties
        self._data: dict[str, Any] | None = None

    def _load(self) -> dict[str, Any]:
        data = self._data
        if data is None:
            data = {}
            props = self._properties
            if props is not None:
                for name, attribute in _MESSAGE_PROPERTIES:
                    value = getattr(props, attribute, None)
                    if value:
                        data[name] = value.decode("utf-8", "replace") if value.__class__ is bytes else value
            if self._annotations:
                data.update(_str_map(self._annotations))
            self._data = data
            self._annotations = self._properties = None
        return data

    def __getitem__(self, key: str) -> Any:
        return self._load()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._load())

    def __len__(self) -> int:
        return len(self._load())

    def __repr__(self) -> str:
        return repr(self._load())

    def __reduce__(self) -> tuple[Any, ...]:
        return (dict, (self._load(),))


def _body_bytes(raw: Any) -> bytes:
    body_type = raw.body_type
    body = raw.body
    if body_type is _DATA:
        return b"".join(body)
    if isinstance(body, bytes):
        return body
    if isinstance(body, str):
        return body.encode("utf-8")
    if body is None:
        return b""
    if body_type == AmqpMessageBodyType.SEQUENCE:
        body = list(body)
    return str(body).encode("utf-8")


def event_from_sdk(event: EventData) -> Event:
    """Convert an azure-eventhub ``EventData`` (as received) to an :class:`~rxhubs.Event`.

    The body becomes bytes (data sections joined; value and sequence bodies as UTF-8 text), property keys
    become str, and property values the AMQP stack returns as bytes become str when they are valid UTF-8
    (AMQP strings arrive as bytes in the Python SDK); ``partition_key`` and ``offset`` become str and
    ``enqueued_time`` an aware UTC datetime.

    Example:
        >>> data = EventData(b"hi")
        >>> data.properties = {"kind": "greeting"}
        >>> data.raw_amqp_message.annotations = {
        ...     b"x-opt-sequence-number": 7, b"x-opt-offset": b"896", b"x-opt-enqueued-time": 1767225600000}
        >>> e = event_from_sdk(data)
        >>> e.body, e.sequence_number, e.offset, e.enqueued_time.isoformat(), e.properties
        (b'hi', 7, '896', '2026-01-01T00:00:00+00:00', {'kind': 'greeting'})
    """
    raw = event.raw_amqp_message
    annotations = raw.annotations or {}
    offset = annotations.get(_OFFSET)
    enqueued = annotations.get(_ENQUEUED)
    key = annotations.get(_PKEY)
    app = raw.application_properties
    return Event._unchecked(
        _body_bytes(raw),
        int(annotations[_SEQ]),
        offset.decode("ascii") if offset.__class__ is bytes else str(offset),
        (
            _fromtimestamp(enqueued / 1000, UTC)
            if enqueued.__class__ is int or isinstance(enqueued, int | float)
            else enqueued
            if isinstance(enqueued, _dt.datetime)
            else _dt.datetime.fromtimestamp(0, UTC)
        ),
        None if key is None else key.decode("utf-8", "replace") if key.__class__ is bytes else str(key),
        _str_map(app) if app else {},
        SystemProperties(annotations, raw.properties),
    )


def _last_enqueued(props: Mapping[str, Any] | None) -> LastEnqueuedEventProperties | None:
    if not props or props.get("sequence_number") is None:
        return None
    return LastEnqueuedEventProperties(
        sequence_number=int(props["sequence_number"]),
        offset=props.get("offset"),
        enqueued_time=props.get("enqueued_time"),
        retrieval_time=props.get("retrieval_time"),
    )


def _sdk_position(start: Position) -> tuple[str | int | _dt.datetime, bool]:
    """The SDK's ``starting_position`` and ``starting_position_inclusive`` for a :class:`Position`."""
    if start.kind == "earliest":
        return "-1", False
    if start.kind == "latest":
        return "@latest", False
    assert isinstance(start.value, str | int | _dt.datetime)  # checked by Position
    return start.value, start.inclusive


def _high_water(start: Position) -> int:
    """Events at or below this sequence number are never handed out (-1: none filtered)."""
    if start.kind == "sequence_number":
        assert isinstance(start.value, int)
        return start.value - 1 if start.inclusive else start.value
    return -1


# -- errors ----------------------------------------------------------------------------------------------------


def _condition(exc: BaseException) -> str:
    error = getattr(exc, "error", None)
    return error.lower() if isinstance(error, str) else ""


def _first_line(exc: BaseException, secrets: Sequence[str]) -> str:
    text = str(exc).strip() or type(exc).__name__
    return redact(text.splitlines()[0], *secrets)


def translate_error(exc: BaseException, what: str, secrets: Sequence[str] = ()) -> RxHubsError:
    """Map an azure-eventhub (or transport) exception to the rxhubs exception tree.

    The message is one line: ``what`` and the SDK's first line, with secrets removed. Raise the result
    ``from exc`` so the original stays on ``__cause__``.

    Example:
        >>> from azure.eventhub.exceptions import ConnectionLostError
        >>> e = translate_error(ConnectionLostError("link detached"), "receive from partition 0")
        >>> type(e).__name__, e.retriable
        ('TransportError', True)
    """
    if isinstance(exc, RxHubsError):
        return exc
    condition = _condition(exc)
    detail = _first_line(exc, secrets)
    message = f"{what}: {detail}"
    lowered = detail.lower()
    if "stolen" in condition or "receiver-disconnected" in condition or "epoch" in lowered or "stolen" in lowered:
        return OwnershipLostError(f"{what}: a reader with a higher owner level took the partition ({detail})")
    if "not-found" in condition or "notfound" in condition.replace("-", "") or "not found" in lowered:
        return NotFoundError(message)
    if isinstance(exc, sdk_errors.AuthenticationError) or "unauthorized" in condition:
        return AuthenticationError(message)
    if "argument" in condition or isinstance(exc, sdk_errors.EventDataError | ValueError | TypeError):
        return ConfigurationError(message)
    if isinstance(exc, sdk_errors.ClientClosedError):
        return TransportError(message, retriable=False)
    if isinstance(exc, sdk_errors.EventHubError | OSError | TimeoutError | asyncio.TimeoutError):
        return TransportError(message)
    return RxHubsError(message, retriable=False)


# -- the hub ---------------------------------------------------------------------------------------------------


class EventHub:
    """One Azure event hub (or a local emulator's), read through azure-eventhub's aio clients.

    Build it from a connection string with :meth:`from_connection_string`, or from a namespace, a hub name
    and a credential: an azure-identity async credential (``DefaultAzureCredential`` from
    ``azure.identity.aio``), an ``azure.core.credentials.AzureSasCredential`` or an
    ``AzureNamedKeyCredential``. Keyword options go to the SDK clients: ``retry_total``,
    ``retry_backoff_factor``, ``retry_backoff_max``, ``retry_mode``, ``transport_type``, ``http_proxy``,
    ``custom_endpoint_address``, ``connection_verify``, ``ssl_context``, ``socket_timeout``,
    ``auth_timeout``, ``user_agent``, ``idle_timeout``, ``logging_enable``; anything else is a
    :class:`~rxhubs.errors.ConfigurationError`. Management calls and :meth:`send` retry retriable errors
    themselves with those retry settings, and fail at once on a non-retriable one (an unknown hub, bad
    credentials) instead of backing off first as the SDK does.

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
        if credential is None or isinstance(credential, str | bytes):
            raise ConfigurationError(
                "credential must be an azure-identity credential, AzureSasCredential or AzureNamedKeyCredential "
                "(for a connection string use EventHub.from_connection_string)"
            )
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
        options = dict(options)
        track = options.pop("track_last_enqueued_event_properties", True)
        if not isinstance(track, bool):
            raise ConfigurationError(f"track_last_enqueued_event_properties must be a bool, got {track!r}")
        self._track_last_enqueued = track
        unknown = sorted(set(options) - CLIENT_OPTIONS)
        if unknown:
            raise ConfigurationError(
                f"unknown EventHub option(s) {', '.join(map(repr, unknown))}; "
                f"known: {', '.join(sorted(CLIENT_OPTIONS))}"
            )
        retry_total = options.get("retry_total", 3)
        if isinstance(retry_total, bool) or not isinstance(retry_total, int) or retry_total < 0:
            raise ConfigurationError(f"retry_total must be an int >= 0, got {retry_total!r}")
        for name in ("retry_backoff_factor", "retry_backoff_max"):
            value = options.get(name, 0)
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise ConfigurationError(f"{name} must be a number >= 0, got {value!r}")
        mode = str(getattr(options.get("retry_mode", "exponential"), "value", options.get("retry_mode"))).lower()
        if "retry_mode" in options and mode not in ("exponential", "fixed"):
            raise ConfigurationError("retry_mode must be 'exponential' or 'fixed'")
        self._namespace = namespace
        self._eventhub_name = eventhub_name
        self._conn = conn
        self._credential = credential
        self._emulator = emulator
        self._options = dict(options)
        self._retry_total: int = retry_total
        self._backoff_factor = float(options.get("retry_backoff_factor", 0.8))
        self._backoff_max = float(options.get("retry_backoff_max", 120))
        self._fixed_backoff = mode == "fixed"
        self._secrets: tuple[str, ...] = conn.secrets if conn is not None else ()
        self._producer: EventHubProducerClient | None = None
        self._partition_ids: tuple[str, ...] | None = None
        self._ids_lock = asyncio.Lock()
        self._receivers: set[AzurePartitionReceiver] = set()
        self._closed = False

    # -- identity --------------------------------------------------------------------------------------------

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

    # -- SDK clients -----------------------------------------------------------------------------------------

    def _client_kwargs(self, overrides: Mapping[str, Any]) -> dict[str, Any]:
        kwargs = {**self._options, **overrides}
        if self._conn is None and self._emulator:
            kwargs["use_tls"] = False  # what the SDK itself does for UseDevelopmentEmulator=true
        return kwargs

    def _new_consumer_client(self, consumer_group: str) -> EventHubConsumerClient:
        kwargs = self._client_kwargs({"load_balancing_interval": _NEVER_REBALANCE})
        try:
            if self._conn is not None:
                return EventHubConsumerClient.from_connection_string(
                    self._conn.to_connection_string(), consumer_group, eventhub_name=self._eventhub_name, **kwargs
                )
            return EventHubConsumerClient(
                self._namespace, self._eventhub_name, consumer_group, self._credential, **kwargs
            )
        except Exception as exc:
            raise translate_error(exc, "could not create the Event Hubs consumer client", self._secrets) from exc

    def _producer_client(self) -> EventHubProducerClient:
        if self._closed:
            raise TransportError(f"{self!r} is closed", retriable=False)
        if self._producer is None:
            # One attempt per SDK call, no SDK backoff: _retrying() retries what is worth retrying.
            kwargs = self._client_kwargs({"retry_total": 0, "retry_backoff_factor": 0.0})
            try:
                if self._conn is not None:
                    self._producer = EventHubProducerClient.from_connection_string(
                        self._conn.to_connection_string(), eventhub_name=self._eventhub_name, **kwargs
                    )
                else:
                    self._producer = EventHubProducerClient(
                        self._namespace, self._eventhub_name, self._credential, **kwargs
                    )
            except Exception as exc:
                raise translate_error(exc, "could not create the Event Hubs producer client", self._secrets) from exc
        return self._producer

    async def _retrying(self, what: str, operation: Callable[[EventHubProducerClient], Awaitable[_T]]) -> _T:
        attempt = 0
        while True:
            client = self._producer_client()
            try:
                return await operation(client)
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

    # -- management ------------------------------------------------------------------------------------------

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
        raw = await self._retrying(
            f"get properties of event hub {self._eventhub_name!r}", lambda c: c.get_eventhub_properties()
        )
        if not raw:
            raise NotFoundError(f"event hub {self._eventhub_name!r} returned no properties")
        ids = tuple(str(p) for p in raw["partition_ids"])
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
            lambda c: c.get_partition_properties(partition_id),
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
        receiver = AzurePartitionReceiver(self, context, position, owner_level, prefetch)
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
        """Send events (a convenience for demos and tests; use the SDK's producer for serious sending).

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
        if isinstance(bodies, bytes | str):
            raise ConfigurationError("bodies must be an iterable of bytes or str, not a single body")
        items = list(bodies)
        for body in items:
            if not isinstance(body, bytes | str):
                raise ConfigurationError(f"event bodies must be bytes or str, got {type(body).__name__}")
        if partition_id is not None:
            if not isinstance(partition_id, str) or not partition_id:
                raise ConfigurationError(f"partition_id must be a non-empty str, got {partition_id!r}")
            await self._check_partition(partition_id)
        if partition_key is not None and not isinstance(partition_key, str):
            raise ConfigurationError(f"partition_key must be a str, got {partition_key!r}")
        if not items:
            return
        props: dict[str | bytes, Any] | None = {str(k): v for k, v in properties.items()} if properties else None
        where = f"partition {partition_id!r}" if partition_id is not None else f"{self._eventhub_name!r}"

        async def send_all(client: EventHubProducerClient) -> None:
            nonlocal items
            while items:
                batch = await client.create_batch(partition_id=partition_id, partition_key=partition_key)
                count = 0
                for body in items:
                    data = EventData(body)
                    if props:
                        data.properties = dict(props)
                    try:
                        batch.add(data)
                    except ValueError:
                        if count == 0:
                            raise ConfigurationError(
                                f"an event of {len(body)} bytes is larger than the hub's maximum message size"
                            ) from None
                        break
                    count += 1
                await client.send_batch(batch)
                items = items[count:]  # only what was acknowledged leaves the list; a retry resends the rest

        await self._retrying(f"send to {where}", send_all)

    # -- closing ---------------------------------------------------------------------------------------------

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
        receivers = list(self._receivers)
        await asyncio.gather(*(r.close() for r in receivers), return_exceptions=True)
        producer, self._producer = self._producer, None
        if producer is not None:
            try:
                await producer.close()
            except Exception as exc:  # closing must not fail the caller
                _log.debug("closing the producer client failed: %s", _first_line(exc, self._secrets))

    async def __aenter__(self) -> EventHub:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()


# -- the receiver ----------------------------------------------------------------------------------------------


def sdk_delivery_tags(client: Any, consumer_group: str, partition_id: str) -> set[Any] | None:
    """The SDK receiver link's set of delivery tags awaiting a disposition, or None if it cannot be found.

    A workaround's only way in: azure-eventhub 5.15's ``ReceiverLink`` adds every delivery's tag to this set
    and removes it only when it sends a disposition, which an Event Hubs receiver never does, so the set
    grows by about 60 bytes per event, forever (+97% RSS in a 10-minute soak, for the raw SDK too).
    """
    try:
        processor = client._event_processors[(consumer_group, partition_id)]
        link = processor._consumers[partition_id]._handler._link
        tags = link._received_delivery_tags
    except (AttributeError, KeyError, TypeError):
        return None
    return tags if isinstance(tags, set) else None


def forget_delivery_tags(client: Any, consumer_group: str, partition_id: str) -> None:
    """Empty the SDK's delivery-tag set (safe: no disposition is ever sent for these deliveries)."""
    tags = sdk_delivery_tags(client, consumer_group, partition_id)
    if tags:
        tags.clear()


class AzurePartitionReceiver(ReceiverBase):
    """A pull receiver of one partition over the SDK's ``receive_batch``; made by :meth:`EventHub.receiver`.

    Example:
        >>> async def drain(hub):  # doctest: +SKIP
        ...     async with hub.receiver("0") as receiver:
        ...         while batch := await receiver.receive_batch(500, max_wait=1.0):
        ...             print(batch[-1].sequence_number, receiver.last_enqueued_event_properties)
    """

    def __init__(
        self, hub: EventHub, context: PartitionContext, start: Position, owner_level: int | None, prefetch: int
    ) -> None:
        super().__init__(context, start, owner_level)
        self._hub = hub
        self._start = start
        self._prefetch = prefetch
        self._high_water = _high_water(start)
        self._chunks: deque[tuple[list[Event], LastEnqueuedEventProperties | None]] = deque()
        self._buffered = 0  # events in _chunks; the SDK callback waits while it is >= prefetch
        self._error: RxHubsError | None = None
        self._data = asyncio.Event()  # set when a chunk, an error or close arrives
        self._space = asyncio.Event()  # set when the buffer has room (or we are stopping)
        self._space.set()
        self._link_closed = asyncio.Event()
        self._close_task: asyncio.Task[Any] | None = None
        self._pull_lock = asyncio.Lock()
        self._client: EventHubConsumerClient | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self._dropped = 0

    # -- pulling ---------------------------------------------------------------------------------------------

    async def _receive(self, max_count: int, max_wait: float | None) -> list[Event]:
        async with self._pull_lock:
            if self._task is None and self._error is None:
                await self._open()
            events = self._take(max_count)
            if events:
                return events
            if self._error is not None:
                raise self._error
            if max_wait == 0:
                return []
            try:
                async with asyncio.timeout(max_wait):
                    while True:
                        self._data.clear()
                        await self._data.wait()
                        self._check_open()
                        events = self._take(max_count)
                        if events:
                            return events
                        if self._error is not None:
                            raise self._error
            except TimeoutError:
                return []

    def _take(self, max_count: int) -> list[Event]:
        chunks = self._chunks
        if not chunks:
            return []
        out: list[Event] = []
        while chunks and len(out) < max_count:
            events, last_enqueued = chunks[0]
            need = max_count - len(out)
            if len(events) <= need:
                chunks.popleft()
                if out:
                    out.extend(events)
                else:
                    out = events
            else:
                out.extend(events[:need])
                chunks[0] = (events[need:], last_enqueued)
            if last_enqueued is not None:
                self._last_enqueued = last_enqueued
        self._buffered -= len(out)
        self._space.set()
        return out

    async def _open(self) -> None:
        """Start the SDK task; only :meth:`Position.latest` makes the first pull wait for the service.

        "Latest" must mean "after the events present when the receiver opened", but the SDK attaches its link
        (and so evaluates ``@latest``) about a second later, after a first pull may have returned and more
        events arrived. So the first pull fixes it as the partition's last enqueued sequence number.
        """
        if self._start.kind == "latest":
            try:
                props = await self._hub.get_partition_properties(self._context.partition_id)
            except RxHubsError as exc:
                self._error = exc  # sticky, like every receive error: open a new receiver
                raise
            self._start = Position.from_sequence_number(props.last_enqueued_sequence_number)
            self._position = self._start
            self._high_water = _high_water(self._start)
        c = self._context
        self._task = asyncio.create_task(self._run(), name=f"rxhubs-receive-{c.eventhub_name}-{c.partition_id}")

    async def _run(self) -> None:
        try:
            # Unknown partitions fail here (the hub caches the ids); unknown consumer groups when the link
            # attaches. Both wake the waiting pull through _fail.
            await self._hub._check_partition(self._context.partition_id)
            client = self._client = self._hub._new_consumer_client(self._context.consumer_group)
            position, inclusive = _sdk_position(self._start)
            await client.receive_batch(
                self._on_batch,
                partition_id=self._context.partition_id,
                starting_position=position,
                starting_position_inclusive=inclusive,
                max_batch_size=self._prefetch,
                max_wait_time=None,
                prefetch=self._prefetch,
                owner_level=self._owner_level,
                track_last_enqueued_event_properties=self._hub._track_last_enqueued,
                on_error=self._on_error,
                on_partition_close=self._on_partition_close,
            )
        except asyncio.CancelledError:
            raise
        except RxHubsError as exc:
            self._fail(exc, None)
        except Exception as exc:
            self._fail(translate_error(exc, self._what(), self._hub._secrets), exc)
        else:
            if not self._stopping:
                self._fail(TransportError(f"{self._what()}: the SDK receive loop ended"), None)

    def _what(self) -> str:
        c = self._context
        return f"receive from {c.eventhub_name}/{c.consumer_group}/{c.partition_id}"

    # -- SDK callbacks ---------------------------------------------------------------------------------------

    async def _on_batch(self, partition_context: Any, batch: list[EventData]) -> None:
        if not batch:
            return
        forget_delivery_tags(self._client, self._context.consumer_group, self._context.partition_id)
        while self._buffered >= self._prefetch and not self._stopping:
            self._space.clear()
            await self._space.wait()
        if self._stopping or self._error is not None:
            return
        high = self._high_water
        events: list[Event] = []
        append = events.append
        for data in batch:
            event = event_from_sdk(data)
            if event.sequence_number > high:
                append(event)
                high = event.sequence_number
            else:
                self._dropped += 1
        if self._dropped and len(events) < len(batch):
            _log.debug("%s: dropped %d replayed event(s)", self._what(), len(batch) - len(events))
        if not events:
            return
        self._high_water = high
        self._chunks.append((events, _last_enqueued(partition_context.last_enqueued_event_properties)))
        self._buffered += len(events)
        self._data.set()

    async def _on_error(self, partition_context: Any, error: Exception) -> None:
        if self._stopping:
            return
        self._fail(translate_error(error, self._what(), self._hub._secrets), error)

    async def _on_partition_close(self, partition_context: Any, reason: Any) -> None:
        # Runs in the SDK task that closes the partition's consumer; once it finishes, the SDK's bookkeeping
        # of the partition is gone too (see _stop_sdk).
        self._close_task = asyncio.current_task()
        self._link_closed.set()

    def _fail(self, error: RxHubsError, cause: BaseException | None) -> None:
        """Record the first error, stop the SDK from re-attaching on its own, and wake a waiting pull."""
        if self._error is not None or self._stopping:
            return
        if cause is not None and error.__cause__ is None and error is not cause:
            error.__cause__ = cause
        self._error = error
        if isinstance(error, OwnershipLostError):
            self._chunks.clear()  # the new owner reads these; handing them out would process them twice
            self._buffered = 0
        _log.info("%s", error)
        task = self._task
        if task is not None and not task.done() and task is not asyncio.current_task():
            task.cancel()  # the SDK would otherwise re-attach later from the original start position
        self._data.set()

    # -- properties and closing ------------------------------------------------------------------------------

    async def get_partition_properties(self) -> PartitionProperties:
        """The partition's current properties (from the hub's management link).

        Example:
            >>> async def lag(receiver):  # doctest: +SKIP
            ...     p = await receiver.get_partition_properties()
            ...     return p.last_enqueued_sequence_number - receiver.position.value
        """
        self._check_open()
        return await self._hub.get_partition_properties(self._context.partition_id)

    async def _close(self) -> None:
        self._stopping = True
        self._space.set()
        self._data.set()
        self._chunks.clear()
        self._buffered = 0
        try:
            await self._stop_sdk()
        finally:
            client, self._client = self._client, None
            self._hub._forget(self)
            if client is not None:
                try:
                    await asyncio.wait_for(client.close(), _CLOSE_STEP_TIMEOUT)
                except Exception as exc:
                    _log.debug("%s: closing the client failed: %s", self._what(), _first_line(exc, self._hub._secrets))

    async def _stop_sdk(self) -> None:
        """Cancel the SDK task and wait until its consumer (the AMQP link) is closed.

        Cancelling makes the SDK cancel its partition task, close the partition's consumer (then
        ``on_partition_close`` runs) and poll once a second until that partition is gone. Once the consumer is
        closed, a second cancel ends that poll at once; the client's ``close()`` then has nothing left to wait
        for. Each step is bounded, so a misbehaving SDK cannot hang ``close()``.
        """
        task = self._task
        if task is None or task.done():
            return
        task.cancel()
        closed = asyncio.ensure_future(self._link_closed.wait())
        try:
            await asyncio.wait({task, closed}, timeout=_CLOSE_STEP_TIMEOUT, return_when=asyncio.FIRST_COMPLETED)
        finally:
            closed.cancel()
        close_task = self._close_task
        if close_task is not None and close_task is not asyncio.current_task() and not close_task.done():
            await asyncio.wait({close_task}, timeout=_CLOSE_STEP_TIMEOUT)
        if not task.done():
            task.cancel()
            await asyncio.wait({task}, timeout=_CLOSE_STEP_TIMEOUT)
        if task.done() and not task.cancelled() and task.exception() is not None:
            _log.debug("%s: SDK task ended with %r", self._what(), task.exception())

    async def __aenter__(self) -> AzurePartitionReceiver:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()
