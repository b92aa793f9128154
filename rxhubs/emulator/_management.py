"""``$cbs`` put-token and ``$management`` READ requests.

CBS accepts any token unless the emulator was given a key to check SAS signatures against. Management
answers the two reads the SDK makes: event hub properties and partition properties (404 when unknown).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import time
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, quote_plus

from rxhubs.emulator import _message as msg
from rxhubs.emulator._codec import DecodeError

if TYPE_CHECKING:
    from rxhubs.emulator._server import Server

_LOG = logging.getLogger("rxhubs.emulator")


def handle(server: Server, node: str, payload: bytes) -> bytes:
    """Answer one request message with a reply message (decode errors become a 400 reply)."""
    try:
        request = msg.parse_request(payload)
    except DecodeError as exc:
        return msg.response(None, 400, f"The request could not be decoded: {exc}")
    props = {_text(k): v for k, v in request.application_properties.items()}
    operation = _text(props.get("operation"))
    if node == "$cbs":
        if operation != "put-token":
            return msg.response(request.message_id, 400, f"Unsupported CBS operation '{operation}'.")
        status, text = check_token(server, _text(request.body), _text(props.get("name")))
        return msg.response(request.message_id, status, text)
    if operation != "READ":
        return msg.response(request.message_id, 400, f"Unsupported management operation '{operation}'.")
    kind = _text(props.get("type"))
    name = _text(props.get("name"))
    hub = server.hubs.get(name)
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


def check_token(server: Server, token: str, audience: str) -> tuple[int, str]:
    """Validate a put-token request: any token passes unless the server checks SAS signatures."""
    key = server.verify_key
    if key is None:
        return 202, "Accepted"
    fields = {}
    if token.startswith("SharedAccessSignature "):
        fields = {k: v[0] for k, v in parse_qs(token[len("SharedAccessSignature "):]).items()}
    try:
        resource, signature, expiry, key_name = fields["sr"], fields["sig"], fields["se"], fields["skn"]
        expires = int(expiry)
    except (KeyError, ValueError):
        return 401, "The token is not a valid shared access signature."
    if key_name != server.key_name:
        return 401, "Unknown shared access key name."
    if expires < time.time():
        return 401, "The token has expired."
    to_sign = (quote_plus(resource) + "\n" + expiry).encode("utf-8")
    expected = base64.b64encode(hmac.new(key.encode("utf-8"), to_sign, hashlib.sha256).digest()).decode()
    if not hmac.compare_digest(expected, signature):
        _LOG.info("refused a token for %s: bad signature", audience)
        return 401, "The token signature is invalid."
    return 202, "Accepted"


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return "" if value is None else str(value)
