"""Network faults on one consumer's path to the hub, through a FaultProxy, with the real azure-eventhub client.

Each test: an emulator with 4 partitions; consumer ``a`` reads through the proxy, consumer ``b`` straight from
the emulator, sharing a SQLite store (two partitions each); a producer sends numbered events straight to the
emulator before, during and after the fault. Then: every event processed once, in order per partition (the
receivers reopen just after the last event delivered, and drop what a link replays), ``a`` kept its partitions,
``b`` read each of its partitions in every second of the fault, and the proxy counted the fault. The silent path
and the blackhole are in the liveness tests; server-side faults in the emulator fault tests.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from reactivex import operators as ops

import rxhubs
from rxhubs import EventBatch, EventHub, partition_batches
from rxhubs.errors import TransportError
from rxhubs.stores import SqliteCheckpointStore
from rxhubs.testing import FaultProxy
from rxhubs.transport._direct import DIRECT_VARIABLE
from tests.faults.kit import wait_until
from tests.faults.netkit import Producer, Run, proxy_to, through

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


@pytest.fixture
def quiet_sdk() -> Iterator[None]:
    """The SDK logs every lost connection at WARNING or above; these tests cause hundreds."""
    logger = logging.getLogger("azure.eventhub")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    yield
    logger.setLevel(level)


@pytest.fixture
def run(request: pytest.FixtureRequest, emulator_factory: Any, tmp_path: Path, quiet_sdk: None) -> Iterator[Run]:
    options = dict(getattr(request, "param", {}))
    emulator = emulator_factory(hubs={"faults": 4})
    conn = emulator.connection_string("faults")
    with proxy_to(emulator.port, seed=25) as proxy:
        producer = Producer(conn, **options.pop("producer", {}))
        with Run(conn, proxy, tmp_path, producer, options) as started:
            yield started


@pytest.fixture
def public_receive_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Receivers use the SDK's public receive_batch loop (set before ``run`` starts the consumers)."""
    monkeypatch.setenv(DIRECT_VARIABLE, "0")


def retried_only(run: Run) -> list[BaseException]:
    """a's errors on its partitions, each a retriable TransportError (retried: none ended a partition's stream)."""
    felt = [e for p, e in run.a.errors if p in run.a_partitions]
    assert all(isinstance(e, TransportError) and e.retriable for e in felt), felt[:3]
    return felt


def reset_for_three_seconds(run: Run) -> tuple[float, float]:
    proxy = run.proxy
    fault_from = time.time()
    proxy.reset()
    # a's receivers are reset, and so is every reconnection, right after accept
    assert wait_until(lambda: proxy.stats.connections_reset >= 6, 30), proxy.stats
    time.sleep(max(0.0, fault_from + 3.0 - time.time()))
    proxy.heal()
    return fault_from, time.time()


def for_four_seconds(proxy: FaultProxy, inject: Callable[[], object]) -> tuple[float, float]:
    """Inject a fault through ``proxy``, let it last 4 s, heal it; when it began and ended (wall clock)."""
    fault_from = time.time()
    inject()
    time.sleep(4.0)
    proxy.heal()
    return fault_from, time.time()


def test_rst_on_every_connection(run: Run) -> None:
    fault_from, fault_to = reset_for_three_seconds(run)
    expected = run.drain()
    run.check(expected, fault_from, fault_to)
    # each reset reached the error hook as a retriable TransportError, and was retried
    assert len(retried_only(run)) >= 4


def test_rst_on_every_connection_public_receive_path(public_receive_path: None, run: Run) -> None:
    # the SDK's own loop reconnects on its own (tens of times a second, unreported); nothing lost or repeated
    fault_from, fault_to = reset_for_three_seconds(run)
    expected = run.drain()
    run.check(expected, fault_from, fault_to)
    retried_only(run)


def test_one_second_latency_each_way(run: Run) -> None:
    proxy = run.proxy
    fault_from, fault_to = for_four_seconds(proxy, lambda: proxy.latency(1.0))
    stats = proxy.stats
    expected = run.drain()
    run.check(expected, fault_from, fault_to)
    # a kept reading through the slow path, and every event sent during the fault took the detour
    sent_at = run.producer.sent_at()
    delayed = [at - sent_at[(p, s)] for p, s, _, at in run.a.snapshot()
               if fault_from <= sent_at.get((p, s), 0) and at <= fault_to]
    assert delayed, "a read nothing sent during the fault before it ended"
    assert min(delayed) >= 1.0, min(delayed)
    assert stats.connections_reset == stats.connections_cut == 0
    assert not retried_only(run)  # a slow path is not a dead one


class _SlowStore(SqliteCheckpointStore):
    """Each store call 0.3 s slower: a loaded machine, or a store farther away than the hub."""

    DELAY = 0.3

    async def _run(self, verb: str, function: Any) -> Any:
        await asyncio.sleep(self.DELAY)
        return await super()._run(verb, function)


def test_one_second_latency_each_way_keeps_ownership_with_a_3_s_expiry_and_slow_store_calls(
    emulator_factory: Any, tmp_path: Path, quiet_sdk: None
) -> None:
    """A renewal counts from when its claim is sent, not from the start of its round: the partition-id refresh
    through the slow hub path (bounded by one interval) and two slow listings come before it, and with the renewal
    credited from the round's start they added up past the 3 s expiry (ownership lost, events processed twice)."""
    # without the latency the same slow store keeps its partitions (renewals about 1.9 s apart)
    emulator = emulator_factory(hubs={"faults": 4})
    conn = emulator.connection_string("faults")
    with proxy_to(emulator.port, seed=25) as proxy:
        run = Run(conn, proxy, tmp_path, Producer(conn), {"ownership_expiration": 3.0})
        run.a.store_factory = lambda: _SlowStore(tmp_path / "cp.sqlite")
        # the store stamps a renewal 0.3 s after its claim was sent, and the renewal counts from the send: as the
        # store stamps them, a's renewals came up to 3.1 s apart here (the expiry is 3 s) while a kept its
        # partitions, read them without a break and processed nothing twice
        run.renewal_gap = 3.0 + 2 * _SlowStore.DELAY
        with run:
            fault_from, fault_to = for_four_seconds(proxy, lambda: proxy.latency(1.0))
            expected = run.drain()
            run.check(expected, fault_from, fault_to)


@pytest.mark.parametrize("run", [{"producer": {"body_size": 1000}}], indirect=True)
def test_20_kb_per_second(run: Run) -> None:
    proxy = run.proxy
    fault_from, fault_to = for_four_seconds(proxy, lambda: proxy.bandwidth(20_000))
    expected = run.drain()
    run.check(expected, fault_from, fault_to)
    # a's two partitions carry about 200 KB/s: a backlog built up behind the thin pipe, drained after the heal
    sent_at = run.producer.sent_at()
    late = [at - sent_at[(p, s)] for p, s, _, at in run.a.snapshot()
            if fault_from <= sent_at.get((p, s), 0) <= fault_from + 1.0]
    assert max(late) >= 1.0, max(late)
    assert not retried_only(run)


def test_writes_sliced_to_1_to_7_bytes(run: Run) -> None:
    proxy = run.proxy
    before = proxy.stats
    read_before = len(run.a.snapshot())
    fault_from = time.time()
    proxy.slice(1, 7)
    time.sleep(1.5)
    # then a whole handshake through the slicer: the receivers reconnect (RST once, then sliced again)
    proxy.reset()
    assert wait_until(lambda: proxy.stats.connections_reset >= before.connections_reset + 2, 20)
    proxy.heal()
    proxy.slice(1, 7)
    resets = proxy.stats.connections_reset
    assert wait_until(lambda: proxy.stats.connections_accepted >= before.connections_accepted + 2, 20)
    time.sleep(2.5)
    proxy.heal()
    fault_to = time.time()
    after = proxy.stats
    read_during = len(run.a.snapshot()) - read_before
    expected = run.drain()
    run.check(expected, fault_from, fault_to)
    writes = after.writes_down - before.writes_down
    size = after.bytes_forwarded_down - before.bytes_forwarded_down
    assert read_during > 0 and writes >= 10 * read_during and size <= 7 * writes, (writes, size, read_during)
    assert after.writes_up - before.writes_up >= (after.bytes_forwarded_up - before.bytes_forwarded_up) / 7
    assert proxy.stats.connections_reset == resets  # the sliced handshakes went through
    assert len(retried_only(run)) == 2  # the one reset of each receiver; never a garbled frame


def test_a_connection_cut_mid_frame_while_events_flow(run: Run) -> None:
    proxy = run.proxy
    read_before = len(run.a.snapshot())
    fault_from = time.time()
    proxy.cut_after(4_999, direction="downstream")  # each connection: its handshake, some events, cut
    assert wait_until(lambda: proxy.stats.connections_cut >= 6, 30), proxy.stats
    time.sleep(max(0.0, fault_from + 3.0 - time.time()))
    proxy.heal()
    fault_to = time.time()
    cuts = proxy.stats.connections_cut
    read_during = len(run.a.snapshot()) - read_before
    expected = run.drain()
    run.check(expected, fault_from, fault_to)
    assert read_during > 0  # a made progress between the cuts
    assert len(retried_only(run)) >= cuts - 1  # each cut reported (the management link's too, in the log)


def test_connections_cut_upstream_during_the_open_and_attach_handshake(run: Run) -> None:
    proxy = run.proxy
    rng = random.Random(25)
    proxy.cut_after(0, direction="downstream")  # a's open receivers go first, at their next byte from the hub
    assert wait_until(lambda: proxy.stats.connections_cut >= 2, 20), proxy.stats
    fault_from = time.time()
    before = proxy.stats
    sizes: list[int] = []
    while time.time() < fault_from + 5.0:
        # each new connection is cut after n of its bytes to the hub, n below what a receiver sends before its
        # link is attached and credited (protocol headers, SASL, open, begin, the CBS token, attach, flow:
        # about 1.5 KB): it never gets to read an event
        n = rng.randrange(1, 1_200)
        cuts = proxy.stats.connections_cut
        proxy.cut_after(n, direction="upstream")
        if wait_until(lambda: proxy.stats.connections_cut > cuts, 3.0, step=0.05):  # noqa: B023
            sizes.append(n)
    during = proxy.stats
    proxy.heal()
    fault_to = time.time()
    expected = run.drain()
    run.check(expected, fault_from, fault_to)
    assert len(sizes) >= 3, (sizes, during)
    assert during.connections_accepted - before.connections_accepted >= 4, during
    assert not [row for row in run.a.snapshot() if fault_from + 1.0 <= row[3] <= fault_to]  # no link got through
    assert len(retried_only(run)) >= 4



async def test_a_link_and_a_management_call_opened_through_one_second_latency_each_way(
    emulator_factory: Any, quiet_sdk: None
) -> None:
    emulator = emulator_factory(hubs={"far": 1})
    conn = emulator.connection_string("far")
    async with FaultProxy("127.0.0.1", emulator.port, seed=25) as proxy:
        async with EventHub.from_connection_string(conn) as direct:
            await direct.send([b"a", b"b", b"c"], partition_id="0")
        hub = EventHub.from_connection_string(conn, **through(proxy))
        try:
            assert await hub.get_partition_ids() == ["0"]  # known before the fault: the receiver opens at once
            proxy.latency(1.0)
            loop = asyncio.get_running_loop()
            started = loop.time()

            async def read() -> list[int]:
                got: list[int] = []
                async with hub.receiver("0") as receiver:  # connection, SASL, CBS, attach: 2 s per round trip
                    while len(got) < 3:
                        got += [e.sequence_number for e in await receiver.receive_batch(10, max_wait=5.0)]
                return got

            # each management call opens a connection of its own: about 12 s through this path
            ids, sequence_numbers = await asyncio.wait_for(asyncio.gather(hub.get_partition_ids(), read()), 90)
            assert ids == ["0"] and sequence_numbers == [0, 1, 2]
            assert loop.time() - started >= 4.0  # at least two round trips: the latency was felt
        finally:
            await hub.close()

async def test_an_event_slower_than_the_idle_timeout_through_20_kb_per_second(
    emulator_factory: Any, quiet_sdk: None, caplog: pytest.LogCaptureFixture
) -> None:
    emulator = emulator_factory(hubs={"thin": 1})
    conn = emulator.connection_string("thin")
    async with FaultProxy("127.0.0.1", emulator.port, seed=25) as proxy:
        async with EventHub.from_connection_string(conn) as direct:
            await direct.send([b"small", b"x" * 40_000, b"after"], partition_id="0")
        proxy.bandwidth(20_000, direction="downstream")  # the big event takes 2 s, bytes arriving all along
        hub = EventHub.from_connection_string(conn, idle_timeout=1.0, **through(proxy))
        sizes: list[int] = []

        def count(batch: EventBatch) -> None:
            sizes.extend(len(e.body) for e in batch.events)

        pipeline = partition_batches(hub, "0", max_wait=0.2).pipe(
            ops.do_action(count), ops.take_while(lambda _: len(sizes) < 3))
        try:  # the pipeline ends with the third event; a hang fails the test (pytest-timeout), never passes it
            await rxhubs.arun(pipeline, signals=())
        finally:
            await hub.close()
        assert sizes == [5, 40_000, 5]
        # one receiver connection and one management call's (the partition check): no reconnection, no retry
        assert proxy.stats.connections_accepted == 2, proxy.stats
        stalls = [r.getMessage() for r in caplog.records
                  if r.name == "rxhubs.liveness" and r.levelno >= logging.WARNING]
        assert not stalls, stalls  # the slow frame was never taken for a dead path
