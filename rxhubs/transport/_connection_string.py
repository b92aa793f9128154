"""Event Hubs connection strings: parse, validate, and keep their secrets out of sight.

A connection string is ``;``-separated ``Key=Value`` settings, as the Azure portal shows them::

    Endpoint=sb://<namespace>.servicebus.windows.net/;SharedAccessKeyName=<policy>;SharedAccessKey=<key>;EntityPath=<hub>

:func:`parse_connection_string` turns one into a frozen :class:`ConnectionString` whose ``repr`` and ``str``
never show the key or the signature; :func:`redact` removes keys and signatures from any text and is what
every rxhubs error message and log line goes through.

Rules (the same as the Azure SDKs, and strict where they are silently lenient):

- Setting names are case-insensitive; values are taken verbatim (``=`` inside a value, as in base64 keys,
  is kept). Empty segments (a trailing ``;``) are ignored. A setting given twice is an error.
- ``Endpoint`` is required and must be ``sb://host[:port][/]`` (``amqps://`` and ``amqp://`` are accepted too).
- Either ``SharedAccessKeyName`` with ``SharedAccessKey``, or ``SharedAccessSignature``; not both, not none.
- ``EntityPath`` (the event hub name) is optional.
- ``UseDevelopmentEmulator`` is ``true`` or ``false`` in any case (the SDK itself only honours the exact
  lowercase ``true``; :meth:`ConnectionString.to_connection_string` writes it normalised).
- Unknown settings are errors: a typo such as ``SharedAcessKey`` must not turn into a confusing failure later.

Errors are :class:`~rxhubs.errors.ConfigurationError` with a one-line message that quotes no value.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from rxhubs.errors import ConfigurationError

__all__ = ["ConnectionString", "check_eventhub_name", "parse_connection_string", "redact"]

_REDACTED = "***"

# Canonical spelling of each known setting, by lowercased name.
_SETTINGS = {
    name.lower(): name
    for name in (
        "Endpoint",
        "SharedAccessKeyName",
        "SharedAccessKey",
        "SharedAccessSignature",
        "EntityPath",
        "UseDevelopmentEmulator",
    )
}
_SCHEMES = ("sb", "amqps", "amqp")
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOST_RE = re.compile(rf"^(?=.{{1,253}}$){_LABEL}(?:\.{_LABEL})*$")
# Event hub names: letters, digits, periods, hyphens and underscores; start and end with a letter or digit.
_HUB_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]{0,254}[A-Za-z0-9])?$")
_POLICY_RE = re.compile(r"^[A-Za-z0-9._-]{1,256}$")

# What redact() removes. Each pattern keeps its first group (the name and separator) and drops the value.
_SECRET_PATTERNS = (
    # Connection-string settings: SharedAccessKey=..., AccountKey=... (storage), up to ; or a quote/space.
    re.compile(r"((?:SharedAccessKey|AccountKey|Password)\s*=\s*)[^;\s\"'&,)}\]]+", re.IGNORECASE),
    # SharedAccessSignature=<token>: the token itself contains spaces ("SharedAccessSignature sr=..."), so
    # everything up to the next ; or quote or end of line goes.
    re.compile(r"(SharedAccessSignature\s*=\s*)[^;\"'\r\n]+", re.IGNORECASE),
    # A bare SAS token anywhere: its signature is the secret (sig=...), url-encoded or not.
    re.compile(r"((?<![A-Za-z0-9_])sig\s*=\s*)[^&;\s\"',)}\]]+", re.IGNORECASE),
    # Python reprs and keyword forms: shared_access_key='...', account_key="...", key: '...'.
    re.compile(
        r"((?:shared_access_key|shared_access_signature|account_key|sas_token|signature)['\"]?\s*[=:]\s*['\"])"
        r"[^'\"]*",
        re.IGNORECASE,
    ),
)


def redact(text: str, *secrets: str | None) -> str:
    """Remove keys and signatures from ``text``.

    Blanks the values of ``SharedAccessKey=``, ``SharedAccessSignature=``, ``AccountKey=``, ``Password=``,
    SAS ``sig=`` parameters and ``shared_access_key='...'``-style reprs, and every occurrence of the given
    ``secrets`` (for services that echo a token without its name). Use it on anything that may end up in a
    message or a log line.

    Args:
        text: Any text.
        *secrets: Exact strings to remove as well (``None`` and empty strings are ignored).

    Returns:
        The text with every secret replaced by ``***``.

    Example:
        >>> redact("Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=root;SharedAccessKey=abc=")
        'Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=root;SharedAccessKey=***'
        >>> redact("token SharedAccessSignature sr=x&sig=Zm9v%3D&se=1")
        'token SharedAccessSignature sr=x&sig=***&se=1'
    """
    for secret in sorted((s for s in secrets if s), key=len, reverse=True):
        text = text.replace(secret, _REDACTED)
    for pattern in _SECRET_PATTERNS:
        text = pattern.sub(lambda m: m.group(1) + _REDACTED, text)
    return text


@dataclass(frozen=True, slots=True, repr=False)
class ConnectionString:
    """A parsed, validated Event Hubs connection string. Its ``repr`` and ``str`` hide the secrets.

    Attributes:
        fully_qualified_namespace: The host, with ``:port`` when one was given
            (``<namespace>.servicebus.windows.net``, or ``127.0.0.1:5672`` for a local emulator).
        shared_access_key_name: The shared access policy name, if a key is used.
        shared_access_key: The shared access key (secret), if a key is used.
        shared_access_signature: A SAS token (secret), when given instead of a key.
        eventhub_name: ``EntityPath``, if present.
        use_development_emulator: Plain TCP without TLS, honouring the endpoint's port.
        scheme: The endpoint's scheme, normally ``sb``.

    Example:
        >>> cs = parse_connection_string(
        ...     "Endpoint=sb://127.0.0.1:5672;SharedAccessKeyName=k;SharedAccessKey=s3cret;"
        ...     "EntityPath=telemetry;UseDevelopmentEmulator=true")
        >>> cs.fully_qualified_namespace, cs.eventhub_name, cs.use_development_emulator
        ('127.0.0.1:5672', 'telemetry', True)
        >>> "s3cret" in repr(cs) or "s3cret" in str(cs)
        False
    """

    fully_qualified_namespace: str
    shared_access_key_name: str | None = None
    shared_access_key: str | None = None
    shared_access_signature: str | None = None
    eventhub_name: str | None = None
    use_development_emulator: bool = False
    scheme: str = "sb"

    @property
    def endpoint(self) -> str:
        """The endpoint as written in a connection string, e.g. ``sb://ns.servicebus.windows.net/``."""
        return f"{self.scheme}://{self.fully_qualified_namespace}/"

    def with_eventhub_name(self, eventhub_name: str | None) -> ConnectionString:
        """The same connection string for another event hub (``EntityPath``); ``None`` keeps the current one.

        Raises:
            ConfigurationError: The name is not a valid event hub name.
        """
        if eventhub_name is None:
            return self
        check_eventhub_name(eventhub_name)
        return ConnectionString(
            self.fully_qualified_namespace,
            self.shared_access_key_name,
            self.shared_access_key,
            self.shared_access_signature,
            eventhub_name,
            self.use_development_emulator,
            self.scheme,
        )

    def to_connection_string(self) -> str:
        """The full connection string, secrets included, in canonical form. Never log it.

        Example:
            >>> parse_connection_string(
            ...     "endpoint=sb://ns.servicebus.windows.net;sharedaccesskeyname=k;sharedaccesskey=v"
            ... ).to_connection_string()
            'Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=k;SharedAccessKey=v'
        """
        return self._render(self.shared_access_key, self.shared_access_signature)

    def _render(self, key: str | None, signature: str | None) -> str:
        parts = [f"Endpoint={self.endpoint}"]
        if self.shared_access_key_name is not None:
            parts.append(f"SharedAccessKeyName={self.shared_access_key_name}")
        if key is not None:
            parts.append(f"SharedAccessKey={key}")
        if signature is not None:
            parts.append(f"SharedAccessSignature={signature}")
        if self.eventhub_name is not None:
            parts.append(f"EntityPath={self.eventhub_name}")
        if self.use_development_emulator:
            parts.append("UseDevelopmentEmulator=true")
        return ";".join(parts)

    @property
    def secrets(self) -> tuple[str, ...]:
        """The secret values (key and/or signature), for :func:`redact`."""
        return tuple(s for s in (self.shared_access_key, self.shared_access_signature) if s)

    def __str__(self) -> str:
        return self._render(
            None if self.shared_access_key is None else _REDACTED,
            None if self.shared_access_signature is None else _REDACTED,
        )

    def __repr__(self) -> str:
        return f"ConnectionString({str(self)!r})"


def check_eventhub_name(name: object) -> None:
    """Raise :class:`ConfigurationError` unless ``name`` is a valid event hub name.

    Example:
        >>> check_eventhub_name("telemetry")
        >>> check_eventhub_name("no spaces")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        rxhubs.errors.ConfigurationError: event hub name must be 1-256 letters, digits, '.', '-' or '_', ...
    """
    if not isinstance(name, str) or not _HUB_RE.match(name):
        raise ConfigurationError(
            "event hub name must be 1-256 letters, digits, '.', '-' or '_', starting and ending with a letter or digit"
        )


def parse_connection_string(conn_str: str, eventhub_name: str | None = None) -> ConnectionString:
    """Parse and validate an Event Hubs connection string.

    Args:
        conn_str: The connection string.
        eventhub_name: The event hub, if the string has no ``EntityPath``. When both are given they must
            agree.

    Returns:
        A :class:`ConnectionString`.

    Raises:
        ConfigurationError: The string is malformed or incomplete; the message never contains a secret.

    Example:
        >>> cs = parse_connection_string(
        ...     "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=root;SharedAccessKey=a2V5",
        ...     eventhub_name="telemetry")
        >>> cs
        ConnectionString('Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=root;SharedAccessKey=***;EntityPath=telemetry')
        >>> parse_connection_string("SharedAccessKey=a2V5")
        Traceback (most recent call last):
        ...
        rxhubs.errors.ConfigurationError: connection string has no Endpoint (expected Endpoint=sb://<namespace>.servicebus.windows.net/;...)
    """
    if not isinstance(conn_str, str):
        raise ConfigurationError(f"connection string must be a str, got {type(conn_str).__name__}")
    settings: dict[str, str] = {}
    for segment in conn_str.split(";"):
        if not segment.strip():
            continue
        name, sep, value = segment.partition("=")
        canonical = _SETTINGS.get(name.strip().lower())
        if not sep:
            raise ConfigurationError("malformed connection string: every setting must be Key=Value, separated by ';'")
        if canonical is None:
            shown = name.strip()
            # Echo the name only when it looks like one: a mangled segment may hold part of a key.
            label = f"unknown setting {shown!r}" if re.fullmatch(r"[A-Za-z]{1,40}", shown) else "an unknown setting"
            raise ConfigurationError(
                f"malformed connection string: {label} (known: {', '.join(sorted(_SETTINGS.values()))})"
            )
        if canonical in settings:
            raise ConfigurationError(f"malformed connection string: {canonical} is given twice")
        settings[canonical] = value.strip()

    endpoint = settings.get("Endpoint")
    if not endpoint:
        raise ConfigurationError(
            "connection string has no Endpoint (expected Endpoint=sb://<namespace>.servicebus.windows.net/;...)"
        )
    scheme, namespace = _parse_endpoint(endpoint)

    key_name = settings.get("SharedAccessKeyName")
    key = settings.get("SharedAccessKey")
    signature = settings.get("SharedAccessSignature")
    if key_name is not None and not key_name:
        raise ConfigurationError("malformed connection string: SharedAccessKeyName is empty")
    if key_name is not None and not _POLICY_RE.match(key_name):
        raise ConfigurationError(
            "malformed connection string: SharedAccessKeyName must be letters, digits, '.', '-' or '_'"
        )
    if key is not None and not key:
        raise ConfigurationError("malformed connection string: SharedAccessKey is empty")
    if signature is not None and not signature:
        raise ConfigurationError("malformed connection string: SharedAccessSignature is empty")
    if (key_name is None) != (key is None):
        raise ConfigurationError("connection string needs SharedAccessKeyName and SharedAccessKey together")
    if key is not None and signature is not None:
        raise ConfigurationError("connection string has both SharedAccessKey and SharedAccessSignature; give one")
    if key is None and signature is None:
        raise ConfigurationError(
            "connection string has no credential: add SharedAccessKeyName and SharedAccessKey, or SharedAccessSignature"
        )

    entity = settings.get("EntityPath")
    if entity is not None:
        check_eventhub_name(entity)
    if eventhub_name is not None:
        check_eventhub_name(eventhub_name)
        if entity is not None and entity != eventhub_name:
            raise ConfigurationError(
                f"eventhub_name {eventhub_name!r} does not match the connection string's EntityPath {entity!r}"
            )

    emulator_flag = settings.get("UseDevelopmentEmulator", "false").lower()
    if emulator_flag not in ("true", "false"):
        raise ConfigurationError("malformed connection string: UseDevelopmentEmulator must be true or false")

    return ConnectionString(
        fully_qualified_namespace=namespace,
        shared_access_key_name=key_name,
        shared_access_key=key,
        shared_access_signature=signature,
        eventhub_name=eventhub_name if eventhub_name is not None else entity,
        use_development_emulator=emulator_flag == "true",
        scheme=scheme,
    )


def _parse_endpoint(endpoint: str) -> tuple[str, str]:
    bad = ConfigurationError(
        "malformed connection string: Endpoint must look like sb://<namespace>.servicebus.windows.net/"
    )
    try:
        parts = urlsplit(endpoint)
        port = parts.port
    except ValueError:
        raise bad from None
    scheme = parts.scheme.lower()
    host = parts.hostname or ""
    if scheme not in _SCHEMES or not _HOST_RE.match(host) or parts.username or parts.password:
        raise bad
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise bad
    if port is not None and not 0 < port < 65536:
        raise bad
    return scheme, host if port is None else f"{host}:{port}"
