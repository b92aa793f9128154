"""A local managed-identity endpoint: ``DefaultAzureCredential`` gets a :class:`LocalIdentity`'s tokens unmodified.

Applications written for Azure build their clients with ``azure.identity.DefaultAzureCredential()``. On Azure App
Service and Functions that credential reads two environment variables, ``IDENTITY_ENDPOINT`` (an HTTP URL on the
machine) and ``IDENTITY_HEADER`` (a secret it sends back as ``X-IDENTITY-HEADER``), and asks that endpoint for a
token: ``GET IDENTITY_ENDPOINT?api-version=2019-08-01&resource=https://eventhubs.azure.net``. This module serves
that protocol on 127.0.0.1 with the tokens of a :class:`~rxhubs.emulator.LocalIdentity`, so the same code, the
SDK's samples and any app using ``DefaultAzureCredential`` or ``ManagedIdentityCredential`` authenticate against
an emulator given that identity, without a line changed and without reaching Entra ID.

Example:
    >>> import json, urllib.request
    >>> from rxhubs.emulator import LocalIdentity
    >>> from rxhubs.emulator._identity import check_jwt
    >>> identity = LocalIdentity("app")
    >>> with IdentityEndpoint(identity) as endpoint:
    ...     env = endpoint.environment()
    ...     query = "?api-version=2019-08-01&resource=https://eventhubs.azure.net"
    ...     ask = urllib.request.Request(env["IDENTITY_ENDPOINT"] + query,
    ...                                  headers={"X-IDENTITY-HEADER": env["IDENTITY_HEADER"]})
    ...     answer = json.load(urllib.request.urlopen(ask))
    >>> check_jwt([identity], answer["access_token"])[:2], answer["token_type"], endpoint.issued
    ((202, 'Accepted'), 'Bearer', 1)
    >>> endpoint
    IdentityEndpoint(LocalIdentity('app'))
"""

from __future__ import annotations

import hmac
import json
import secrets
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any
from urllib.parse import parse_qs, urlsplit

from rxhubs.emulator._identity import LocalIdentity

__all__ = ["IdentityEndpoint"]

_PATH = "/msi/token"


class IdentityEndpoint:
    """Serves the App Service managed-identity protocol on ``host:port`` (0: a free port) with ``identity``'s tokens.

    Use it as a context manager (or :meth:`start` / :meth:`stop`); :meth:`environment` gives the two variables a
    process sets for ``DefaultAzureCredential`` to use it. Requests without the secret header get 401, a resource
    other than Event Hubs' 400 (as the service's endpoint answers; the secret never appears in a reply or repr).
    """

    def __init__(self, identity: LocalIdentity, host: str = "127.0.0.1", port: int = 0) -> None:
        self.identity = identity
        self._secret = secrets.token_urlsafe(24)
        self._address = (host, port)
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        #: Tokens issued so far (a test can assert the endpoint was used), and requests refused.
        self.issued = 0
        self.refused = 0

    def __repr__(self) -> str:
        return f"IdentityEndpoint({self.identity!r})"

    @property
    def url(self) -> str:
        """The endpoint's URL (``IDENTITY_ENDPOINT``); the server must be started."""
        if self._server is None:
            raise RuntimeError("the identity endpoint is not started")
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}{_PATH}"

    def environment(self) -> dict[str, str]:
        """``IDENTITY_ENDPOINT`` and ``IDENTITY_HEADER``: what a process sets for DefaultAzureCredential."""
        return {"IDENTITY_ENDPOINT": self.url, "IDENTITY_HEADER": self._secret}

    def start(self) -> IdentityEndpoint:
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # (http.server's name)
                status, body = endpoint._answer(self.path, self.headers.get("X-IDENTITY-HEADER", ""))
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:  # quiet: nothing of a request is logged
                pass

        self._server = ThreadingHTTPServer(self._address, Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="rxhubs-identity-endpoint",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> IdentityEndpoint:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    def _answer(self, path: str, secret: str) -> tuple[int, dict[str, Any]]:
        parts = urlsplit(path)
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        if parts.path != _PATH:
            self.refused += 1
            return 404, {"error": "not_found", "error_description": f"no endpoint at {parts.path}"}
        if not hmac.compare_digest(secret.encode(), self._secret.encode()):
            self.refused += 1
            return 401, {"error": "unauthorized", "error_description": "the X-IDENTITY-HEADER is missing or wrong"}
        resource = query.get("resource", "")
        if resource.rstrip("/") != "https://eventhubs.azure.net":
            self.refused += 1
            return 400, {"error": "invalid_resource",
                         "error_description": f"this identity issues tokens for Event Hubs only, not {resource!r}"}
        now = time.time()
        self.issued += 1
        return 200, {"access_token": self.identity.token(now=now), "expires_on": str(int(now + self.identity.lifetime)),
                     "resource": resource, "token_type": "Bearer", "client_id": self.identity.name}
