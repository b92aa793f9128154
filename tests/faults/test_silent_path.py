"""Silent paths (issue 25, "never stop silently"): the network goes dead with no FIN and no RST.

A :class:`~rxhubs.testing.FaultProxy` sits between the consumer and the emulator; events are produced straight
to the emulator. Each test asserts that the fault was felt (bytes dropped by the proxy, a WARNING naming the
partition, a ``TransportError`` in the error hook) and that nothing was lost. Idle and management timeouts are
short here (1.5 s and 1 s): the defaults (10 s) behave the same, ten times slower.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import re
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from reactivex import operators as ops
from reactivex.scheduler.eventloop import AsyncIOScheduler

import rxhubs
from rxhubs._shutdown import Shutdown
from rxhubs.emulator.pytest_plugin import (
    EmulatorFactory,
    emulator_factory,  # noqa: F401  (fixture)
)
from rxhubs.errors import TransportError
from rxhubs.sources import partition_batches
from rxhubs.stores import InMemoryCheckpointStore
from rxhubs.testing import FaultProxy
from rxhubs.transport._direct import DIRECT_VARIABLE
from tests.otel.conftest import Exported, by, exported  # noqa: F401  (fixture)

IDLE = 1.5
PARTITIONS = 2
IDS = [str(p) for p in range(PARTITIONS)]
FAST = {
    "idle_timeout": IDLE,
    "management_timeout": 1.0,
    "open_timeout": 5.0,
    "retry_backoff_factor": 0.2,
}


#: azure-eventhub does not close a management connection that was cancelled (or failed) before its AMQP session
#: began: it is left to the garbage collector, which closes the socket with a ResourceWarning.
#: (rxhubs collects them when it cuts a call off, so they close within the test that caused them.)
pytestmark = pytest.mark.filterwarnings(
    "ignore::ResourceWarning", "ignore::pytest.PytestUnraisableExceptionWarning"
)


@pytest.fixture(autouse=True)
def quiet_sdk() -> Iterator[None]:
    logger = logging.getLogger("azure")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    yield
    logger.setLevel(level)


@dataclass
class Path:
    """The emulator, reached directly (``direct``) and through ``proxy`` (``proxied``)."""

    direct: str
    proxied: str
    proxy: FaultProxy


@pytest.fixture
async def path(emulator_factory: EmulatorFactory) -> AsyncIterator[Path]:  # noqa: F811
    emulator = emulator_factory(hubs={"silent": PARTITIONS})
    direct = emulator.connection_string("silent")
    async with FaultProxy("127.0.0.1", emulator.port, seed=0) as proxy:
        yield Path(direct, re.sub(r"sb://[^;]+", f"sb://{proxy.address}", direct), proxy)
    # let cut-off work finish its clean-up and its abandoned sockets close while this test's loop still runs
    others = asyncio.all_tasks() - {asyncio.current_task()}
    if others:
        await asyncio.wait(others, timeout=5)
    gc.collect()


async def wait_for(condition: Callable[[], bool], timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.1)
    return True


@dataclass
class Consumer:
    """``rxhubs.consume`` through the proxy, recording what arrives and what the error hook sees."""

    connection_string: str
    got: dict[str, list[int]] = field(default_factory=lambda: {str(p): [] for p in range(PARTITIONS)})
    errors: list[tuple[Any, BaseException]] = field(default_factory=list)

    async def run(self, shutdown: Shutdown) -> None:
        hub = rxhubs.EventHub.from_connection_string(self.connection_string, **FAST)
        pipeline = rxhubs.consume(
            hub, "$Default", InMemoryCheckpointStore(),
            on_partition_error=lambda context, error: self.errors.append((context, error)),
            load_balancing_interval=0.5, ownership_expiration=3.0, max_wait=0.2,
        ).pipe(ops.do_action(lambda b: self.got[b.partition_id].extend(e.sequence_number for e in b.events)))
        async with hub:
            await rxhubs.arun(pipeline, shutdown=shutdown, signals=(), grace=10.0)

    def has(self, sent: dict[str, int]) -> bool:
        return all(len(self.got[p]) >= n for p, n in sent.items())


class Producer:
    """Sends straight to the emulator (not through the proxy), counting per partition."""

    def __init__(self, connection_string: str) -> None:
        self.hub = rxhubs.EventHub.from_connection_string(connection_string)
        self.sent = {str(p): 0 for p in range(PARTITIONS)}

    async def send(self, per_partition: int) -> None:
        for p in self.sent:
            await self.hub.send([f"{p}-{self.sent[p] + i}".encode() for i in range(per_partition)], partition_id=p)
            self.sent[p] += per_partition


@pytest.fixture
def receive_path() -> str:
    return "direct"


@pytest.fixture(autouse=True)
def _public_path(receive_path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if receive_path == "public":
        monkeypatch.setenv(DIRECT_VARIABLE, "0")


@pytest.fixture
async def running(path: Path) -> AsyncIterator[tuple[Consumer, Producer]]:
    consumer, producer, shutdown = Consumer(path.proxied), Producer(path.direct), Shutdown()
    task = asyncio.create_task(consumer.run(shutdown))
    try:
        yield consumer, producer
    finally:
        shutdown.request()
        await asyncio.wait_for(task, 30)
        await producer.hub.close()


def stall_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "rxhubs.liveness" and r.levelno == logging.WARNING]


def receive_errors(consumer: Consumer) -> list[tuple[str, BaseException]]:
    return [(c.partition_id, e) for c, e in consumer.errors if c.operation == "receive"]


def in_order_and_complete(consumer: Consumer, producer: Producer) -> None:
    for p, n in producer.sent.items():
        assert consumer.got[p] == list(range(n)), f"partition {p}: lost, duplicated or out of order"


@pytest.mark.slow
@pytest.mark.parametrize("receive_path", ["direct", "public"])
async def test_a_silenced_path_is_noticed_and_reading_resumes_on_a_new_connection(
    receive_path: str,
    exported: Exported,  # noqa: F811
    path: Path,
    running: tuple[Consumer, Producer],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``public``: the SDK's receive_batch loop (``RXHUBS_DIRECT_RECEIVE=0``) is watched the same way."""
    consumer, producer = running
    await producer.send(10)
    assert await wait_for(lambda: consumer.has(producer.sent)), consumer.got
    accepted = path.proxy.stats.connections_accepted

    path.proxy.silence()  # every open connection goes dead; new ones pass
    for _ in range(10):
        await producer.send(5)
        await asyncio.sleep(0.2)
    assert await wait_for(lambda: consumer.has(producer.sent)), consumer.got

    in_order_and_complete(consumer, producer)
    stats = path.proxy.stats
    assert stats.bytes_dropped_down > 0 and stats.bytes_dropped_up > 0  # the fault was felt
    assert stats.connections_accepted >= accepted + PARTITIONS  # each partition reconnected
    warnings = stall_warnings(caplog)
    for p in producer.sent:
        assert any(w.startswith(f"partition {p} of silent/$Default: no frame from the service for ") for w in warnings)
    errors = receive_errors(consumer)
    assert {p for p, _ in errors} == set(producer.sent)
    assert all(isinstance(e, TransportError) and e.retriable and "idle timeout 1.5 s" in str(e) for _, e in errors)
    assert not [r for r in caplog.records if r.name == "rxhubs.sources" and r.levelno >= logging.WARNING]
    stalls = by(exported.points("rxhubs.receive.stalls"), "messaging.destination.partition.id")
    assert set(stalls) == set(producer.sent) and all(n >= 1 for n in stalls.values())


@pytest.mark.slow
async def test_a_blackholed_path_recovers_after_the_heal_with_nothing_lost(
    path: Path, running: tuple[Consumer, Producer], caplog: pytest.LogCaptureFixture
) -> None:
    consumer, producer = running
    await producer.send(10)
    assert await wait_for(lambda: consumer.has(producer.sent)), consumer.got

    path.proxy.blackhole()  # open and new connections dead: the reopens time out too
    dark_from = time.monotonic()
    await producer.send(10)
    # each partition notices while the path is dark (no deadline here: a loaded machine notices later, not never)
    noticed = await wait_for(lambda: len(stall_warnings(caplog)) >= PARTITIONS)
    await asyncio.sleep(max(0.0, dark_from + 3 * IDLE - time.monotonic()))  # and its reopens fail too
    assert all(len(consumer.got[p]) == 10 for p in producer.sent)  # nothing got through meanwhile
    failed_while_dark = len(stall_warnings(caplog))
    path.proxy.heal()
    await producer.send(10)
    assert await wait_for(lambda: consumer.has(producer.sent)), consumer.got

    in_order_and_complete(consumer, producer)
    assert path.proxy.stats.bytes_dropped_down > 0
    assert noticed and failed_while_dark >= PARTITIONS  # each partition noticed, each said once


async def test_an_idle_hub_through_the_proxy_keeps_its_connections(
    path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Partition streams without balancing: the balancing loop's management calls open connections every round."""
    producer, got, retried = Producer(path.direct), {p: [] for p in IDS}, []
    scheduler = AsyncIOScheduler(asyncio.get_running_loop())
    async with rxhubs.EventHub.from_connection_string(path.proxied, **FAST) as hub:
        streams = [
            partition_batches(hub, p, max_wait=0.2, on_retry=retried.append).subscribe(
                lambda b: got[b.partition_id].extend(e.sequence_number for e in b.events), scheduler=scheduler
            )
            for p in IDS
        ]
        try:
            await producer.send(1)
            assert await wait_for(lambda: all(got.values())), got
            before = path.proxy.stats
            await asyncio.sleep(4 * IDLE)  # no events: only heartbeats cross the proxy
            after = path.proxy.stats
            assert after.connections_accepted == before.connections_accepted  # no reconnect
            assert after.bytes_forwarded_down > before.bytes_forwarded_down  # heartbeats did flow
            assert stall_warnings(caplog) == [] and retried == []
            await producer.send(1)
            assert await wait_for(lambda: all(len(got[p]) == 2 for p in IDS)), got
        finally:
            for stream in streams:
                stream.dispose()
            await producer.hub.close()


async def test_a_management_call_on_a_dead_path_is_retried_on_a_fresh_connection(path: Path) -> None:
    async with rxhubs.EventHub.from_connection_string(path.proxied, **FAST) as hub:
        path.proxy.blackhole()
        call = asyncio.create_task(hub.get_partition_ids())
        assert await wait_for(lambda: path.proxy.stats.connections_accepted >= 2)  # the first attempt timed out
        path.proxy.heal()
        assert await asyncio.wait_for(call, 30) == [str(p) for p in range(PARTITIONS)]
        assert path.proxy.stats.bytes_dropped_up > 0


async def test_a_management_call_that_never_answers_fails_retriably(path: Path) -> None:
    async with rxhubs.EventHub.from_connection_string(path.proxied, **{**FAST, "retry_total": 1}) as hub:
        path.proxy.blackhole()
        with pytest.raises(TransportError, match=r"no answer within 1 s") as caught:
            await hub.get_partition_properties("0")
        assert caught.value.retriable
        assert path.proxy.stats.connections_accepted == 2  # one connection per attempt, none reused


@pytest.mark.slow
async def test_the_balancing_loop_survives_a_dead_management_path(
    path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The consumer starts while the path is dark: its first rounds cannot read the partition ids."""
    path.proxy.blackhole()
    consumer, producer, shutdown = Consumer(path.proxied), Producer(path.direct), Shutdown()
    task = asyncio.create_task(consumer.run(shutdown))
    try:
        await producer.send(5)
        assert await wait_for(lambda: path.proxy.stats.connections_accepted >= 3)  # attempts, each timed out
        assert not task.done()
        path.proxy.heal()
        assert await wait_for(lambda: consumer.has(producer.sent)), consumer.got
        in_order_and_complete(consumer, producer)
    finally:
        shutdown.request()
        await asyncio.wait_for(task, 30)
        await producer.hub.close()
