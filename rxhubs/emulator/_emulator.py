"""The public :class:`Emulator`: a local Event Hubs namespace for the unmodified azure-eventhub client."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import TracebackType

from rxhubs.emulator._arguments import (
    DEFAULT_KEY,
    DEFAULT_KEY_NAME,
    check_groups,
    check_hubs,
    check_key,
    check_message_size,
    check_ports,
)
from rxhubs.emulator._control import ControlServer
from rxhubs.emulator._fault_state import FaultState, LinkLog, LinkRecord
from rxhubs.emulator._faults import EmulatorFaults, _Host
from rxhubs.emulator._history import History
from rxhubs.emulator._identity import LocalIdentity
from rxhubs.emulator._registry import SchemaRegistry
from rxhubs.emulator._server import Server
from rxhubs.emulator._tls import TlsListener
from rxhubs.emulator._tls_access import TlsAccess
from rxhubs.errors import ConfigurationError, EmulatorError

_LOG = logging.getLogger("rxhubs.emulator")

class Emulator(TlsAccess):
    """A local Event Hubs emulator: an AMQP 1.0 server the official azure-eventhub client talks to.

    Use it as an async context manager; it listens from ``__aenter__`` to ``__aexit__``. Each hub has its
    partitions and the consumer group ``$Default`` plus ``consumer_groups``. With ``data_dir`` every
    partition is a durable append-only log file, so a restarted emulator still has every event; without it,
    events live in memory.

    Args:
        hubs: Event hub names and their partition counts, e.g. ``{"telemetry": 4}``.
        host: Interface to bind; loopback by default.
        port: TCP port; 0 picks a free one (read it from :attr:`port`).
        data_dir: Directory for durable partition logs, or None to keep events in memory.
        consumer_groups: Consumer groups besides ``$Default`` (the same for every hub).
        shared_access_key_name: Key name put in connection strings (when ``keys`` is not given).
        shared_access_key: Key put in connection strings (when ``keys`` is not given).
        verify_tokens: Require tokens signed with ``shared_access_key``: the same as
            ``keys={shared_access_key_name: shared_access_key}``.
        keys: SAS key names and keys (shared access policies) to require, e.g. ``{"sender": "s3cret"}``.
            Each connection must then present a valid shared access signature made with one of them
            (CBS put-token, or SASL PLAIN with a key name and key) before it may attach links or read
            properties; refusals carry the service's status codes and error conditions. Connection strings
            use the first key. Without ``keys`` (and ``verify_tokens``), any token is accepted.
        idle_timeout: Seconds of silence after which a connection is closed (advertised to clients, which
            send heartbeats); None disables it.
        websocket_port: Also serve AMQP over WebSockets (``TransportType.AmqpOverWebsocket``) on this port of
            ``host``; 0 picks a free one (read :attr:`websocket_port`). None (the default): no WebSockets.
            Clients reach it with ``custom_endpoint_address=emulator.websocket_endpoint``.
        refuse_consumers_at_attach: Refuse consumer links (unknown consumer group, a sixth reader, a lower
            owner level) the way the service does: an attach with neither source nor target, then the detach.
            Producer links are always refused so. The SDK's consumer does not report such a refusal: it
            re-attaches quietly and never calls ``on_error``. By default consumer links are attached and then
            detached with the error instead, which the SDK reports.
        control_port: Also serve the fault control API (JSON over HTTP, what ``rxhubs emulator fault`` calls)
            on this port of 127.0.0.1, whatever ``host`` is; 0 picks a free one (read :attr:`control_address`).
            None (the default): no control API. :attr:`faults` works from Python either way.
        max_message_size: The largest message (an event, or a batch of events) a producer may send, in bytes:
            1 MiB, as on the Standard tier, by default; up to 20 MiB as on Dedicated (at most 256 MiB).
            Advertised on producer links; larger sends are rejected with ``amqp:link:message-size-exceeded``.
        identities: Local Entra ID identities (:class:`~rxhubs.emulator.LocalIdentity`) whose bearer tokens to
            accept, as the service accepts Entra ID tokens: clients authenticate with
            ``identity.credential()`` and ``EventHub(namespace, hub, credential, use_development_emulator=True)``.
            With identities, authentication is required: SAS tokens pass only for ``keys`` given too.
        retention: Seconds each event is kept (one value, or per hub: ``{"telemetry": 3600}``); older events
            expire and the partition's ``beginning_sequence_number`` moves. A reader asking for an expired
            position gets the first retained event, as from the service. None (the default): kept forever.
        retain_events: At most this many newest events per partition (one value or per hub): a test's stand-in
            for days of retention.
        capture: Event Hubs Capture: a folder, or ``blob://CONTAINER[/PREFIX]`` (with
            ``capture_connection_string`` or ``AZURE_STORAGE_CONNECTION_STRING``), where every partition's
            events are written as Avro files named and shaped as the service's (see ``docs/history.md``).
        capture_window: Seconds a Capture window stays open (a file per window, empty ones included).
        capture_size: Bytes of events after which a Capture window closes early.
        capture_namespace: The ``{Namespace}`` of Capture file names.
        capture_connection_string: The storage account of a ``blob://`` Capture (never logged).
        tls: Also serve AMQP over TLS (AMQPS) on ``tls_port``, with a certificate for 127.0.0.1 signed by a
            certificate authority made at start; its certificate is written to ``tls_ca_file`` (read
            :attr:`ca_file`). Clients use :meth:`tls_connection_string` with :meth:`tls_client_options`
            (``connection_verify`` and, off port 5671, ``custom_endpoint_address``).
        tls_port: The TLS port (5671 is the service's; 0 picks a free one, read :attr:`tls_port`).
        tls_ca_file: Where to write the authority's certificate (default: the emulator's temporary folder).
        tls_websocket_port: Also serve AMQP over secure WebSockets (``wss://``, the service's port 443) there.
        schema_registry: Also serve the Azure Schema Registry REST API over HTTPS (needs ``tls=True``) on
            ``schema_registry_port``, for the official ``azure-schemaregistry`` client: its
            ``fully_qualified_namespace`` is :attr:`schema_registry_namespace`, with ``connection_verify`` the CA
            file and any bearer-token credential.
        schema_registry_port: Its port (0 picks a free one).

    Raises:
        ConfigurationError: A hub or consumer group name is invalid, a partition count is out of range, or a
            key name or key cannot go into a connection string (the message never shows the key).

    Example:
        >>> import asyncio
        >>> from rxhubs.emulator import Emulator
        >>> async def main() -> str:
        ...     async with Emulator(hubs={"telemetry": 2}) as emulator:
        ...         return emulator.connection_string("telemetry").split(";")[-2]
        >>> asyncio.run(main())
        'EntityPath=telemetry'

        Requiring SAS keys and serving AMQP over WebSockets too (pass ``websocket_endpoint`` to the SDK as
        ``custom_endpoint_address`` with ``transport_type=TransportType.AmqpOverWebsocket``):

        >>> async def secured() -> tuple[tuple[str, ...], bool]:
        ...     async with Emulator(hubs={"telemetry": 2}, keys={"sender": "s3cret"}, websocket_port=0) as emulator:
        ...         endpoint = emulator.websocket_endpoint or ""
        ...         return emulator.key_names, endpoint.startswith("sb://127.0.0.1:")
        >>> asyncio.run(secured())
        (('sender',), True)
    """

    def __init__(self, hubs: Mapping[str, int], host: str = "127.0.0.1", port: int = 0,
                 data_dir: str | Path | None = None, consumer_groups: Iterable[str] = (), *,
                 shared_access_key_name: str = DEFAULT_KEY_NAME, shared_access_key: str = DEFAULT_KEY,
                 verify_tokens: bool = False, keys: Mapping[str, str] | None = None,
                 idle_timeout: float | None = 120.0, websocket_port: int | None = None,
                 refuse_consumers_at_attach: bool = False, control_port: int | None = None,
                 identities: Iterable[LocalIdentity] = (), retention: float | Mapping[str, float] | None = None,
                 retain_events: int | Mapping[str, int] | None = None, capture: str | Path | None = None,
                 capture_window: float = 300.0, capture_size: int = 300 * 1024 * 1024,
                 capture_namespace: str = "emulator", capture_connection_string: str | None = None,
                 tls: bool = False, tls_port: int = 0, tls_ca_file: str | Path | None = None,
                 tls_websocket_port: int | None = None,
                 schema_registry: bool = False, schema_registry_port: int = 0,
                 max_message_size: int = 1024 * 1024) -> None:
        check_hubs(hubs)
        groups = check_groups(consumer_groups)
        check_ports(port=port, websocket_port=websocket_port, control_port=control_port, tls_port=tls_port)
        self.max_message_size = check_message_size(max_message_size)
        self._tls = TlsListener(tls_ca_file, tls_websocket_port) if tls else None
        if schema_registry and not tls:
            raise ConfigurationError("schema_registry needs tls=True: the registry's clients send bearer tokens over "
                                     "HTTPS only")
        self._registry = SchemaRegistry() if schema_registry else None
        self._requested_registry_port = schema_registry_port
        self._requested_tls_port = tls_port
        if idle_timeout is not None and idle_timeout <= 0:
            raise ConfigurationError(f"idle_timeout must be positive or None, got {idle_timeout}")
        self.hubs: dict[str, int] = dict(hubs)
        self.history = History(hubs, retention, retain_events, capture, capture_window, capture_size,
                               capture_namespace, capture_connection_string)
        self.host = host
        self._requested_port = port
        self.data_dir = Path(data_dir) if data_dir is not None else None
        unique: dict[str, str] = {}
        for group in ("$Default", *groups):  # the service ignores case: '$default' is '$Default'
            unique.setdefault(group.casefold(), group)
        self.consumer_groups: tuple[str, ...] = tuple(unique.values())
        if keys is not None:
            if not keys:
                raise ConfigurationError("keys needs at least one key name and key, e.g. keys={'sender': '...'}")
            shared_access_key_name, shared_access_key = next(iter(keys.items()))
            required: dict[str, str] | None = dict(keys)
        else:
            required = {shared_access_key_name: shared_access_key} if verify_tokens else None
        for name, key in (required or {shared_access_key_name: shared_access_key}).items():
            check_key(name, key)
        self.shared_access_key_name = shared_access_key_name
        self._key = shared_access_key
        self._keys = required
        self._idle_timeout = idle_timeout
        self.identities: tuple[LocalIdentity, ...] = tuple(identities)
        if not all(isinstance(i, LocalIdentity) for i in self.identities):
            raise ConfigurationError("identities must be rxhubs.emulator.LocalIdentity objects")
        self._refuse_consumers_at_attach = refuse_consumers_at_attach
        self._requested_websocket_port = websocket_port
        self._server: Server | None = None
        self._port: int | None = None
        self._websocket_port: int | None = None
        self._requested_control_port = control_port
        self._control: ControlServer | None = None
        self._control_port: int | None = None
        self._host = _Host(self.hubs)
        self._fault_state = FaultState()
        self._link_log = LinkLog()
        #: Fault control: server busy, forced close, stolen links, new partitions (see :class:`EmulatorFaults`).
        self.faults = EmulatorFaults(self._host, self._fault_state, self._link_log)

    def __repr__(self) -> str:
        state = f"port={self._port}" if self._port is not None else "stopped"
        return f"Emulator(hubs={self.hubs!r}, host={self.host!r}, {state}, data_dir={self.data_dir!r})"

    @property
    def port(self) -> int:
        """The TCP port the emulator listens on (only while it runs).

        Raises:
            EmulatorError: The emulator is not running.
        """
        if self._port is None:
            raise EmulatorError("the emulator is not running: use 'async with Emulator(...)' first")
        return self._port

    @property
    def websocket_port(self) -> int | None:
        """The port serving AMQP over WebSockets, or None when the emulator serves no WebSockets.

        Raises:
            EmulatorError: The emulator is not running.
        """
        if self._port is None:
            raise EmulatorError("the emulator is not running: use 'async with Emulator(...)' first")
        return self._websocket_port

    @property
    def websocket_endpoint(self) -> str | None:
        """What to pass as the SDK's ``custom_endpoint_address`` to use AMQP over WebSockets (None: none served).

        The SDK reaches ``ws://HOST:PORT/$servicebus/websocket`` with
        ``transport_type=TransportType.AmqpOverWebsocket, custom_endpoint_address=emulator.websocket_endpoint``
        (without a custom endpoint it would use port 443).

        Raises:
            EmulatorError: The emulator is not running.
        """
        port = self.websocket_port
        return None if port is None else f"sb://{self._client_host()}:{port}"

    def _client_host(self) -> str:
        host = self.host if self.host not in ("0.0.0.0", "::", "") else "127.0.0.1"
        return f"[{host}]" if ":" in host else host

    @property
    def control_address(self) -> str | None:
        """``127.0.0.1:PORT`` of the fault control API (``--control`` of ``rxhubs emulator fault``), or None.

        Raises:
            EmulatorError: The emulator is not running.
        """
        if self._port is None:
            raise EmulatorError("the emulator is not running: use 'async with Emulator(...)' first")
        return None if self._control_port is None else f"127.0.0.1:{self._control_port}"

    @property
    def link_log(self) -> list[LinkRecord]:
        """Every consumer link attach, detach and refusal so far (the last 100,000), oldest first.

        Each :class:`LinkRecord` has the time, connection id, hub, consumer group, partition, owner level,
        event (``attach``, ``detach``, ``refuse``) and error condition. It survives :meth:`stop` and
        :meth:`start` of this object. Safe to read from any thread.
        """
        return self._link_log.records()

    @property
    def key_names(self) -> tuple[str, ...]:
        """The names of the SAS keys the emulator requires (empty when it accepts any token)."""
        return tuple(self._keys or ())

    @property
    def running(self) -> bool:
        """Whether the emulator is listening."""
        return self._server is not None

    def connection_string(self, hub: str, key_name: str | None = None) -> str:
        """A connection string for ``hub`` that the azure-eventhub client accepts.

        Args:
            hub: One of the emulator's event hubs.
            key_name: Which of the ``keys`` to put in it (default: the first).

        Returns:
            ``Endpoint=sb://HOST:PORT;SharedAccessKeyName=...;SharedAccessKey=...;EntityPath=HUB;
            UseDevelopmentEmulator=true``.

        Raises:
            ConfigurationError: ``hub`` is not one of the emulator's hubs, or ``key_name`` not one of its keys.
            EmulatorError: The emulator is not running.

        Example:
            >>> Emulator(hubs={"telemetry": 1}).hubs
            {'telemetry': 1}
        """
        if hub not in self.hubs:
            raise ConfigurationError(f"unknown event hub {hub!r}; the emulator serves {sorted(self.hubs)}")
        host = self._client_host()
        name, key = self.shared_access_key_name, self._key
        if key_name is not None:
            if self._keys is None or key_name not in self._keys:
                raise ConfigurationError(f"unknown key name {key_name!r}; the emulator has {list(self.key_names)}")
            name, key = key_name, self._keys[key_name]
        return (f"Endpoint=sb://{host}:{self.port};SharedAccessKeyName={name};"
                f"SharedAccessKey={key};EntityPath={hub};UseDevelopmentEmulator=true")

    async def start(self) -> None:
        """Start listening (what ``__aenter__`` does).

        Raises:
            EmulatorError: The port cannot be bound or a data directory cannot be used.
        """
        if self._server is not None:
            raise EmulatorError("the emulator is already running")
        try:
            server = Server(self.hubs, consumer_groups=self.consumer_groups[1:], data_dir=self.data_dir,
                            keys=self._keys, refuse_consumers_at_attach=self._refuse_consumers_at_attach,
                            idle_timeout=self._idle_timeout, faults=self._fault_state, link_log=self._link_log,
                            identities=self.identities, retention=self.history.retention,
                            max_message_size=self.max_message_size)
        except OSError as exc:
            raise EmulatorError(f"cannot open the data directory {self.data_dir}: {exc.strerror or exc}") from exc
        try:
            self._port, self._websocket_port = await server.start(self.host, self._requested_port,
                                                                  self._requested_websocket_port)
        except OSError as exc:
            await server.stop()
            ports = f"{self._requested_port}" + (f" and {self._requested_websocket_port}"
                                                  if self._requested_websocket_port is not None else "")
            raise EmulatorError(f"cannot listen on {self.host}:{ports}: {exc.strerror or exc}") from exc
        for hub in server.hubs.values():  # a hub grown before (data_dir) keeps its partitions
            self.hubs[hub.name] = hub.partition_count
        try:
            await self.history.start(server.hubs)
        except Exception as exc:
            await server.stop()
            raise EmulatorError(f"cannot start Capture to {self.history.target!r}: {exc}") from exc
        if self._tls is not None:
            try:
                await self._tls.start(server, self.host, self._requested_tls_port)
                if self._registry is not None:
                    assert self._tls.context is not None
                    await self._registry.start(self.host, self._requested_registry_port, self._tls.context)
            except OSError as exc:
                await server.stop()
                await self.history.stop()
                raise EmulatorError(f"cannot listen for TLS on {self.host}:{self._requested_tls_port}: "
                                    f"{exc.strerror or exc}") from exc
        self._server = server
        self._host.server, self._host.loop = server, asyncio.get_running_loop()
        if self._requested_control_port is not None:
            control = ControlServer(self.faults)
            try:
                self._control_port = await control.start(self._requested_control_port)
            except OSError as exc:
                await self.stop()
                raise EmulatorError(f"cannot listen for fault control on 127.0.0.1:{self._requested_control_port}: "
                                    f"{exc.strerror or exc}") from exc
            self._control = control
        _LOG.info("emulator listening on %s:%d (hubs %s)", self.host, self._port, self.hubs)

    async def stop(self) -> None:
        """Detach every link, close every connection and stop listening (what ``__aexit__`` does)."""
        server, self._server = self._server, None
        control, self._control = self._control, None
        self._host.server = self._host.loop = None
        if control is not None:
            await control.stop()
        if self._registry is not None:
            await self._registry.stop()
        if self._tls is not None:
            await self._tls.stop()
        if server is not None:
            await server.stop()
            await self.history.stop()
            _LOG.info("emulator on port %s stopped", self._port)
        self._port = self._websocket_port = self._control_port = None

    async def __aenter__(self) -> Emulator:
        await self.start()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.stop()
