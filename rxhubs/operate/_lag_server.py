"""``LagServer``: a consumer group's lag over HTTP, for a Prometheus scrape or KEDA's ``metrics-api`` scaler.

It runs in a thread of its own, with its own event loop, hub and store (made there by the factories it is
given), so it serves the same way beside ``rxhubs.run``, ``run_workers`` (whose parent process has no event
loop) or anything else. Opt-in, bound to 127.0.0.1 unless told otherwise.

* ``GET /metrics``: Prometheus text format (``prometheus_client`` writes it);
* ``GET /lag``: JSON, the totals at the top (``lag``, ``lag_seconds``, ``stalls``) and each partition under
  ``partitions``.

Besides the lag, both carry the dead paths (``stalls``: links silent past the idle timeout, reconnected) that
receivers *in this process* noticed per partition (``rxhubs_receive_stalls_total``). Under ``--workers`` the
server runs in the parent, which reads nothing: there the count stays 0 (use ``rxhubs.otel``'s
``rxhubs.receive.stalls`` for the workers').

A scrape computes the lag afresh, unless the last computation is younger than ``min_interval`` seconds (scrapes
in a burst share one). A failure (the store or hub unreachable) answers 503 with one line, and the next scrape
tries again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from rxhubs.errors import ConfigurationError, RxHubsError
from rxhubs.operate._lag import PartitionLag, _Times, group_lag, lag_json, prometheus_text
from rxhubs.transport._liveness import stall_counts

__all__ = ["LagServer", "parse_address"]

log = logging.getLogger("rxhubs.operate")
_TEXT = "text/plain; version=0.0.4; charset=utf-8"


def parse_address(address: str) -> tuple[str, int]:
    """``"9464"`` or ``"HOST:PORT"`` -> (host, port); a bare port binds 127.0.0.1.

    Example:
        >>> parse_address("9464"), parse_address("0.0.0.0:9464")
        (('127.0.0.1', 9464), ('0.0.0.0', 9464))
    """
    host, _, port = address.rpartition(":")
    if not port.isdigit() or int(port) > 65535:
        raise ConfigurationError(f"a lag endpoint is PORT or HOST:PORT (e.g. 127.0.0.1:9464), got {address!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


class LagServer:
    """Serve a consumer group's lag over HTTP from a background thread (see the module docstring).

    Args:
        hub_factory: Makes the hub (called in the server's thread), e.g.
            ``lambda: rxhubs.EventHub.from_connection_string(conn)``.
        store_factory: Makes the checkpoint store (called in the server's thread).
        consumer_group: The group whose lag is served.
        host: The address to bind (default 127.0.0.1: this machine only).
        port: The port (0: a free one; see :attr:`port`).
        min_interval: Scrapes closer together than this share one computation.
        read_group: The consumer group used to read the one event per partition that gives the lag in seconds.

    Example:
        >>> from rxhubs.stores import InMemoryCheckpointStore
        >>> from rxhubs.testing import InMemoryEventHub
        >>> import urllib.request, json
        >>> with LagServer(InMemoryEventHub, InMemoryCheckpointStore, "$Default") as server:
        ...     body = urllib.request.urlopen(server.url + "/lag").read()
        >>> json.loads(body)["lag"]
        0
    """

    def __init__(
        self,
        hub_factory: Callable[[], Any],
        store_factory: Callable[[], Any],
        consumer_group: str = "$Default",
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        min_interval: float = 2.0,
        read_group: str | None = None,
    ) -> None:
        if not isinstance(port, int) or isinstance(port, bool) or not 0 <= port <= 65535:
            raise ConfigurationError(f"port must be 0..65535, got {port!r}")
        self.hub_factory, self.store_factory = hub_factory, store_factory
        self.consumer_group, self.host, self.read_group = consumer_group, host, read_group
        self.min_interval = min_interval
        self.port = port
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._cache: tuple[float, list[PartitionLag]] | None = None
        self._name = ""
        self._times = _Times()
        self._lock = asyncio.Lock()

    @property
    def url(self) -> str:
        """``http://host:port`` of the running server."""
        return f"http://{self.host}:{self.port}"

    def start(self) -> LagServer:
        """Start serving; returns once the port is bound (or raises why it could not be)."""
        if self._thread is not None:
            return self
        self._thread = threading.Thread(target=self._run, name="rxhubs-lag-server", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            self._thread.join()
            self._thread = None
            raise ConfigurationError(f"lag endpoint {self.host}:{self.port}: {self._error}") from self._error
        log.info("lag of %s served at %s/metrics and %s/lag", self.consumer_group, self.url, self.url)
        return self

    def stop(self) -> None:
        """Stop serving and close the hub and store."""
        thread, loop, stop = self._thread, self._loop, self._stop
        if thread is None or loop is None or stop is None:
            return
        loop.call_soon_threadsafe(stop.set)
        thread.join()
        self._thread = None

    def __enter__(self) -> LagServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- the server's thread ---------------------------------------------------------------------------------
    def _stalls(self) -> dict[str, int]:
        """Dead paths this process noticed per partition of the group (0 in a parent of ``--workers``)."""
        return stall_counts(self._name, self.consumer_group)

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:  # reported by start() when it happens before the port is bound
            self._error = self._error or exc
            self._ready.set()

    async def _serve(self) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        hub = store = None
        try:
            hub, store = self.hub_factory(), self.store_factory()
            self._name = hub.eventhub_name
            server = await asyncio.start_server(lambda r, w: self._answer(r, w, hub, store), self.host, self.port)
        except Exception as exc:
            self._error = exc
            self._ready.set()
            await _close(hub, store)
            return
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        try:
            async with server:
                await self._stop.wait()
        finally:
            await _close(hub, store)

    async def _rows(self, hub: Any, store: Any) -> list[PartitionLag]:
        async with self._lock:
            now = time.monotonic()
            if self._cache is not None and now - self._cache[0] < self.min_interval:
                return self._cache[1]
            rows = await group_lag(hub, store, self.consumer_group, read_group=self.read_group, times=self._times)
            self._cache = (time.monotonic(), rows)
            return rows

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, hub: Any, store: Any) -> None:
        try:
            request = (await reader.readline()).decode("latin-1").split()
            while (await reader.readline()).strip():
                pass  # headers
            path = request[1].split("?")[0] if len(request) >= 2 else ""
            if len(request) < 2 or request[0] not in ("GET", "HEAD"):
                status, kind, body = "405 Method Not Allowed", _TEXT, b"GET /metrics or /lag\n"
            elif path not in ("/metrics", "/lag"):
                status, kind, body = "404 Not Found", _TEXT, b"GET /metrics (Prometheus) or /lag (JSON)\n"
            else:
                try:
                    rows = await self._rows(hub, store)
                except RxHubsError as exc:
                    status, kind, body = "503 Service Unavailable", _TEXT, f"{exc}\n".encode()
                else:
                    status = "200 OK"
                    if path == "/metrics":
                        kind, body = _TEXT, prometheus_text(self._name, self.consumer_group, rows, self._stalls())
                    else:
                        kind = "application/json"
                        body = lag_json(self._name, self.consumer_group, rows, stalls=self._stalls()).encode()
            head = (f"HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {len(body)}\r\n"
                    "Connection: close\r\n\r\n")
            writer.write(head.encode() + (body if request[:1] != ["HEAD"] else b""))
            await writer.drain()
        except (ConnectionError, IndexError, UnicodeDecodeError) as exc:
            log.debug("lag endpoint: a request failed: %r", exc)
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()


async def _close(*resources: Any) -> None:
    for resource in resources:
        close = getattr(resource, "close", None)
        if close is not None:
            with contextlib.suppress(Exception):
                result = close()
                if asyncio.iscoroutine(result):
                    await result
