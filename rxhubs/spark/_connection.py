"""How the Spark source and sink reach a hub: a connection string, or a namespace and an Entra ID credential.

Options (case-insensitive), shared by ``spark.read``, ``spark.readStream``, ``df.write`` and ``df.writeStream``:

- ``connectionString`` (``eventhubs.connectionString``): a SAS connection string, with ``EntityPath`` or
  ``eventHubName``. Never shown in logs, errors or reprs.
- Or ``fullyQualifiedNamespace`` (``<ns>.servicebus.windows.net``) + ``eventHubName`` + a credential:
  ``credential`` = ``default`` (azure-identity's ``DefaultAzureCredential``), ``managedIdentity`` (with
  ``managedIdentityClientId`` for a user-assigned identity), ``servicePrincipal`` (``tenantId``, ``clientId``,
  and the secret read on each executor from the environment variable named by ``clientSecretEnv``, default
  ``AZURE_CLIENT_SECRET``, or from the file ``clientSecretFile``: never from an option, which Spark logs),
  or ``credentialFactory`` = ``module:function`` for anything else. The function is called on the driver and
  on every executor (credentials do not pickle) with the ``credentialFactory.*`` options, prefix removed,
  when it takes an argument, and returns an async token credential (``azure.identity.aio`` style).
- ``useDevelopmentEmulator`` (``false``): no TLS, the port in ``fullyQualifiedNamespace`` (a local emulator).
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rxhubs.errors import ConfigurationError, RxHubsError
from rxhubs.transport._connection_string import parse_connection_string, redact

if TYPE_CHECKING:
    from rxhubs.transport._hub import EventHub

__all__ = ["CONNECTION_KEYS", "CREDENTIAL_KINDS", "Connection", "close_hub", "close_loop"]

#: The option names this module reads (lower case); ``credentialfactory.*`` are the factory's own. The last
#: four are refused by :class:`Connection` with a line that says what to use instead.
CONNECTION_KEYS = frozenset({
    "connectionstring", "eventhubname", "fullyqualifiednamespace", "credential", "managedidentityclientid",
    "tenantid", "clientid", "clientsecretenv", "clientsecretfile", "credentialfactory", "usedevelopmentemulator",
    "clientsecret", "eventhubs.aadauthcallbackparams", "eventhubs.useaadauth", "eventhubs.aadauthcallback",
})
#: ``credential`` values (lower case) -> the name used in messages.
CREDENTIAL_KINDS = {"default": "default", "managedidentity": "managedIdentity", "serviceprincipal": "servicePrincipal"}
_FACTORY_PREFIX = "credentialfactory."
_SECRET_OPTIONS = ("clientsecret", "eventhubs.aadauthcallbackparams")
_ENTRA_ONLY = ("credential", "managedidentityclientid", "tenantid", "clientid", "clientsecretenv",
               "clientsecretfile", "credentialfactory", "usedevelopmentemulator")


class Connection:
    """Where the hub is and how to authenticate, checked on the driver (no I/O); built into a hub anywhere.

    Holds strings only, so it pickles to executors; the credential itself is made where :meth:`hub` runs.

    Example:
        >>> c = Connection({"fullyqualifiednamespace": "ns.servicebus.windows.net", "eventhubname": "h",
        ...                 "credential": "managedIdentity"})
        >>> c.namespace, c.eventhub_name, c.credential_kind
        ('ns.servicebus.windows.net', 'h', 'managedIdentity')
    """

    def __init__(self, opts: Mapping[str, str]) -> None:
        for name in _SECRET_OPTIONS:
            if name in opts:
                raise ConfigurationError(
                    f"option {name!r} would put a secret where Spark logs it: give servicePrincipal's secret with "
                    "clientSecretEnv (an environment variable's name) or clientSecretFile"
                )
        if "eventhubs.useaadauth" in opts or "eventhubs.aadauthcallback" in opts:
            raise ConfigurationError(
                "eventhubs.useAadAuth / eventhubs.aadAuthCallback name a Scala callback class: use credential "
                "(default, managedIdentity, servicePrincipal) or credentialFactory=module:function"
            )
        self.factory_params = {k[len(_FACTORY_PREFIX):]: v for k, v in opts.items() if k.startswith(_FACTORY_PREFIX)}
        conn = opts.get("connectionstring") or None
        self.connection_string = conn
        self.credential_kind: str | None = None
        self.factory: str | None = opts.get("credentialfactory") or None
        self.emulator = _bool(opts.get("usedevelopmentemulator", "false"), "useDevelopmentEmulator")
        self.managed_identity_client_id = opts.get("managedidentityclientid") or None
        self.tenant_id = opts.get("tenantid") or None
        self.client_id = opts.get("clientid") or None
        self.secret_env = opts.get("clientsecretenv") or None
        self.secret_file = opts.get("clientsecretfile") or None
        if conn is not None:
            both = [k for k in ("fullyqualifiednamespace", *_ENTRA_ONLY) if k in opts]
            if both:
                raise ConfigurationError(
                    f"give connectionString or fullyQualifiedNamespace with a credential, not both (also got {both[0]})"
                )
            parsed = parse_connection_string(conn, opts.get("eventhubname") or None)
            if parsed.eventhub_name is None:
                raise ConfigurationError(
                    "no event hub name: add EntityPath=<hub> to the connection string or option('eventHubName', ...)"
                )
            self.namespace, self.eventhub_name = parsed.fully_qualified_namespace, parsed.eventhub_name
            return
        namespace, hub = opts.get("fullyqualifiednamespace"), opts.get("eventhubname")
        if not namespace:
            raise ConfigurationError(
                "no hub to reach: give option('connectionString', ...), or fullyQualifiedNamespace, eventHubName "
                "and credential (default, managedIdentity, servicePrincipal) or credentialFactory"
            )
        if not hub:
            raise ConfigurationError("fullyQualifiedNamespace needs option('eventHubName', ...)")
        self.namespace, self.eventhub_name = namespace, hub
        self._check_credential(opts)

    def _check_credential(self, opts: Mapping[str, str]) -> None:
        kind = opts.get("credential")
        if self.factory is not None:
            if kind is not None:
                raise ConfigurationError("give credential or credentialFactory, not both")
            _resolve_factory(self.factory)  # fails here, on the driver, rather than in every task
            return
        if kind is None:
            raise ConfigurationError(
                "fullyQualifiedNamespace needs credential (default, managedIdentity, servicePrincipal) or "
                "credentialFactory=module:function"
            )
        if kind.lower() not in CREDENTIAL_KINDS:
            raise ConfigurationError(
                f"unknown credential {kind!r}: use default, managedIdentity, servicePrincipal, or "
                "credentialFactory=module:function"
            )
        self.credential_kind = CREDENTIAL_KINDS[kind.lower()]
        if self.credential_kind == "servicePrincipal":
            if not self.tenant_id or not self.client_id:
                raise ConfigurationError("credential servicePrincipal needs tenantId and clientId")
            if self.secret_env and self.secret_file:
                raise ConfigurationError("give clientSecretEnv or clientSecretFile, not both")

    def __repr__(self) -> str:
        how = "connectionString" if self.connection_string else (self.credential_kind or "credentialFactory")
        return f"Connection({self.namespace!r}, {self.eventhub_name!r}, {how})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Connection) and vars(self) == vars(other)

    __hash__ = None  # type: ignore[assignment]

    def hub(self, partition_ids: tuple[str, ...] = (), *, management_link: bool = False) -> EventHub:
        """A new :class:`~rxhubs.EventHub` (and, for Entra ID, a new credential): close it with :func:`close_hub`.

        ``partition_ids``: partitions the caller knows the hub has (an executor reading what the driver planned
        from the hub's own list). Its receivers then open without first asking the hub for its partitions: a
        management call, about 0.4 s of waiting with the SDK, per Spark task.
        ``management_link``: the hub's management calls go over one link kept open
        (:mod:`rxhubs.transport._management_link`: a few ms each after a 40 ms open, against 0.4 s each through
        the SDK), falling back to the SDK's own call on any failure.
        """
        from rxhubs.transport._hub import EventHub

        if self.connection_string is not None:
            hub = EventHub.from_connection_string(
                self.connection_string, self.eventhub_name, track_last_enqueued_event_properties=False
            )
        else:
            hub = EventHub(
                self.namespace, self.eventhub_name, self.credential(), use_development_emulator=self.emulator,
                track_last_enqueued_event_properties=False,
            )
        if partition_ids:
            hub._partition_ids = partition_ids  # what _check_partition reads first; a miss still asks the hub
        if management_link:
            from rxhubs.transport._management_link import ManagementLink

            hub._management_link = ManagementLink()
        return hub

    def credential(self) -> Any:
        """The Entra ID credential these options describe, made here (on an executor: there).

        Raises:
            ConfigurationError: azure-identity is missing, a service principal's secret cannot be read, or the
                factory returned nothing usable.
        """
        if self.factory is not None:
            function = _resolve_factory(self.factory)
            takes_params = bool(inspect.signature(function).parameters)
            made = function(dict(self.factory_params)) if takes_params else function()
            if made is None:
                raise ConfigurationError(f"credentialFactory {self.factory!r} returned None")
            return made
        try:
            from azure.identity import aio as identity  # type: ignore[import-untyped,import-not-found,unused-ignore]
        except ImportError:
            raise ConfigurationError(
                f"credential {self.credential_kind} needs azure-identity: pip install 'rxhubs[identity]'"
            ) from None
        if self.credential_kind == "default":
            return identity.DefaultAzureCredential()
        if self.credential_kind == "managedIdentity":
            return identity.ManagedIdentityCredential(client_id=self.managed_identity_client_id)
        if self.tenant_id is None or self.client_id is None:  # (checked when the options were read)
            raise ConfigurationError("credential servicePrincipal needs tenantId and clientId")
        return identity.ClientSecretCredential(self.tenant_id, self.client_id, self._secret())

    def _secret(self) -> str:
        if self.secret_file:
            try:
                secret = Path(self.secret_file).read_text(encoding="utf-8").strip()
            except OSError as exc:
                raise ConfigurationError(f"cannot read clientSecretFile {self.secret_file!r}: {exc.strerror}") from None
        else:
            name = self.secret_env or "AZURE_CLIENT_SECRET"
            secret = os.environ.get(name, "").strip()
            if not secret:
                raise ConfigurationError(
                    f"servicePrincipal: the environment variable {name} (clientSecretEnv) is not set on this machine"
                )
        if not secret:
            raise ConfigurationError(f"servicePrincipal: clientSecretFile {self.secret_file!r} is empty")
        return secret

    def redact(self, text: str) -> str:
        return redact(text, self.connection_string) if self.connection_string else text

    def check_secret(self, exc: BaseException) -> None:
        """Raise a redacted :class:`RxHubsError` instead of ``exc`` if its text shows a secret."""
        text = str(exc)
        if self.redact(text) != text:
            raise RxHubsError(f"{type(exc).__name__}: {self.redact(text)}") from None


async def close_hub(hub: EventHub) -> None:
    """Close ``hub``, then the credential :meth:`Connection.hub` made for it (if it can be closed)."""
    try:
        await hub.close()
    finally:
        close = getattr(getattr(hub, "_clients", None) and hub._clients.credential, "close", None)
        if close is not None and inspect.iscoroutinefunction(close):
            await close()


def close_loop(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel what still runs on ``loop`` (a call a failed ``gather`` left behind), let it finish, close ``loop``.

    What :func:`asyncio.run` does at its end, for the loops the data source runs by hand: a task left pending
    on a closed loop is destroyed by the garbage collector later, its socket with it, in whatever code runs then.

    Example:
        >>> loop = asyncio.new_event_loop()
        >>> left = loop.create_task(asyncio.sleep(3600))
        >>> close_loop(loop)
        >>> left.cancelled(), loop.is_closed()
        (True, True)
    """
    try:
        left = [task for task in asyncio.all_tasks(loop) if not task.done()]
        for task in left:
            task.cancel()
        if left:
            loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
    finally:
        loop.close()


def _resolve_factory(spec: str) -> Any:
    module, _, name = spec.partition(":")
    if not module or not name:
        raise ConfigurationError(f"credentialFactory must be module:function, got {spec!r}")
    try:
        function = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise ConfigurationError(f"credentialFactory {spec!r} cannot be loaded: {exc}") from None
    if not callable(function):
        raise ConfigurationError(f"credentialFactory {spec!r} is not a function")
    return function


def _bool(text: str, name: str) -> bool:
    if text.strip().lower() in ("true", "1", "yes"):
        return True
    if text.strip().lower() in ("false", "0", "no", ""):
        return False
    raise ConfigurationError(f"{name} must be true or false, got {text!r}")
