"""The options an :class:`~rxhubs.EventHub` takes, validated once: what goes to the SDK, what rxhubs uses itself."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rxhubs.errors import ConfigurationError
from rxhubs.transport._liveness import Liveness

__all__ = ["CLIENT_OPTIONS", "LIVENESS_OPTIONS", "ClientOptions", "check_credential"]

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
        "logging_enable",
    }
)

#: rxhubs' own options about dead paths (:class:`~rxhubs.transport._liveness.Liveness`); ``idle_timeout`` is
#: also the SDK's name, but rxhubs enforces it itself and advertises half of it to the service.
LIVENESS_OPTIONS = frozenset({"idle_timeout", "open_timeout", "management_timeout"})


def _non_negative(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ConfigurationError(f"{name} must be a number >= 0, got {value!r}")
    return float(value)


@dataclass(frozen=True, slots=True)
class ClientOptions:
    """An :class:`~rxhubs.EventHub`'s keyword options, checked.

    Attributes:
        sdk: The options handed to the SDK clients as given.
        liveness: The idle, open and management timeouts (see ``docs/operations.md``, "Liveness").
        track_last_enqueued_event_properties: Receivers report the partition's newest event (for lag).
        retry_total: Attempts of a management call or send after the first (the SDK's meaning).
        retry_backoff_factor: Seconds of the first backoff.
        retry_backoff_max: Longest backoff, seconds.
        fixed_backoff: ``retry_mode="fixed"``: every wait is ``retry_backoff_factor``.

    Example:
        >>> ClientOptions.parse({"retry_total": 5}).retry_total
        5
        >>> ClientOptions.parse({"retry": 5})  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        rxhubs.errors.ConfigurationError: unknown EventHub option(s) 'retry'; known: ...
    """

    sdk: Mapping[str, Any] = field(default_factory=dict)
    track_last_enqueued_event_properties: bool = True
    retry_total: int = 3
    retry_backoff_factor: float = 0.8
    retry_backoff_max: float = 120.0
    fixed_backoff: bool = False
    liveness: Liveness = field(default_factory=Liveness)

    @classmethod
    def parse(cls, options: Mapping[str, Any]) -> ClientOptions:
        """Check ``options`` (as given to ``EventHub``), raising :class:`~rxhubs.errors.ConfigurationError`."""
        options = dict(options)
        track = options.pop("track_last_enqueued_event_properties", True)
        if not isinstance(track, bool):
            raise ConfigurationError(f"track_last_enqueued_event_properties must be a bool, got {track!r}")
        liveness = Liveness.parse(options)
        for name in LIVENESS_OPTIONS:
            options.pop(name, None)
        unknown = sorted(set(options) - CLIENT_OPTIONS)
        if unknown:
            raise ConfigurationError(
                f"unknown EventHub option(s) {', '.join(map(repr, unknown))}; "
                f"known: {', '.join(sorted(CLIENT_OPTIONS | LIVENESS_OPTIONS))}"
            )
        retry_total = options.get("retry_total", 3)
        if isinstance(retry_total, bool) or not isinstance(retry_total, int) or retry_total < 0:
            raise ConfigurationError(f"retry_total must be an int >= 0, got {retry_total!r}")
        factor = _non_negative("retry_backoff_factor", options.get("retry_backoff_factor", 0.8))
        maximum = _non_negative("retry_backoff_max", options.get("retry_backoff_max", 120))
        mode = str(getattr(options.get("retry_mode", "exponential"), "value", options.get("retry_mode"))).lower()
        if "retry_mode" in options and mode not in ("exponential", "fixed"):
            raise ConfigurationError("retry_mode must be 'exponential' or 'fixed'")
        return cls(options, track, retry_total, factor, maximum, mode == "fixed", liveness)


def check_credential(credential: object) -> None:
    """Refuse what cannot authenticate an aio client, at construction rather than at the first call.

    A synchronous azure-identity credential (``azure.identity.DefaultAzureCredential``) has a blocking
    ``get_token``; the aio SDK would await its result and fail on every call, forever.

    Raises:
        ConfigurationError: No credential, a string, or a synchronous token credential.

    Example:
        >>> class SyncCredential:
        ...     def get_token(self, *scopes, **kwargs): ...
        >>> check_credential(SyncCredential())  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        rxhubs.errors.ConfigurationError: SyncCredential is a synchronous credential: use its asynchronous twin...
    """
    if credential is None or isinstance(credential, str | bytes):
        raise ConfigurationError(
            "credential must be an azure-identity credential, AzureSasCredential or AzureNamedKeyCredential "
            "(for a connection string use EventHub.from_connection_string)"
        )
    get_token = getattr(credential, "get_token", None)
    if get_token is not None and not inspect.iscoroutinefunction(get_token):
        raise ConfigurationError(
            f"{type(credential).__name__} is a synchronous credential: use its asynchronous twin from "
            "azure.identity.aio (e.g. azure.identity.aio.DefaultAzureCredential)"
        )
