"""What clients need of the emulator's TLS and Schema Registry: ports, the CA file, connection strings, options."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from rxhubs.errors import EmulatorError

if TYPE_CHECKING:
    from rxhubs.emulator._registry import SchemaRegistry
    from rxhubs.emulator._tls import TlsListener

__all__ = ["TlsAccess"]


class TlsAccess:
    """The TLS side of :class:`~rxhubs.emulator.Emulator` (a mixin: it reads the emulator's listeners)."""

    _tls: TlsListener | None
    _registry: SchemaRegistry | None

    def connection_string(self, hub: str, key_name: str | None = None) -> str:  # pragma: no cover - the Emulator's
        raise NotImplementedError

    @property
    def tls_port(self) -> int | None:
        """The port serving AMQP over TLS (None without ``tls=True``, or while stopped)."""
        return None if self._tls is None else self._tls.port

    @property
    def tls_websocket_port(self) -> int | None:
        """The port serving AMQP over secure WebSockets (None without ``tls_websocket_port``, or while stopped)."""
        return None if self._tls is None else self._tls.websocket_port

    @property
    def schema_registry_namespace(self) -> str | None:
        """``127.0.0.1:PORT``: the Schema Registry client's ``fully_qualified_namespace`` (None: no registry)."""
        port = None if self._registry is None else self._registry.port
        return None if port is None else f"127.0.0.1:{port}"

    @property
    def ca_file(self) -> Path | None:
        """The certificate authority's certificate (PEM) to trust, with ``tls=True`` once started."""
        return None if self._tls is None else self._tls.ca_file

    def tls_connection_string(self, hub: str) -> str:
        """A connection string for ``hub`` over TLS: the service's form (no ``UseDevelopmentEmulator``).

        Pass :meth:`tls_client_options` to the client with it.

        Raises:
            EmulatorError: The emulator is not running, or not with ``tls=True``.
        """
        plain = self.connection_string(hub)
        if self._tls is None or self._tls.port is None:
            raise EmulatorError("the emulator serves no TLS: start it with tls=True")
        fields = [f for f in plain.split(";") if f and not f.startswith(("Endpoint=", "UseDevelopmentEmulator="))]
        return ";".join(["Endpoint=sb://127.0.0.1/", *fields])

    def tls_client_options(self) -> dict[str, str]:
        """``connection_verify`` (the CA file) and, unless the TLS port is 5671, ``custom_endpoint_address``.

        Raises:
            EmulatorError: The emulator is not running, or not with ``tls=True``.
        """
        if self._tls is None or self._tls.port is None:
            raise EmulatorError("the emulator serves no TLS: start it with tls=True")
        return self._tls.options(self._tls.port)

