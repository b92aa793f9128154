"""``$cbs`` put-token and ``$management`` READ requests.

CBS answers a put-token for an audience naming an unknown hub with 404, as the service does. Otherwise it
accepts any token unless the emulator has SAS keys; then a token must be a shared access signature made
with one of them (signed over its ``sr`` field as written: the SDK URL-encodes it, the SDK's SAS-token
sample does not), unexpired, for a resource that covers the audience, and each accepted token authorizes
its audience on that connection (see :meth:`Connection.authorized`). An emulator given local identities
(:class:`~rxhubs.emulator.LocalIdentity`) also accepts their bearer tokens (Entra ID's ``jwt`` put-token).
Management answers the two reads the SDK makes: event hub properties and partition properties (404 when unknown).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import time
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, unquote, urlparse

from rxhubs.emulator import _message as msg
from rxhubs.emulator._codec import DecodeError
from rxhubs.emulator._fault_state import BUSY, BUSY_TEXT
from rxhubs.emulator._identity import check_jwt

if TYPE_CHECKING:
    from rxhubs.emulator._roles import ConnectionRole

_LOG = logging.getLogger("rxhubs.emulator")
_SAS_PREFIX = "SharedAccessSignature "


def handle(connection: ConnectionRole, node: str, payload: bytes) -> bytes:
    """Answer one request message with a reply message (decode errors become a 400 reply)."""
    server = connection.server
    try:
        request = msg.parse_request(payload)
    except DecodeError as exc:
        return msg.response(None, 400, f"The request could not be decoded: {exc}")
    props = {_text(k): v for k, v in request.application_properties.items()}
    operation = _text(props.get("operation"))
    if node == "$cbs":
        if operation != "put-token":
            return msg.response(request.message_id, 400, f"Unsupported CBS operation '{operation}'.")
        audience = _text(props.get("name"))
        missing = unknown_entity(connection, audience)
        if missing is not None:  # the service answers 404 before it looks at the token
            return msg.response(request.message_id, 404, missing)
        status, text = check_token(connection, _text(request.body), audience)
        return msg.response(request.message_id, status, text)
    if operation != "READ":
        return msg.response(request.message_id, 400, f"Unsupported management operation '{operation}'.")
    kind = _text(props.get("type"))
    name = _text(props.get("name"))
    if not connection.authorized(name):
        return msg.response(request.message_id, 401, unauthorized_text("Listen", name))
    hub = server.hub(name)
    if server.faults.busy("management", hub.name if hub is not None else name):
        return msg.response(request.message_id, 503, f"{BUSY}: {BUSY_TEXT}", condition=BUSY)
    if hub is None:
        return msg.response(request.message_id, 404, f"The messaging entity '{name}' could not be found.")
    if kind == "com.microsoft:eventhub":
        return msg.response(request.message_id, 200, "OK", hub.properties())
    if kind == "com.microsoft:partition":
        pid = _text(props.get("partition"))
        partition = hub.partitions.get(pid)
        if partition is None:
            return msg.response(request.message_id, 404, f"Partition '{pid}' of '{name}' could not be found.")
        return msg.response(request.message_id, 200, "OK", partition.properties())
    return msg.response(request.message_id, 400, f"Unsupported management type '{kind}'.")


def unknown_entity(connection: ConnectionRole, audience: str) -> str | None:
    """The service's 404 text when a put-token's audience names an event hub the namespace lacks, else None.

    The service refuses such a token with status 404 before checking it, with or without keys; the SDK
    raises an authentication error (``ConnectError``) for it. A namespace-wide audience (``sb://host/``) is
    never unknown.
    """
    path = resource_path(audience)
    if not path or connection.server.hub(path.split("/")[0]) is not None:
        return None
    _LOG.info("refused a token for %s: no such event hub", audience)
    return (f"The messaging entity '{unquote(audience)}' could not be found. "
            "To know more visit https://aka.ms/sbResourceMgrExceptions.")


def check_token(connection: ConnectionRole, token: str, audience: str) -> tuple[int, str]:
    """Validate a put-token request (any token passes unless the server has SAS keys).

    An accepted token authorizes its audience on ``connection`` until it expires. Refusals use the status
    code and the wording of the service's replies (401 and ``InvalidSignature: ...`` and so on); they
    never repeat the token.
    """
    keys = connection.server.keys
    if keys is None:
        return 202, "Accepted"
    if not token.startswith(_SAS_PREFIX) and connection.server.identities:  # a bearer token (Entra ID)
        status, text, until = check_jwt(connection.server.identities, token)
        if status == 202:
            connection.grant(resource_path(audience), until)
        else:
            _LOG.info("refused a bearer token for %s: %s", audience, text.split(":")[0])
        return status, text
    fields: dict[str, str] = {}
    written = ""  # the resource exactly as the token carries it: the signature covers these characters
    if token.startswith(_SAS_PREFIX):
        fields = {k: v[0] for k, v in parse_qs(token[len(_SAS_PREFIX):]).items()}
        written = next((part[3:] for part in token[len(_SAS_PREFIX):].split("&") if part.startswith("sr=")), "")
    try:
        resource, signature, expiry, key_name = fields["sr"], fields["sig"], fields["se"], fields["skn"]
        expires = int(expiry)
    except (KeyError, ValueError):
        return 401, "InvalidToken: The token is not a valid shared access signature."
    key = keys.get(key_name)
    if key is None:
        _LOG.info("refused a token for %s: unknown key name", audience)
        return 401, "InvalidIssuer: Token issuer is invalid."
    if not any(hmac.compare_digest(_sign(key, signed, expiry), signature) for signed in dict.fromkeys(
            (written, resource))):
        _LOG.info("refused a token for %s: bad signature", audience)
        return 401, "InvalidSignature: The token has an invalid signature."
    if expires < time.time():
        return 401, f"ExpiredToken: The token is expired. Expiration time: '{expires}'."
    if not covers(resource_path(resource), resource_path(audience)):
        return 401, (f"InvalidAudience: The token audience '{unquote(resource)}' does not cover the "
                     f"resource '{audience}'.")
    connection.grant(resource_path(audience), float(expires))
    return 202, "Accepted"


def _sign(key: str, resource: str, expiry: str) -> str:
    """The signature of ``resource`` + newline + ``expiry`` with ``key`` (HMAC-SHA256, base64)."""
    digest = hmac.new(key.encode("utf-8"), (resource + "\n" + expiry).encode("utf-8"), hashlib.sha256).digest()
    return base64.b64encode(digest).decode()


def resource_path(uri: str) -> str:
    """The entity path of a resource URI or audience, lower-cased: ``sb://host/Hub/x`` -> ``hub/x``."""
    uri = unquote(uri)
    path = urlparse(uri).path if "://" in uri else uri
    return "/".join(part for part in path.casefold().split("/") if part)


def covers(granted: str, wanted: str) -> bool:
    """Whether a grant for path ``granted`` covers ``wanted`` (whole segments; "" is the namespace)."""
    return not granted or wanted == granted or wanted.startswith(granted + "/")


def unauthorized_text(claim: str, entity: str) -> str:
    """The service's wording for a missing claim."""
    return (f"Unauthorized access. '{claim}' claim(s) are required to perform this operation. "
            f"Resource: '{entity}'.")


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return "" if value is None else str(value)
