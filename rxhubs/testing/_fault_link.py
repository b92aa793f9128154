"""One proxied connection of :class:`~rxhubs.testing.FaultProxy`: its two pumps and the faults they apply.

Each direction has a reader task (reads every chunk as it arrives, stamps it, drops it when the direction is
silent) and a writer task (delays, slices, throttles and cuts it, in order). Faults are read from the shared
:class:`Faults` at every chunk, so a change applies to open connections at once.
"""

from __future__ import annotations

import asyncio
import random
import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass, field

from rxhubs.testing._fault_corrupt import FrameTracker

UP, DOWN = "upstream", "downstream"
DIRECTIONS = (UP, DOWN)
CHUNK = 65536
_EOF = object()
_RESET = object()


@dataclass
class Faults:
    """The faults in force; only the event loop's thread changes them."""

    latency: dict[str, tuple[float, float]] = field(default_factory=dict)
    bandwidth: dict[str, int] = field(default_factory=dict)
    slices: dict[str, tuple[int, int, float]] = field(default_factory=dict)
    cut: dict[str, tuple[int, int]] = field(default_factory=dict)  # direction -> (bytes, generation)
    corrupt: dict[str, tuple[str, int]] = field(default_factory=dict)  # direction -> (kind, frames left)
    blackhole: set[str] = field(default_factory=set)
    silenced: set[str] = field(default_factory=set)  # for the mode only: open connections carry their own flags
    reset: bool = False
    refuse: bool = False

    def clear(self) -> None:
        """Back to no faults, in place (the open connections hold this very object)."""
        self.latency, self.bandwidth, self.slices, self.cut, self.corrupt = {}, {}, {}, {}, {}
        self.blackhole, self.silenced = set(), set()
        self.reset = self.refuse = False


@dataclass
class Counters:
    """What the proxy has seen; :class:`ProxyStats` is its frozen snapshot."""

    accepted: int = 0
    open: int = 0
    reset: int = 0
    cut: int = 0
    corrupted: int = 0
    forwarded: dict[str, int] = field(default_factory=lambda: dict.fromkeys(DIRECTIONS, 0))
    dropped: dict[str, int] = field(default_factory=lambda: dict.fromkeys(DIRECTIONS, 0))
    writes: dict[str, int] = field(default_factory=lambda: dict.fromkeys(DIRECTIONS, 0))


def rst(writer: asyncio.StreamWriter) -> None:
    """Close ``writer``'s socket with a TCP RST (SO_LINGER on, zero timeout), discarding unsent bytes."""
    transport = writer.transport
    sock = transport.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:  # already gone
            pass
    transport.abort()


class Link:
    """A client connection and its upstream connection, pumped both ways through the faults."""

    def __init__(self, client: tuple[asyncio.StreamReader, asyncio.StreamWriter],
                 target: tuple[asyncio.StreamReader, asyncio.StreamWriter], *, faults: Faults,
                 counters: Counters, rng: random.Random, silent: set[str], on_closed: Callable[[Link], None]) -> None:
        self._ends = {UP: (client[0], target[1]), DOWN: (target[0], client[1])}
        self._writers = (client[1], target[1])
        self._faults, self._counters, self._rng = faults, counters, rng
        self.silent = set(silent)
        self._cut_left: dict[str, tuple[int, int]] = {}  # direction -> (bytes left, generation)
        self._link_free = dict.fromkeys(DIRECTIONS, 0.0)
        self._last_due = dict.fromkeys(DIRECTIONS, 0.0)
        self._pending = 4
        self._frames = {direction: FrameTracker() for direction in DIRECTIONS}
        self.closed = False
        self._on_closed = on_closed
        self.tasks: list[asyncio.Task[None]] = []
        for direction in DIRECTIONS:
            queue: asyncio.Queue[object] = asyncio.Queue()
            self.tasks.append(asyncio.ensure_future(self._read(direction, queue)))
            self.tasks.append(asyncio.ensure_future(self._write(direction, queue)))

    def close(self, *, reset: bool) -> None:
        """Close both sockets (with an RST when ``reset``) and stop the pumps."""
        if self.closed:
            return
        self.closed = True
        for writer in self._writers:
            if reset:
                rst(writer)
            else:
                writer.transport.abort()
        current = asyncio.current_task()
        for task in self.tasks:
            if task is not current:
                task.cancel()
        self._counters.open -= 1
        self._on_closed(self)

    def _silent(self, direction: str) -> bool:
        return direction in self.silent or direction in self._faults.blackhole

    def _drop(self, direction: str, size: int) -> None:
        self._counters.dropped[direction] += size

    def _done(self) -> None:
        self._pending -= 1
        if self._pending == 0:
            self.close(reset=False)

    async def _read(self, direction: str, queue: asyncio.Queue[object]) -> None:
        reader = self._ends[direction][0]
        while True:
            try:
                data = await reader.read(CHUNK)
            except OSError:
                data = None
            if self._silent(direction):  # swallowed: bytes, FIN and RST alike
                if not data:
                    queue.put_nowait(_EOF)
                    return self._done()
                self._drop(direction, len(data))
                continue
            if not data:
                queue.put_nowait(_EOF if data == b"" else _RESET)
                return self._done()
            data = self._tracked(direction, data)
            queue.put_nowait((asyncio.get_running_loop().time(), data))

    def _tracked(self, direction: str, data: bytes) -> bytes:
        """``data`` through the direction's frame tracker: a transfer frame damaged while ``corrupt`` is armed."""
        armed = self._faults.corrupt.get(direction)
        data, damaged = self._frames[direction].feed(data, armed[0] if armed else None)
        if damaged and armed:
            self._counters.corrupted += 1
            if armed[1] > 1:
                self._faults.corrupt[direction] = (armed[0], armed[1] - 1)
            else:
                self._faults.corrupt.pop(direction, None)
        return data

    async def _write(self, direction: str, queue: asyncio.Queue[object]) -> None:
        writer = self._ends[direction][1]
        while True:
            item = await queue.get()
            if item is _RESET:
                return self.close(reset=True)
            if item is _EOF:
                if not self._silent(direction) and writer.can_write_eof() and not writer.transport.is_closing():
                    try:
                        writer.write_eof()
                    except OSError:
                        pass
                return self._done()
            assert isinstance(item, tuple)
            read_at, data = item
            await self._delay(direction, read_at)
            if not await self._forward(direction, writer, data):
                return None

    async def _delay(self, direction: str, read_at: float) -> None:
        latency = self._faults.latency.get(direction)
        if latency is None:
            return
        seconds, jitter = latency
        wait = max(0.0, seconds + (self._rng.uniform(-jitter, jitter) if jitter else 0.0))
        due = max(read_at + wait, self._last_due[direction])  # jitter never reorders
        self._last_due[direction] = due
        pause = due - asyncio.get_running_loop().time()
        if pause > 0:
            await asyncio.sleep(pause)

    def _pieces(self, direction: str, data: bytes) -> tuple[list[bytes], float]:
        sliced = self._faults.slices.get(direction)
        if sliced is not None:
            low, high, delay = sliced
            pieces, at = [], 0
            while at < len(data):
                size = self._rng.randint(low, high)
                pieces.append(data[at:at + size])
                at += size
            return pieces, delay
        rate = self._faults.bandwidth.get(direction)
        if rate is not None:
            step = max(1, min(rate // 50, CHUNK))  # about 20 ms of the rate per write
            return [data[at:at + step] for at in range(0, len(data), step)], 0.0
        return [data], 0.0

    def _cut_budget(self, direction: str) -> int | None:
        cut = self._faults.cut.get(direction)
        if cut is None:
            return None
        size, generation = cut
        left = self._cut_left.get(direction)
        if left is None or left[1] != generation:
            self._cut_left[direction] = left = (size, generation)
        return left[0]

    async def _forward(self, direction: str, writer: asyncio.StreamWriter, data: bytes) -> bool:
        """Write ``data`` through the faults; False when the link was closed (cut) on the way."""
        loop = asyncio.get_running_loop()
        pieces, delay = self._pieces(direction, data)
        for index, piece in enumerate(pieces):
            if self._silent(direction):
                self._drop(direction, sum(len(rest) for rest in pieces[index:]))
                return True
            budget = self._cut_budget(direction)
            if budget is not None and budget <= len(piece):
                piece = piece[:budget]
                if piece:
                    writer.write(piece)
                    self._counted(direction, len(piece))
                self._counters.cut += 1
                self.close(reset=True)
                return False
            if budget is not None:
                self._cut_left[direction] = (budget - len(piece), self._cut_left[direction][1])
            rate = self._faults.bandwidth.get(direction)
            if rate is not None:  # the piece arrives when the link would have carried it
                done = max(loop.time(), self._link_free[direction]) + len(piece) / rate
                self._link_free[direction] = done
                await asyncio.sleep(max(0.0, done - loop.time()))
            if writer.transport.is_closing():  # the peer went away: tell the other side as abruptly
                self.close(reset=True)
                return False
            writer.write(piece)
            self._counted(direction, len(piece))
            try:
                await writer.drain()
            except OSError:
                self.close(reset=True)
                return False
            if delay and index < len(pieces) - 1:
                await asyncio.sleep(delay)
        return True

    def _counted(self, direction: str, size: int) -> None:
        self._counters.forwarded[direction] += size
        self._counters.writes[direction] += 1


class _Nowhere(asyncio.Transport):
    """The far end of a blackholed connection: accepts nothing, reads nothing, never closes by itself."""

    def __init__(self) -> None:
        super().__init__()
        self._closing = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        pass

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        self._closing = True

    def abort(self) -> None:
        self._closing = True

    def can_write_eof(self) -> bool:
        return False

    def get_extra_info(self, name: str, default: object = None) -> object:
        return default


def nowhere_writer() -> asyncio.StreamWriter:
    """A writer to :class:`_Nowhere`, the stand-in target of a blackholed connection."""
    protocol = asyncio.StreamReaderProtocol(asyncio.StreamReader())
    return asyncio.StreamWriter(_Nowhere(), protocol, None, asyncio.get_running_loop())
