"""The public :class:`Emulator`: a local Event Hubs namespace for the unmodified azure-eventhub client."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import TracebackType

from rxhubs.emulator._server import Server
from rxhubs.errors import ConfigurationError, EmulatorError

_LOG = logging.getLogger("rxhubs.emulator")

DEFAULT_KEY_NAME = "RootManageSharedAccessKey"
DEFAULT_KEY = "SAS_KEY_VALUE"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,255}$")
_GROUP = re.compile(r"^(\$Default|[A-Za-z0-9][A-Za-z0-9._-]{0,49})$")
MAX_PARTITIONS = 1024


class Emulator:
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
        shared_access_key_name: Key name put in connection strings.
        shared_access_key: Key put in connection strings.
        verify_tokens: Check SAS tokens and SASL PLAIN credentials against the key (default: accept any).
        idle_timeout: Seconds of silence after which a connection is closed (advertised to clients, which
            send heartbeats); None disables it.

    Raises:
        ConfigurationError: A hub or consumer group name is invalid or a partition count is out of range.

    Example:
        >>> import asyncio
        >>> from rxhubs.emulator import Emulator
        >>> async def main() -> str:
        ...     async with Emulator(hubs={"telemetry": 2}) as emulator:
        ...         return emulator.connection_string("telemetry").split(";")[-2]
        >>> asyncio.run(main())
        'EntityPath=telemetry'
    """

    def __init__(self, hubs: Mapping[str, int], host: str = "127.0.0.1", port: int = 0,
                 data_dir: str | Path | None = None, consumer_groups: Iterable[str] = (), *,
                 shared_access_key_name: str = DEFAULT_KEY_NAME, shared_access_key: str = DEFAULT_KEY,
                 verify_tokens: bool = False, idle_timeout: float | None = 120.0) -> None:
        if not hubs:
            raise ConfigurationError("the emulator needs at least one event hub, e.g. hubs={'telemetry': 4}")
        for name, count in hubs.items():
            if not isinstance(name, str) or not _NAME.match(name):
                raise ConfigurationError(f"invalid event hub name {name!r}: use letters, digits, '.', '_' or '-'")
            if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_PARTITIONS:
                raise ConfigurationError(
                    f"event hub {name!r} needs a partition count between 1 and {MAX_PARTITIONS}, got {count!r}")
        groups = tuple(consumer_groups)
        for group in groups:
            if not isinstance(group, str) or not _GROUP.match(group):
                raise ConfigurationError(f"invalid consumer group name {group!r}")
        if not 0 <= port <= 65535:
            raise ConfigurationError(f"port must be between 0 and 65535, got {port}")
        if idle_timeout is not None and idle_timeout <= 0:
            raise ConfigurationError(f"idle_timeout must be positive or None, got {idle_timeout}")
        self.hubs: dict[str, int] = dict(hubs)
        self.host = host
        self._requested_port = port
        self.data_dir = Path(data_dir) if data_dir is not None else None
        self.consumer_groups: tuple[str, ...] = tuple(dict.fromkeys(("$Default", *groups)))
        self.shared_access_key_name = shared_access_key_name
        self._key = shared_access_key
        self._verify = verify_tokens
        self._idle_timeout = idle_timeout
        self._server: Server | None = None
        self._port: int | None = None

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
    def running(self) -> bool:
        """Whether the emulator is listening."""
        return self._server is not None

    def connection_string(self, hub: str) -> str:
        """A connection string for ``hub`` that the azure-eventhub client accepts.

        Args:
            hub: One of the emulator's event hubs.

        Returns:
            ``Endpoint=sb://HOST:PORT;SharedAccessKeyName=...;SharedAccessKey=...;EntityPath=HUB;
            UseDevelopmentEmulator=true``.

        Raises:
            ConfigurationError: ``hub`` is not one of the emulator's hubs.
            EmulatorError: The emulator is not running.

        Example:
            >>> Emulator(hubs={"telemetry": 1}).hubs
            {'telemetry': 1}
        """
        if hub not in self.hubs:
            raise ConfigurationError(f"unknown event hub {hub!r}; the emulator serves {sorted(self.hubs)}")
        host = self.host if self.host not in ("0.0.0.0", "::", "") else "127.0.0.1"
        if ":" in host:
            host = f"[{host}]"
        return (f"Endpoint=sb://{host}:{self.port};SharedAccessKeyName={self.shared_access_key_name};"
                f"SharedAccessKey={self._key};EntityPath={hub};UseDevelopmentEmulator=true")

    async def start(self) -> None:
        """Start listening (what ``__aenter__`` does).

        Raises:
            EmulatorError: The port cannot be bound or a data directory cannot be used.
        """
        if self._server is not None:
            raise EmulatorError("the emulator is already running")
        try:
            server = Server(self.hubs, consumer_groups=self.consumer_groups[1:], data_dir=self.data_dir,
                            key_name=self.shared_access_key_name, key=self._key, verify_key=self._verify,
                            idle_timeout=self._idle_timeout)
        except OSError as exc:
            raise EmulatorError(f"cannot open the data directory {self.data_dir}: {exc.strerror or exc}") from exc
        try:
            self._port = await server.start(self.host, self._requested_port)
        except OSError as exc:
            await server.stop()
            raise EmulatorError(f"cannot listen on {self.host}:{self._requested_port}: {exc.strerror or exc}",
                                ) from exc
        self._server = server
        _LOG.info("emulator listening on %s:%d (hubs %s)", self.host, self._port, self.hubs)

    async def stop(self) -> None:
        """Detach every link, close every connection and stop listening (what ``__aexit__`` does)."""
        server, self._server = self._server, None
        if server is not None:
            await server.stop()
            _LOG.info("emulator on port %s stopped", self._port)
        self._port = None

    async def __aenter__(self) -> Emulator:
        await self.start()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.stop()
