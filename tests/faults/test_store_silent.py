"""The blob store's network path goes silent for one consumer (a FaultProxy between it and Azurite).

Consumer A reaches Azurite through ``rxhubs.testing.FaultProxy``; consumer B directly. Both balance two
partitions each of the emulator's four (interval 1 s, expiry 3 s; each store call is bounded by one interval).

A silence **longer than the expiry**: A reads on meanwhile (store calls are bounded), then stops reading its
partition once its last renewal is older than the expiry on its own clock (a WARNING says so, the stream
closes with ``OWNERSHIP_LOST``); B takes it over; when the path heals, A rejoins. Every event sent is
processed (0 lost), and the proxy dropped bytes: the silence was felt. (A silence *shorter* than the expiry
is not tested here: connections the proxy silenced stay dead after it heals, and the store's pooled
connections then keep failing calls past the expiry. ``tests/sources/test_partitions.py`` covers that case
in virtual time.)
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from rxhubs import CloseReason
from rxhubs.stores import BlobCheckpointStore
from rxhubs.testing import FaultProxy
from tests.faults.kit import (
    EXPIRY,
    PARTITIONS,
    Consumer,
    Producer,
    account,
    expected_from,
    live_owners,
    seen,
    wait_until,
)


class ProxyThread:
    """A FaultProxy on an event loop of its own thread (its controls are thread-safe)."""

    def __init__(self, port: int) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.proxy = FaultProxy("127.0.0.1", port, seed=0)
        asyncio.run_coroutine_threadsafe(self.proxy.start(), self.loop).result(10)

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.proxy.stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@pytest.fixture
def proxied(azurite: Any) -> Iterator[ProxyThread]:
    proxy = ProxyThread(azurite.port)
    try:
        yield proxy
    finally:
        proxy.close()


def _window(consumer: Consumer, partition: str, start: float, end: float) -> int:
    return sum(1 for pid, _, _, at in consumer.snapshot() if pid == partition and start < at < end)


@pytest.mark.slow
@pytest.mark.azurite
@pytest.mark.xfail(
    strict=False,
    reason="known gap (issue 25 report): after a silent store path, checkpoint writes are not bounded by the store"
    " timeout and pooled connections the proxy killed keep failing calls, so the consumer may stop slowly",
)
def test_a_silent_store_path_keeps_ownership_until_the_expiry_then_gives_it_up(
    emulator_factory: Any, azurite: Any, blob_container: str, proxied: ProxyThread, caplog: pytest.LogCaptureFixture
) -> None:
    emulator = emulator_factory(hubs={"silent": PARTITIONS})
    conn = emulator.connection_string("silent")
    through_proxy = azurite.connection_string.replace(f":{azurite.port}/", f":{proxied.proxy.port}/")
    assert through_proxy != azurite.connection_string

    def direct() -> BlobCheckpointStore:
        return BlobCheckpointStore.from_connection_string(azurite.connection_string, blob_container)

    def via_proxy() -> BlobCheckpointStore:
        return BlobCheckpointStore.from_connection_string(through_proxy, blob_container)

    caplog.set_level(logging.INFO, logger="rxhubs.balancing")
    producer = Producer(conn)
    a = Consumer("a", conn, via_proxy)
    b = Consumer("b", conn, direct)
    try:
        a.start_and_wait()
        b.start_and_wait()
        producer.start()
        assert wait_until(lambda: sorted(live_owners(conn, direct).values()) == ["a", "a", "b", "b"], 30)
        owners = live_owners(conn, direct)
        mine = min(pid for pid, owner in owners.items() if owner == "a")
        time.sleep(1.0)
        closed = (list(a.closed), list(b.closed))  # the first balancing handed a partition over

        # silent (blackholed) for longer than the expiry: A gives its partitions up at the expiry, B takes them
        caplog.clear()
        dropped = proxied.proxy.stats.bytes_dropped_up
        proxied.proxy.blackhole()
        long_from = time.time()
        assert wait_until(lambda: (mine, CloseReason.OWNERSHIP_LOST) in a.closed[len(closed[0]) :], 4 * EXPIRY)
        closed_at = time.time()
        assert wait_until(lambda: live_owners(conn, direct).get(mine) == "b", 4 * EXPIRY)
        time.sleep(1.0)
        healed_at = time.time()
        proxied.proxy.heal()
        # A read its partition during the outage until its ownership expired on its own clock, then no more
        assert _window(a, mine, long_from, closed_at) > 0
        assert _window(a, mine, closed_at, healed_at) == 0
        assert wait_until(lambda: sorted(live_owners(conn, direct).values()) == ["a", "a", "b", "b"], 30)

        producer.stop.set()
        producer.join(timeout=30)
        assert producer.error is None, producer.error
        expected = expected_from(dict(producer.sent))
        assert wait_until(lambda: expected <= seen([a, b]), 40), len(expected - seen([a, b]))
        b.stop()
        a.stop()
    finally:
        producer.stop.set()
        proxied.proxy.heal()
        for consumer in (a, b):
            if consumer.is_alive():
                consumer.stop()
    for consumer in (a, b):
        assert consumer.outcome is None, consumer.outcome
    account(expected, [a, b])
    # it said why it stopped reading: its ownership expired (no renewal within the expiry)
    assert any("expired" in r.getMessage() and r.levelno == logging.WARNING for r in caplog.records), [
        r.getMessage() for r in caplog.records
    ]
    assert proxied.proxy.stats.bytes_dropped_up > dropped
