"""SDK error -> rxhubs error: one mapping for everything the Azure transport calls.

Every exception from azure-eventhub (or the sockets under it) is translated here, at the boundary, into the
rxhubs tree (:mod:`rxhubs.errors`), with a one-line message free of secrets; raise the result ``from`` the
original. What cannot be recognised is a retriable :class:`~rxhubs.errors.TransportError`: the SDK raises
odd things while a connection is being torn down, and retrying them is what the service expects.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from azure.eventhub import exceptions as sdk_errors

from rxhubs.errors import (
    AuthenticationError,
    ConfigurationError,
    NotFoundError,
    OwnershipLostError,
    RxHubsError,
    TransportError,
)
from rxhubs.transport._connection_string import redact

__all__ = ["first_line", "translate_error"]


def _condition(exc: BaseException) -> str:
    error = getattr(exc, "error", None)
    return error.lower() if isinstance(error, str) else ""


def first_line(exc: BaseException, secrets: Sequence[str]) -> str:
    text = str(exc).strip() or type(exc).__name__
    return redact(text.splitlines()[0], *secrets)


def _cbs_not_found(exc: BaseException, secrets: Sequence[str]) -> str | None:
    """The description of a put-token refused with status 404 (an unknown entity), else None."""
    if not isinstance(exc, sdk_errors.AuthenticationError):
        return None
    lines = str(exc).splitlines()
    if not any(line.strip() == "Status code: 404" for line in lines):
        return None
    described = [line.split(":", 1)[1].strip() for line in lines if line.startswith("Description:")]
    return redact(described[0] if described else "the messaging entity could not be found", *secrets)


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
    detail = first_line(exc, secrets)
    message = f"{what}: {detail}"
    lowered = detail.lower()
    if "stolen" in condition or "receiver-disconnected" in condition or "epoch" in lowered or "stolen" in lowered:
        return OwnershipLostError(f"{what}: a reader with a higher owner level took the partition ({detail})")
    if "georeplication:invalid-offset" in condition or "georeplication:invalid-offset" in lowered:
        return ConfigurationError(f"{what}: a position by an offset that is not valid in this geo-replicated"
                                  f" namespace (an offset from before a promotion?): use a sequence number ({detail})")
    if "not-found" in condition or "notfound" in condition.replace("-", "") or "not found" in lowered:
        return NotFoundError(message)
    missing = _cbs_not_found(exc, secrets)
    if missing is not None:  # the service refuses a token for an unknown hub with 404, before any link
        return NotFoundError(f"{what}: {missing}")
    if isinstance(exc, sdk_errors.AuthenticationError) or "unauthorized" in condition:
        return AuthenticationError(message)
    if "argument" in condition or isinstance(exc, sdk_errors.EventDataError | ValueError | TypeError):
        return ConfigurationError(message)
    if isinstance(exc, sdk_errors.ClientClosedError):
        return TransportError(message, retriable=False)
    if isinstance(exc, sdk_errors.EventHubError | OSError | TimeoutError | asyncio.TimeoutError):
        return TransportError(message)
    return TransportError(message)  # unrecognised: presumed transient (see the module docstring)
