"""The fault control API over HTTP: JSON in, JSON out, on 127.0.0.1 only (what ``rxhubs emulator fault`` calls).

=======  ====================  ==================================================  ===========================
Method   Path                  Body                                                Answer
=======  ====================  ==================================================  ===========================
GET      ``/status``                                                               :meth:`EmulatorFaults.status`
POST     ``/faults/busy``      ``{"seconds": 10, "on": ["attach"], "hub": null}``  ``{"active": [...]}``
POST     ``/faults/close``     ``{"hub": null}``                                   ``{"closed": N}``
POST     ``/faults/steal``     ``{"hub": H, "partition": P, "consumer_group": G}``  ``{"stolen": N}``
POST     ``/faults/partitions``  ``{"hub": H, "count": N}``                        ``{"partition_count": N}``
POST     ``/faults/promote``                                                       ``{"segment": N, "closed": N}``
POST     ``/faults/clear``                                                         ``{"active": []}``
=======  ====================  ==================================================  ===========================

Bad input is answered with status 400 and ``{"error": "one line"}``; one request per connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Any

from rxhubs.emulator._faults import EmulatorFaults
from rxhubs.errors import RxHubsError

__all__ = ["ControlServer"]

_LOG = logging.getLogger("rxhubs.emulator")
MAX_BODY = 64 * 1024
REQUEST_TIMEOUT = 10.0
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 500: "Internal Server Error"}


class ControlServer:
    """Serves :class:`EmulatorFaults` as a small JSON-over-HTTP API on ``127.0.0.1``."""

    def __init__(self, faults: EmulatorFaults) -> None:
        self.faults = faults
        self._server: asyncio.Server | None = None

    async def start(self, port: int) -> int:
        """Listen on ``127.0.0.1:port`` (0 picks a free port); returns the port."""
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", port, limit=MAX_BODY)
        return int(self._server.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2.0)
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(REQUEST_TIMEOUT):
                method, path, body = await _read_request(reader)
            status, answer = self._dispatch(method, path, body)
        except ValueError as exc:
            status, answer = 400, {"error": str(exc)}
        except (asyncio.IncompleteReadError, ConnectionError, TimeoutError, asyncio.LimitOverrunError):
            writer.close()
            return
        payload = json.dumps(answer).encode()
        head = (f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n").encode()
        writer.write(head + payload)
        with contextlib.suppress(Exception):
            await writer.drain()
        writer.close()

    def _dispatch(self, method: str, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        routes = {"/status": "GET", "/faults/busy": "POST", "/faults/close": "POST", "/faults/steal": "POST",
                  "/faults/partitions": "POST", "/faults/promote": "POST", "/faults/clear": "POST"}
        path = path.split("?", 1)[0].rstrip("/") or "/"
        if path not in routes:
            return 404, {"error": f"no such resource {path!r}; try GET /status"}
        if method != routes[path]:
            return 405, {"error": f"{path} takes {routes[path]}"}
        faults = self.faults
        try:
            if path == "/status":
                return 200, faults.status()
            if path == "/faults/busy":
                faults.server_busy(_number(body, "seconds"), on=body.get("on", "attach,flow,management"),
                                   hub=_optional_text(body, "hub"))
                return 200, {"active": faults.active}
            if path == "/faults/close":
                return 200, {"closed": faults.force_close(_optional_text(body, "hub"))}
            if path == "/faults/steal":
                group = _optional_text(body, "consumer_group") or "$Default"
                return 200, {"stolen": faults.steal(_text(body, "hub"), _text(body, "partition"), group)}
            if path == "/faults/partitions":
                count = body.get("count")
                if isinstance(count, bool) or not isinstance(count, int):
                    raise ValueError(f"'count' must be a whole number, got {count!r}")
                faults.add_partitions(_text(body, "hub"), count)
                return 200, {"partition_count": count}
            if path == "/faults/promote":
                return 200, faults.promote()
            faults.clear()
            return 200, {"active": faults.active}
        except (RxHubsError, ValueError) as exc:
            return 400, {"error": str(exc)}
        except Exception as exc:  # a bug must not kill the emulator; the caller gets one line
            _LOG.exception("fault control: %s failed", path)
            return 500, {"error": f"{type(exc).__name__}: {exc}"}


async def _read_request(reader: asyncio.StreamReader) -> tuple[str, str, dict[str, Any]]:
    line = (await reader.readline()).decode("latin-1").strip()
    parts = line.split()
    if len(parts) != 3 or not parts[2].startswith("HTTP/"):
        raise ValueError("not an HTTP request")
    length = 0
    while True:
        header = (await reader.readline()).decode("latin-1").strip()
        if not header:
            break
        name, _, value = header.partition(":")
        if name.strip().lower() == "content-length":
            try:
                length = int(value.strip())
            except ValueError:
                raise ValueError("bad Content-Length") from None
    if not 0 <= length <= MAX_BODY:
        raise ValueError(f"the body must be at most {MAX_BODY} bytes")
    raw = await reader.readexactly(length) if length else b""
    try:
        body = json.loads(raw) if raw.strip() else {}
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise ValueError("the body must be a JSON object") from None
    if not isinstance(body, dict):
        raise ValueError("the body must be a JSON object")
    return parts[0].upper(), parts[1], body


def _text(body: dict[str, Any], key: str) -> str:
    value = body.get(key)
    if not isinstance(value, str) or not value:
        raise ValueError(f"{key!r} must be a non-empty string, got {value!r}")
    return value


def _optional_text(body: dict[str, Any], key: str) -> str | None:
    return None if body.get(key) is None else _text(body, key)


def _number(body: dict[str, Any], key: str) -> float:
    value = body.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{key!r} must be a number, got {value!r}")
    return float(value)
