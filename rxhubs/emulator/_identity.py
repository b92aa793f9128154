"""A local Entra ID stand-in: an identity that issues bearer tokens an emulator given it accepts.

Event Hubs takes Entra ID (Azure AD) tokens through CBS put-token with type ``jwt``; the SDK asks a token
credential for scope ``https://eventhubs.azure.net//.default``. :class:`LocalIdentity` signs such tokens
(JWT, HS256, claims ``iss``, ``sub``, ``aud`` = ``https://eventhubs.azure.net/``, ``iat``, ``nbf``, ``exp``) with
its own key, and :meth:`LocalIdentity.credential` is an async token credential the unmodified azure-eventhub
client (and rxhubs' Spark source, through ``credentialFactory``) uses like azure-identity's. An
``Emulator(identities=[identity])`` then requires authentication, and accepts exactly the unexpired tokens of
the identities it was given (and SAS tokens of its ``keys``, if any). Nothing here reaches Entra ID.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import secrets
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

from rxhubs.errors import ConfigurationError

__all__ = ["AUDIENCE", "LocalIdentity", "LocalIdentityCredential", "check_jwt", "credential_from_file"]

#: The audience of Event Hubs tokens (what Entra ID puts in ``aud``).
AUDIENCE = "https://eventhubs.azure.net/"


class _AccessToken(NamedTuple):  # azure.core.credentials.AccessToken's shape, without importing azure-core here
    token: str
    expires_on: int


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class LocalIdentity:
    """An identity with a name and a signing key; its tokens are accepted by emulators given it.

    The key never appears in its repr. :meth:`save` writes it to a file (mode 600) that
    :func:`credential_from_file` reads, so Spark executors can build the credential themselves.

    Example:
        >>> identity = LocalIdentity("reader", key="k" * 32)
        >>> token = identity.token(now=1_000)
        >>> check_jwt([identity], token, now=1_010)
        (202, 'Accepted', 4600.0)
        >>> check_jwt([LocalIdentity("reader", key="other" * 8)], token, now=1_010)[:2]
        (401, 'InvalidSignature: The token has an invalid signature.')
        >>> identity
        LocalIdentity('reader')
    """

    def __init__(self, name: str = "rxhubs-local-identity", key: str | None = None, *,
                 lifetime: float = 3600.0) -> None:
        if not name or not isinstance(name, str):
            raise ConfigurationError("a local identity needs a name")
        self.name = name
        self._key = key or secrets.token_urlsafe(32)
        self.lifetime = lifetime

    def __repr__(self) -> str:
        return f"LocalIdentity({self.name!r})"

    def token(self, audience: str = AUDIENCE, *, now: float | None = None, lifetime: float | None = None) -> str:
        """A signed JWT for ``audience``, valid from ``now`` for ``lifetime`` seconds (default: the identity's)."""
        issued = int(time.time() if now is None else now)
        claims = {"iss": self.name, "sub": self.name, "aud": audience, "iat": issued, "nbf": issued,
                  "exp": issued + int(self.lifetime if lifetime is None else lifetime)}
        head = _b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
        body = _b64(json.dumps(claims, separators=(",", ":")).encode())
        return f"{head}.{body}.{self._sign(f'{head}.{body}')}"

    def _sign(self, signed: str) -> str:
        return _b64(hmac.new(self._key.encode(), signed.encode(), hashlib.sha256).digest())

    def credential(self) -> LocalIdentityCredential:
        """An async token credential issuing this identity's tokens (``await get_token(scope)``)."""
        return LocalIdentityCredential(self)

    def save(self, path: str | Path) -> Path:
        """Write the name and key to ``path`` (readable by its owner only); returns the path."""
        target = Path(path)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump({"name": self.name, "key": self._key, "lifetime": self.lifetime}, f)
        return target

    @classmethod
    def load(cls, path: str | Path) -> LocalIdentity:
        """The identity :meth:`save` wrote to ``path``."""
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
            return cls(str(data["name"]), str(data["key"]), lifetime=float(data.get("lifetime", 3600.0)))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ConfigurationError(f"cannot read a local identity from {str(path)!r}: {type(exc).__name__}") from None


class LocalIdentityCredential:
    """An async token credential (azure-identity's ``get_token`` / ``close``) for a :class:`LocalIdentity`.

    Example:
        >>> import asyncio
        >>> credential = LocalIdentity("app").credential()
        >>> token = asyncio.run(credential.get_token("https://eventhubs.azure.net//.default"))
        >>> check_jwt([credential.identity], token.token)[:2], credential.issued
        ((202, 'Accepted'), 1)
    """

    def __init__(self, identity: LocalIdentity) -> None:
        self.identity = identity
        #: Tokens issued so far (a test can assert the credential was used).
        self.issued = 0

    def __repr__(self) -> str:
        return f"LocalIdentityCredential({self.identity.name!r})"

    async def get_token(self, *scopes: str, **kwargs: Any) -> _AccessToken:
        """A token for the first scope's resource (``.default`` removed), like Entra ID's."""
        resource = scopes[0].removesuffix(".default") if scopes else AUDIENCE
        now = time.time()
        self.issued += 1
        return _AccessToken(self.identity.token(resource, now=now), int(now + self.identity.lifetime))

    async def close(self) -> None:
        """Nothing to release (azure-identity credentials hold an HTTP session)."""

    async def __aenter__(self) -> LocalIdentityCredential:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def credential_from_file(params: Mapping[str, str]) -> LocalIdentityCredential:
    """A ``credentialFactory`` for Spark: the identity saved at ``params["file"]`` (``credentialFactory.file``).

    Example:
        >>> LocalIdentity("app", key="k" * 32).save("/tmp/rxhubs-doctest-identity.json").name
        'rxhubs-doctest-identity.json'
        >>> credential_from_file({"file": "/tmp/rxhubs-doctest-identity.json"})
        LocalIdentityCredential('app')

        In Spark: ``.option("credentialFactory", "rxhubs.emulator:credential_from_file")`` and
        ``.option("credentialFactory.file", path)``.
    """
    if "file" not in params:
        raise ConfigurationError("credential_from_file needs option('credentialFactory.file', <saved identity>)")
    return LocalIdentity.load(params["file"]).credential()


def check_jwt(identities: Iterable[LocalIdentity], token: str, *, now: float | None = None) -> tuple[int, str, float]:
    """Status, the service's wording and the expiry of a bearer token (200s accept; never repeats the token)."""
    parts = token.split(".")
    try:
        head, claims = (json.loads(_unb64(p)) for p in parts[:2])
        if len(parts) != 3 or head.get("alg") != "HS256":
            raise ValueError
        issuer, audience, expires = str(claims["iss"]), str(claims["aud"]), float(claims["exp"])
    except (ValueError, KeyError, TypeError):
        return 401, "InvalidToken: The token is not a valid JSON web token.", 0.0
    signer = next((i for i in identities if i.name == issuer), None)
    if signer is None:
        return 401, "InvalidIssuer: Token issuer is invalid.", 0.0
    if not hmac.compare_digest(signer._sign(f"{parts[0]}.{parts[1]}"), parts[2]):
        return 401, "InvalidSignature: The token has an invalid signature.", 0.0
    if audience.rstrip("/") != AUDIENCE.rstrip("/"):
        return 401, f"InvalidAudience: The token audience '{audience}' is not Event Hubs.", 0.0
    if expires < (time.time() if now is None else now):
        return 401, f"ExpiredToken: The token is expired. Expiration time: '{int(expires)}'.", 0.0
    return 202, "Accepted", expires
