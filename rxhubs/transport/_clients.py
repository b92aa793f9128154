"""The SDK clients an :class:`~rxhubs.EventHub` opens: their settings, built once, and one TLS context."""

from __future__ import annotations

import functools
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from azure.eventhub.aio import EventHubConsumerClient, EventHubProducerClient

from rxhubs.transport._connection_string import ConnectionString
from rxhubs.transport._errors import translate_error

__all__ = ["SdkClients", "shared_tls_context"]

# The SDK re-attaches a failed partition every load-balancing interval, from the original position. A receiver
# never wants that: it cancels the SDK task on the first error anyway, and this makes sure it never happens.
_NEVER_REBALANCE = 10 * 24 * 3600.0


@functools.cache
def shared_tls_context() -> ssl.SSLContext:
    """The TLS context every SDK client of this process connects with, built once.

    Without one, azure-eventhub (pyamqp) builds a context and loads its CA bundle for every connection, even
    one without TLS (an emulator's): about 20 ms of CPU each, so a consumer taking over 8 partitions spent
    180 ms of its handover there. This is the context the SDK would build (``PROTOCOL_TLS_CLIENT``, hostname
    checked, certificates required, certifi's CA bundle), shared. Used only when neither ``ssl_context`` nor
    ``connection_verify`` is given.

    Example:
        >>> shared_tls_context() is shared_tls_context()
        True
    """
    import certifi

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(certifi.where())
    return context


@dataclass(frozen=True, repr=False)
class SdkClients:
    """How to open azure-eventhub's aio clients for one hub: a connection string or a credential, and options.

    The repr names neither the connection string nor the credential (``secrets`` are what errors must hide).

    Example:
        >>> clients = SdkClients("127.0.0.1:5672", "telemetry", None, object(), emulator=True)
        >>> clients.kwargs({"retry_total": 0})["use_tls"], clients
        (False, SdkClients('127.0.0.1:5672', 'telemetry'))
    """

    namespace: str
    eventhub_name: str
    conn: ConnectionString | None
    credential: Any
    emulator: bool = False
    options: Mapping[str, Any] = field(default_factory=dict)
    secrets: tuple[str, ...] = ()
    #: The idle timeout a consumer's connection advertises (half of rxhubs' ``idle_timeout``), None: none.
    advertised_idle_timeout: float | None = None

    def __repr__(self) -> str:
        return f"SdkClients({self.namespace!r}, {self.eventhub_name!r})"

    def kwargs(self, overrides: Mapping[str, Any]) -> dict[str, Any]:
        """The keyword arguments of an SDK client: the options, ``overrides``, the shared TLS context."""
        kwargs = {**self.options, **overrides}
        if "ssl_context" not in kwargs and "connection_verify" not in kwargs:
            kwargs["ssl_context"] = shared_tls_context()
        if self.conn is None and self.emulator:
            kwargs["use_tls"] = False  # what the SDK itself does for UseDevelopmentEmulator=true
        return kwargs

    def consumer(self, consumer_group: str) -> EventHubConsumerClient:
        """A new consumer client (one AMQP connection) that never re-attaches by itself.

        Its connection asks the service for heartbeats (the advertised idle timeout): rxhubs' watchdog needs
        them to tell a quiet partition from a dead path. A producer does not: it is not read between calls.
        """
        overrides: dict[str, Any] = {"load_balancing_interval": _NEVER_REBALANCE}
        if self.advertised_idle_timeout is not None:
            overrides["idle_timeout"] = self.advertised_idle_timeout
        kwargs = self.kwargs(overrides)
        try:
            if self.conn is not None:
                return EventHubConsumerClient.from_connection_string(
                    self.conn.to_connection_string(), consumer_group, eventhub_name=self.eventhub_name, **kwargs
                )
            return EventHubConsumerClient(self.namespace, self.eventhub_name, consumer_group, self.credential, **kwargs)
        except Exception as exc:
            raise translate_error(exc, "could not create the Event Hubs consumer client", self.secrets) from exc

    def producer(self) -> EventHubProducerClient:
        """A new producer client making one attempt per call (the caller retries what is worth retrying)."""
        kwargs = self.kwargs({"retry_total": 0, "retry_backoff_factor": 0.0})
        try:
            if self.conn is not None:
                return EventHubProducerClient.from_connection_string(
                    self.conn.to_connection_string(), eventhub_name=self.eventhub_name, **kwargs
                )
            return EventHubProducerClient(self.namespace, self.eventhub_name, self.credential, **kwargs)
        except Exception as exc:
            raise translate_error(exc, "could not create the Event Hubs producer client", self.secrets) from exc
