"""A loopback TCP proxy that breaks the network on demand: :class:`FaultProxy` and its :class:`ProxyStats`.

Toxiproxy's faults (see docs/testing.md) in about 400 lines of asyncio, with no server to install: put the proxy
between a client and a server on 127.0.0.1, point the client at ``proxy.address`` and call ``silence()``,
``reset()``, ``latency()``... while the test runs.
"""

from __future__ import annotations

import asyncio
import logging
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType

from rxhubs.errors import ConfigurationError
from rxhubs.testing._fault_args import (
    directions,
    latency_text,
    loopback,
    per_direction,
    positive_int,
    slice_text,
)
from rxhubs.testing._fault_corrupt import CorruptFaults
from rxhubs.testing._fault_link import DOWN, UP, Counters, Faults, Link, nowhere_writer, rst
from rxhubs.testing._fault_shaping import ShapingFaults

log = logging.getLogger("rxhubs.testing.faults")

_CHANGE_TIMEOUT = 5.0


@dataclass(frozen=True)
class ProxyStats:
    """A snapshot of what a :class:`FaultProxy` has done, for tests to assert that a fault was felt.

    Upstream is client to target, downstream target to client. ``refused`` is whether new connects are being
    refused now (a bool: the kernel refuses them, the proxy never sees them). ``writes_*`` count socket writes,
    which :meth:`FaultProxy.slice` multiplies.

    Example:
        >>> ProxyStats().connections_accepted
        0
    """

    connections_accepted: int = 0
    connections_open: int = 0
    connections_reset: int = 0
    connections_cut: int = 0
    bytes_forwarded_up: int = 0
    bytes_forwarded_down: int = 0
    bytes_dropped_up: int = 0
    bytes_dropped_down: int = 0
    refused: bool = False
    writes_up: int = 0
    writes_down: int = 0
    frames_corrupted: int = 0


class FaultProxy(ShapingFaults, CorruptFaults):
    """A loopback TCP proxy in front of ``target_host:target_port`` whose network can be broken on demand.

    Every fault applies to the connections open now and to new ones until :meth:`heal`, except
    :meth:`silence` (open connections only). Faults combine (latency with bandwidth, say); a new fault of a kind
    replaces the old one of that kind. ``direction`` is ``"both"``, ``"upstream"`` (client to target) or
    ``"downstream"`` (target to client). The fault methods are plain functions, safe to call from the event
    loop's thread or any other (a change made from another thread is in force when the call returns). Each
    change is logged at INFO on ``rxhubs.testing.faults``.

    Silent connections keep *reading* and discard what they read, so the sender's writes keep succeeding (a
    real black-holed path would fill the window and block them eventually); their FIN and RST are swallowed too.
    A connection silenced or blackholed stays silent after :meth:`heal`: a byte stream with a hole in it would be
    a corruption no network produces, and detecting the dead peer (keepalives, idle timeouts) is what those
    faults test. Connections accepted while blackholed never connect upstream.

    ``seed`` drives latency jitter and slice sizes: the same seed and the same traffic give the same sizes.

    Example:
        >>> import asyncio
        >>> async def main() -> str:
        ...     async def echo(reader, writer):
        ...         writer.write(await reader.read(100))
        ...         await writer.drain()
        ...         writer.close()
        ...     server = await asyncio.start_server(echo, "127.0.0.1", 0)
        ...     port = server.sockets[0].getsockname()[1]
        ...     async with FaultProxy("127.0.0.1", port, seed=1) as proxy:
        ...         proxy.latency(0.01)
        ...         reader, writer = await asyncio.open_connection(proxy.host, proxy.port)
        ...         writer.write(b"ping")
        ...         answer = await reader.read(100)
        ...         writer.close()
        ...         await writer.wait_closed()
        ...         mode = proxy.mode
        ...     server.close()
        ...     await server.wait_closed()
        ...     return f"{answer!r} {mode}"
        >>> asyncio.run(main())
        "b'ping' latency(0.01s,both)"
    """

    def __init__(self, target_host: str, target_port: int, *, host: str = "127.0.0.1", port: int = 0,
                 seed: int | None = None) -> None:
        self.host = loopback(host)
        self.port = positive_int("port", port, 0)
        if self.port > 65535 or not 1 <= positive_int("target_port", target_port) <= 65535:
            raise ConfigurationError(f"ports must be below 65536, got {port} and {target_port}")
        self.target_host, self.target_port = target_host, target_port
        self._rng = random.Random(seed)
        self._faults = Faults()
        self._counters = Counters()
        self._links: set[Link] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._connecting: list[set[str]] = []  # the silent directions of accepted connections still connecting
        self._server: asyncio.AbstractServer | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._generation = 0
        self._stopping = False

    @property
    def address(self) -> str:
        """``host:port`` of the proxy, for a connection string or ``open_connection``."""
        return f"{self.host}:{self.port}"

    @property
    def mode(self) -> str:
        """The faults in force, e.g. ``"pass"``, ``"silent(both)"`` or ``"latency(0.2s,both)+bandwidth(...)"``."""
        faults, parts = self._faults, []
        if faults.refuse:
            parts.append("refuse")
        if faults.reset:
            parts.append("reset")
        if faults.silenced:
            parts.append(f"silent({per_direction(dict.fromkeys(sorted(faults.silenced, reverse=True), ''))})")
        if faults.blackhole:
            parts.append(f"blackhole({per_direction(dict.fromkeys(sorted(faults.blackhole, reverse=True), ''))})")
        if faults.latency:
            parts.append(f"latency({per_direction({d: latency_text(*v) for d, v in faults.latency.items()})})")
        if faults.bandwidth:
            parts.append(f"bandwidth({per_direction({d: f'{v}B/s' for d, v in faults.bandwidth.items()})})")
        if faults.slices:
            parts.append(f"slice({per_direction({d: slice_text(*v) for d, v in faults.slices.items()})})")
        if faults.cut:
            parts.append(f"cut_after({per_direction({d: f'{v[0]}B' for d, v in faults.cut.items()})})")
        if faults.corrupt:
            parts.append(f"corrupt({per_direction({d: f'{v[0]} x{v[1]}' for d, v in faults.corrupt.items()})})")
        return "+".join(parts) or "pass"

    @property
    def stats(self) -> ProxyStats:
        """A snapshot of the counters (see :class:`ProxyStats`)."""
        c = self._counters
        return ProxyStats(
            connections_accepted=c.accepted, connections_open=c.open, connections_reset=c.reset,
            connections_cut=c.cut, bytes_forwarded_up=c.forwarded[UP], bytes_forwarded_down=c.forwarded[DOWN],
            bytes_dropped_up=c.dropped[UP], bytes_dropped_down=c.dropped[DOWN], refused=self._faults.refuse,
            writes_up=c.writes[UP], writes_down=c.writes[DOWN], frames_corrupted=c.corrupted)

    def __repr__(self) -> str:
        return (f"FaultProxy({self.address} -> {self.target_host}:{self.target_port}, mode={self.mode!r})")

    async def __aenter__(self) -> FaultProxy:
        return await self.start()

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        traceback: TracebackType | None) -> None:
        await self.stop()

    async def start(self) -> FaultProxy:
        """Bind ``host:port`` (``port`` 0: a free port, then in :attr:`port`) and start accepting.

        Returns:
            The proxy itself.

        Raises:
            ConfigurationError: The proxy is already running or the port cannot be bound.
        """
        if self._server is not None or self._loop is not None:
            raise ConfigurationError("the fault proxy is already running")
        self._loop = asyncio.get_running_loop()
        self._stopping = False
        try:
            await self._listen()
        except OSError as exc:
            self._loop = None
            raise ConfigurationError(f"the fault proxy cannot bind {self.address}: {exc}") from exc
        log.info("fault proxy %s -> %s:%s started", self.address, self.target_host, self.target_port)
        return self

    async def stop(self) -> None:
        """Stop accepting, close every connection and wait for the pumps to end. Safe to call twice."""
        self._stopping = True
        if self._server is not None:
            self._server.close()
            self._server = None
        tasks = {task for link in self._links for task in link.tasks} | self._tasks
        for link in list(self._links):
            link.close(reset=False)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=_CHANGE_TIMEOUT)
        self._links.clear()
        self._tasks.clear()
        self._loop = None

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(self._accepted, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    def _accepted(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._counters.accepted += 1
        if self._stopping:
            writer.transport.abort()
            return
        if self._faults.reset:
            self._counters.reset += 1
            rst(writer)
            return
        silent = set(self._faults.blackhole)
        self._connecting.append(silent)
        task = asyncio.ensure_future(self._connect(reader, writer, silent, blackholed=bool(silent)))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, silent: set[str], *,
                       blackholed: bool) -> None:
        try:
            target = await self._open_target(blackholed=blackholed)
        except OSError as exc:
            log.info("fault proxy %s: target %s:%s unreachable (%s)", self.address, self.target_host,
                     self.target_port, exc)
            rst(writer)
            return
        finally:
            self._connecting.remove(silent)
        if self._stopping or self._faults.reset:  # changed while connecting
            self._counters.reset += not self._stopping
            rst(writer)
            rst(target[1])
            return
        self._counters.open += 1
        link = Link((reader, writer), target, faults=self._faults, counters=self._counters, rng=self._rng,
                    silent=silent, on_closed=self._links.discard)
        self._links.add(link)

    async def _open_target(self, *, blackholed: bool) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if blackholed:  # nothing would get through: hold the client's socket open, reading and dropping
            return asyncio.StreamReader(), nowhere_writer()
        return await asyncio.open_connection(self.target_host, self.target_port)

    # --- the faults ---------------------------------------------------------------------------------------

    def silence(self, direction: str = "both") -> None:
        """Open connections go silent: their bytes (and FIN, RST) are dropped, their sockets kept open.

        A NAT that forgot the flow, a peer that froze. New connections pass. Stays in force for those
        connections after :meth:`heal`.

        Args:
            direction: ``"both"``, ``"upstream"`` or ``"downstream"``.

        Example:
            >>> FaultProxy("127.0.0.1", 5672).silence("downstream")
        """
        chosen = directions(direction)

        def change() -> None:
            self._faults.silenced.update(chosen)
            for silent in [link.silent for link in self._links] + self._connecting:
                silent.update(chosen)
        self._change(change)

    def blackhole(self, direction: str = "both") -> None:
        """Open and new connections go silent; new ones are accepted (and never connect upstream).

        Args:
            direction: ``"both"``, ``"upstream"`` or ``"downstream"``.

        Example:
            >>> FaultProxy("127.0.0.1", 5672).blackhole()
        """
        chosen = directions(direction)

        def change() -> None:
            self._faults.blackhole = set(chosen)
            for silent in [link.silent for link in self._links] + self._connecting:
                silent.update(chosen)
        self._change(change)

    def reset(self) -> None:
        """RST every open connection (both sides) now, and each new one right after accept, until :meth:`heal`.

        Example:
            >>> FaultProxy("127.0.0.1", 5672).reset()
        """
        def change() -> None:
            self._faults.reset = True
            for link in list(self._links):
                self._counters.reset += 1
                link.close(reset=True)
        self._change(change)

    def refuse(self) -> None:
        """Stop accepting: new connects are refused by the kernel (ECONNREFUSED); open connections are untouched.

        Example:
            >>> FaultProxy("127.0.0.1", 5672).refuse()
        """
        def change() -> None:
            self._faults.refuse = True
            if self._server is not None:
                self._server.close()
                self._server = None
        self._change(change)

    def heal(self) -> None:
        """Back to pass-through for new connections and open ones still alive (silenced ones stay silent).

        Example:
            >>> FaultProxy("127.0.0.1", 5672).heal()
        """
        def change() -> None:
            refused = self._faults.refuse
            self._faults.clear()
            if refused and self._loop is not None and not self._stopping:
                task = asyncio.ensure_future(self._relisten())
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        self._change(change)

    async def _relisten(self) -> None:
        try:
            await self._listen()
        except OSError as exc:  # the port was taken meanwhile: nothing to accept on
            log.warning("fault proxy %s cannot listen again: %s", self.address, exc)

    def _change(self, change: Callable[[], None]) -> None:
        """Run ``change`` on the loop's thread (now if this is it), then log the new mode."""
        loop = self._loop
        try:
            here = asyncio.get_running_loop() is loop
        except RuntimeError:
            here = False
        if loop is None or here or loop.is_closed():
            change()
        else:
            done = threading.Event()

            def run() -> None:
                try:
                    change()
                finally:
                    done.set()
            loop.call_soon_threadsafe(run)
            done.wait(_CHANGE_TIMEOUT)
        log.info("fault proxy %s: %s", self.address, self.mode)
