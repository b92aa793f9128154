"""FaultProxy: each fault felt by a real socket client through a loopback echo server, and by the azure SDK."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncIterator

import pytest
from azure.eventhub import EventData
from azure.eventhub.aio import EventHubProducerClient
from azure.eventhub.exceptions import EventHubError

from rxhubs.emulator import Emulator
from rxhubs.errors import ConfigurationError
from rxhubs.testing import FaultProxy, ProxyStats

pytestmark = pytest.mark.timeout(60)

QUIET = 0.3  # how long "nothing arrives" is watched for


class Echo(asyncio.Protocol):
    """Echoes every read and records its size."""

    sizes: list[int]

    def __init__(self, sizes: list[int]) -> None:
        self.sizes = sizes

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.sizes.append(len(data))
        self.transport.write(data)

    def eof_received(self) -> None:
        self.sizes.append(-1)  # EOF marker


class EchoServer:
    def __init__(self) -> None:
        self.sizes: list[int] = []
        self.server: asyncio.Server | None = None
        self.port = 0

    async def start(self) -> EchoServer:
        loop = asyncio.get_running_loop()
        self.server = await loop.create_server(lambda: Echo(self.sizes), "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self


@pytest.fixture
async def echo() -> AsyncIterator[EchoServer]:
    server = await EchoServer().start()
    yield server
    assert server.server is not None
    server.server.close()
    await server.server.wait_closed()


@pytest.fixture
async def proxy(echo: EchoServer) -> AsyncIterator[FaultProxy]:
    async with FaultProxy("127.0.0.1", echo.port, seed=7) as started:
        yield started


class Client:
    """A socket client of the proxy; closed by the ``connect`` fixture."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    async def round_trip(self, data: bytes) -> bytes:
        self.writer.write(data)
        await self.writer.drain()
        return await asyncio.wait_for(self.reader.readexactly(len(data)), 10)

    async def nothing_arrives(self) -> None:
        """Neither bytes nor EOF within QUIET seconds."""
        with pytest.raises(TimeoutError):
            got = await asyncio.wait_for(self.reader.read(100), QUIET)
            pytest.fail(f"expected silence, got {got!r}")


@pytest.fixture
async def connect(proxy: FaultProxy) -> AsyncIterator[object]:
    clients: list[Client] = []

    async def open_client() -> Client:
        client = Client(*await asyncio.open_connection(proxy.host, proxy.port))
        clients.append(client)
        return client

    yield open_client
    for client in clients:
        client.writer.close()
        try:
            await client.writer.wait_closed()
        except OSError:
            pass


async def until(condition: object, timeout: float = 10.0) -> None:
    assert callable(condition)
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


async def test_pass_forwards_both_ways_and_counts(proxy: FaultProxy, connect: object) -> None:
    client = await connect()  # type: ignore[operator]
    assert await client.round_trip(b"hello") == b"hello"
    stats = proxy.stats
    assert (stats.connections_accepted, stats.connections_open) == (1, 1)
    assert (stats.bytes_forwarded_up, stats.bytes_forwarded_down) == (5, 5)
    assert proxy.mode == "pass" and proxy.address == f"127.0.0.1:{proxy.port}" and proxy.port > 0
    assert repr(proxy) == f"FaultProxy(127.0.0.1:{proxy.port} -> 127.0.0.1:{proxy.target_port}, mode='pass')"


async def test_silence_mutes_open_connections_only(proxy: FaultProxy, connect: object,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    old = await connect()  # type: ignore[operator]
    assert await old.round_trip(b"a") == b"a"
    with caplog.at_level(logging.INFO, logger="rxhubs.testing.faults"):
        proxy.silence()
    assert proxy.mode == "silent(both)"
    assert f"fault proxy {proxy.address}: silent(both)" in caplog.messages
    old.writer.write(b"lost")
    await old.nothing_arrives()  # no bytes, no EOF: the socket stays open
    assert proxy.stats.bytes_dropped_up == 4 and proxy.stats.connections_open == 1
    new = await connect()  # type: ignore[operator]
    assert await new.round_trip(b"fresh") == b"fresh"
    proxy.heal()  # a silenced connection stays silent: its stream has a hole
    old.writer.write(b"more")
    await old.nothing_arrives()
    assert proxy.stats.bytes_dropped_up == 8


async def test_silence_downstream_drops_the_echo(proxy: FaultProxy, connect: object, echo: EchoServer) -> None:
    client = await connect()  # type: ignore[operator]
    proxy.silence("downstream")
    client.writer.write(b"xyz")
    await client.nothing_arrives()
    assert echo.sizes == [3]  # it got through upstream, the answer was dropped
    assert proxy.stats.bytes_dropped_down == 3 and proxy.stats.bytes_dropped_up == 0


async def test_silence_swallows_the_fin_too(proxy: FaultProxy, connect: object, echo: EchoServer) -> None:
    client = await connect()  # type: ignore[operator]
    assert await client.round_trip(b"a") == b"a"
    proxy.silence("upstream")
    client.writer.write_eof()
    await client.nothing_arrives()
    assert echo.sizes == [1]  # the server never saw the EOF
    assert proxy.stats.connections_open == 1


async def test_blackhole_mutes_new_connections_too(proxy: FaultProxy, connect: object, echo: EchoServer) -> None:
    old = await connect()  # type: ignore[operator]
    assert await old.round_trip(b"a") == b"a"
    proxy.blackhole()
    assert proxy.mode == "blackhole(both)"
    new = await connect()  # type: ignore[operator]
    new.writer.write(b"into the void")
    old.writer.write(b"gone")
    await new.nothing_arrives()
    await old.nothing_arrives()
    assert echo.sizes == [1]
    await until(lambda: proxy.stats.bytes_dropped_up == len(b"into the void") + 4)
    assert proxy.stats.connections_accepted == 2 and proxy.stats.connections_open == 2


async def test_reset_rsts_open_and_new_connections(proxy: FaultProxy, connect: object) -> None:
    old = await connect()  # type: ignore[operator]
    assert await old.round_trip(b"a") == b"a"
    proxy.reset()
    with pytest.raises(ConnectionResetError):
        await asyncio.wait_for(old.reader.read(100), 10)
    new = await connect()  # type: ignore[operator]
    with pytest.raises(ConnectionResetError):
        await asyncio.wait_for(new.reader.read(100), 10)
    assert proxy.stats.connections_reset == 2 and proxy.stats.connections_open == 0
    proxy.heal()
    healed = await connect()  # type: ignore[operator]
    assert await healed.round_trip(b"back") == b"back"


async def test_latency_delays_each_direction(proxy: FaultProxy, connect: object) -> None:
    client = await connect()  # type: ignore[operator]
    proxy.latency(0.15)
    assert proxy.mode == "latency(0.15s,both)"
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert await client.round_trip(b"ping") == b"ping"
    assert loop.time() - started >= 0.3
    proxy.heal()
    assert proxy.mode == "pass"


async def test_latency_with_jitter_keeps_order(proxy: FaultProxy, connect: object) -> None:
    client = await connect()  # type: ignore[operator]
    proxy.latency(0.02, jitter=0.02, direction="upstream")
    for index in range(20):
        client.writer.write(bytes([index]))
        await asyncio.sleep(0.002)
    got = await asyncio.wait_for(client.reader.readexactly(20), 10)
    assert got == bytes(range(20))


async def test_bandwidth_takes_at_least_size_over_rate(proxy: FaultProxy, connect: object) -> None:
    client = await connect()  # type: ignore[operator]
    proxy.latency(0.05, direction="downstream")
    proxy.bandwidth(20_000, direction="upstream")  # combines with the latency
    assert proxy.mode == "latency(0.05s,downstream)+bandwidth(20000B/s,upstream)"
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert await client.round_trip(bytes(10_000)) == bytes(10_000)
    assert loop.time() - started >= 10_000 / 20_000 + 0.05


async def test_slice_forwards_in_small_writes(proxy: FaultProxy, connect: object, echo: EchoServer) -> None:
    client = await connect()  # type: ignore[operator]
    proxy.slice(2, 5, delay=0.001, direction="upstream")
    data = bytes(range(100))
    assert await client.round_trip(data) == data
    assert sum(echo.sizes) == 100 and len(echo.sizes) >= 20
    assert all(2 <= size <= 5 for size in echo.sizes[:-1]) and 1 <= echo.sizes[-1] <= 5
    assert proxy.stats.writes_up == len(echo.sizes)


async def _slice_sizes(seed: int) -> list[int]:
    echo = await EchoServer().start()
    assert echo.server is not None
    async with FaultProxy("127.0.0.1", echo.port, seed=seed) as proxy:
        proxy.slice(1, 7, delay=0.001, direction="upstream")
        reader, writer = await asyncio.open_connection(proxy.host, proxy.port)
        writer.write(bytes(120))
        await asyncio.wait_for(reader.readexactly(120), 10)
        writer.close()
        await writer.wait_closed()
    echo.server.close()
    await echo.server.wait_closed()
    return echo.sizes


async def test_slice_sizes_follow_the_seed() -> None:
    first, again, other = await _slice_sizes(3), await _slice_sizes(3), await _slice_sizes(4)
    assert first == again
    assert first != other


async def test_cut_after_resets_mid_stream(proxy: FaultProxy, connect: object) -> None:
    client = await connect()  # type: ignore[operator]
    proxy.cut_after(50, direction="downstream")
    client.writer.write(bytes(200))
    got = b""
    with pytest.raises(ConnectionResetError):
        while chunk := await asyncio.wait_for(client.reader.read(1000), 10):
            got += chunk
    assert len(got) <= 50
    assert proxy.stats.connections_cut == 1 and proxy.stats.bytes_forwarded_down == 50
    assert proxy.stats.connections_open == 0


async def test_refuse_then_heal(proxy: FaultProxy, connect: object) -> None:
    open_before = await connect()  # type: ignore[operator]
    proxy.refuse()
    assert proxy.stats.refused and proxy.mode == "refuse"
    with pytest.raises(ConnectionRefusedError):
        await connect()  # type: ignore[operator]
    assert await open_before.round_trip(b"still") == b"still"
    proxy.heal()
    assert not proxy.stats.refused

    async def reconnect() -> Client:
        while True:  # heal listens again in a task: give it a moment
            try:
                return await connect()  # type: ignore[operator,no-any-return]
            except ConnectionRefusedError:
                await asyncio.sleep(0.01)

    again = await asyncio.wait_for(reconnect(), 10)
    assert await again.round_trip(b"ok") == b"ok"


async def test_changes_from_another_thread_are_in_force_on_return(proxy: FaultProxy, connect: object) -> None:
    client = await connect()  # type: ignore[operator]
    await asyncio.to_thread(proxy.silence, "upstream")
    assert proxy.mode == "silent(upstream)"
    client.writer.write(b"x")
    await client.nothing_arrives()
    assert proxy.stats.bytes_dropped_up == 1


async def test_stop_closes_everything_promptly(echo: EchoServer) -> None:
    proxy = await FaultProxy("127.0.0.1", echo.port).start()
    reader, writer = await asyncio.open_connection(proxy.host, proxy.port)
    writer.write(b"a")
    await reader.readexactly(1)
    proxy.blackhole()
    await proxy.stop()
    assert proxy.stats.connections_open == 0
    assert await asyncio.wait_for(reader.read(10), 10) == b""
    writer.close()
    await writer.wait_closed()
    with pytest.raises(ConnectionRefusedError):
        await asyncio.open_connection(proxy.host, proxy.port)


@pytest.mark.parametrize("call", [
    lambda p: p.latency(-1), lambda p: p.latency(0.1, jitter=-0.1), lambda p: p.bandwidth(0),
    lambda p: p.bandwidth(1.5), lambda p: p.silence("sideways"), lambda p: p.slice(0, 3), lambda p: p.slice(5, 3),
    lambda p: p.cut_after(-1), lambda p: p.latency(float("nan")),
])
def test_bad_arguments_raise_configuration_error(call: object) -> None:
    proxy = FaultProxy("127.0.0.1", 5672)
    with pytest.raises(ConfigurationError):
        call(proxy)  # type: ignore[operator]
    assert proxy.mode == "pass"


@pytest.mark.parametrize("host", ["0.0.0.0", "10.0.0.1", "example.com", "::"])
def test_binds_loopback_only(host: str) -> None:
    with pytest.raises(ConfigurationError, match="loopback"):
        FaultProxy("127.0.0.1", 5672, host=host)


def test_stats_is_a_frozen_snapshot() -> None:
    stats = FaultProxy("127.0.0.1", 5672).stats
    assert stats == ProxyStats()
    with pytest.raises(AttributeError):
        stats.connections_open = 1  # type: ignore[misc]


async def test_the_sdk_through_the_proxy_then_reset(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.CRITICAL, logger="azure.eventhub")  # its retries would drown the output
    async with Emulator(hubs={"proxied": 1}) as emulator, FaultProxy("127.0.0.1", emulator.port) as proxy:
        conn = re.sub(r"sb://[^;/]+", f"sb://{proxy.address}", emulator.connection_string("proxied"))
        async with EventHubProducerClient.from_connection_string(conn, retry_total=0) as producer:
            await producer.send_event(EventData(b"through"), partition_id="0")
            props = await producer.get_partition_properties("0")
            assert props["last_enqueued_sequence_number"] == 0
            assert proxy.stats.bytes_forwarded_up > 0 and proxy.stats.bytes_forwarded_down > 0
            proxy.reset()
            with pytest.raises(EventHubError):
                await producer.send_event(EventData(b"lost"), partition_id="0")
        assert proxy.stats.connections_reset >= 1
        props_after = await _partition_properties(emulator.connection_string("proxied"))
        assert props_after["last_enqueued_sequence_number"] == 0  # "lost" never reached the hub


async def _partition_properties(conn: str) -> dict[str, object]:
    async with EventHubProducerClient.from_connection_string(conn) as producer:
        return await producer.get_partition_properties("0")  # type: ignore[no-any-return]
