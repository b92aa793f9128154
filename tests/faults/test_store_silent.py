"""The blob store's network path goes silent for one consumer (a FaultProxy between it and Azurite).

Consumer A reaches Azurite through ``rxhubs.testing.FaultProxy``; consumer B directly. Both balance two
partitions each of the emulator's four (interval 0.5 s, expiry 6 s, ``store_timeout`` 1 s). The hub path is
never faulted, so events keep flowing to A whatever its store does.

* A silence **shorter than the expiry**: A's store calls time out (each is a retriable StoreError reported to
  the error hook with its operation), A keeps reading its partitions, and after the heal its next calls go
  over *new* connections (the ones the proxy silenced stay dead, as after a NAT forgot the flow): A renews
  and nothing changes hands.
* A silence **longer than the expiry**: A gives its partitions up at the expiry on its own clock (a WARNING
  names each), B takes them over, and A takes its share back after the heal.
* A **stop during a silence** finishes (its flush writes time out; the stop logs what it could not write),
  and B takes A's partitions over at the expiry.

Every event sent is processed (0 lost), and the proxy dropped bytes in each silence: the fault was felt.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import rxhubs
from rxhubs import Checkpoint, CloseReason
from rxhubs.errors import StoreError
from rxhubs.stores import BlobCheckpointStore
from rxhubs.testing import FaultProxy
from tests.faults.kit import Consumer, Producer, account, expected_from, seen, wait_until

INTERVAL, EXPIRY, STORE_TIMEOUT = 0.5, 6.0, 1.0
SHORT = 1.5  # well under the expiry, even counting one call in flight at the heal and the service's 1 s clock


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


def _records(conn: str, store_factory: Callable[[], BlobCheckpointStore]) -> dict[str, tuple[str, float]]:
    """Partition -> (owner, last modified) of the unexpired, unreleased ownership records, as the store has them."""

    async def read() -> dict[str, tuple[str, float]]:
        hub = rxhubs.EventHub.from_connection_string(conn)
        store = store_factory()
        try:
            records = await store.list_ownership(hub.fully_qualified_namespace, hub.eventhub_name, "$Default")
        finally:
            await store.close()
            await hub.close()
        now = time.time()
        return {
            o.partition_id: (o.owner_id, o.last_modified_time)
            for o in records
            if o.owner_id and o.partition_id.isdigit() and o.last_modified_time and now - o.last_modified_time < EXPIRY
        }

    return asyncio.run(read())


def _owners(conn: str, store_factory: Callable[[], BlobCheckpointStore]) -> dict[str, str]:
    return {pid: owner for pid, (owner, _) in _records(conn, store_factory).items()}


def _window(consumer: Consumer, partition: str, start: float, end: float) -> int:
    return sum(1 for pid, _, _, at in consumer.snapshot() if pid == partition and start < at < end)


def _warnings(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and text in r.getMessage()]


@pytest.mark.azurite
def test_after_a_call_on_a_silenced_connection_the_blob_store_goes_on_over_new_ones(
    azurite: Any, blob_container: str
) -> None:
    """Connections the path forgot stay open but mute: the store drops them all after one call timed out."""

    async def main() -> None:
        async with FaultProxy("127.0.0.1", azurite.port, seed=0) as proxy:
            conn = azurite.connection_string.replace(f":{azurite.port}/", f":{proxy.port}/")
            async with BlobCheckpointStore.from_connection_string(conn, blob_container) as store:
                group = ("ns", "hub", "$Default")
                await asyncio.gather(*(store.update_checkpoint(Checkpoint(*group, p, None, 1)) for p in "0123"))
                pooled = proxy.stats.connections_accepted
                assert pooled >= 2  # idle in the pool now, all of them about to be silenced
                proxy.silence()  # open connections only: new ones pass
                with pytest.raises(TimeoutError):
                    async with asyncio.timeout(STORE_TIMEOUT):  # as a caller's store_timeout does
                        await store.list_checkpoints(*group)
                assert proxy.stats.bytes_dropped_up > 0  # the silence was felt
                # reusing another pooled (silenced) connection would never answer: it goes over a new one
                async with asyncio.timeout(30):
                    listed = await store.list_checkpoints(*group)
                assert sorted(c.partition_id for c in listed) == ["0", "1", "2", "3"]
                assert proxy.stats.connections_accepted > pooled

    asyncio.run(main())


@pytest.mark.slow
@pytest.mark.azurite
def test_a_silent_store_path_changes_no_ownership_before_the_expiry_and_gives_it_up_after(
    emulator_factory: Any, azurite: Any, blob_container: str, proxied: ProxyThread, caplog: pytest.LogCaptureFixture
) -> None:
    emulator = emulator_factory(hubs={"silent": 4})
    conn = emulator.connection_string("silent")
    proxy = proxied.proxy
    through_proxy = azurite.connection_string.replace(f":{azurite.port}/", f":{proxy.port}/")
    assert through_proxy != azurite.connection_string

    def direct() -> BlobCheckpointStore:
        return BlobCheckpointStore.from_connection_string(azurite.connection_string, blob_container)

    def via_proxy() -> BlobCheckpointStore:
        return BlobCheckpointStore.from_connection_string(through_proxy, blob_container)

    caplog.set_level(logging.INFO, logger="rxhubs")
    options = {"load_balancing_interval": INTERVAL, "ownership_expiration": EXPIRY, "store_timeout": STORE_TIMEOUT}
    producer = Producer(conn)
    a = Consumer("a", conn, via_proxy, **options)
    b = Consumer("b", conn, direct, **options)

    def balanced() -> bool:
        return sorted(_owners(conn, direct).values()) == ["a", "a", "b", "b"]

    try:
        a.start_and_wait()
        b.start_and_wait()
        producer.start()
        assert wait_until(balanced, 30)
        time.sleep(2 * INTERVAL)  # the handovers of the first balancing finish
        assert balanced()
        mine = sorted(pid for pid, owner in _owners(conn, direct).items() if owner == "a")
        closed = (len(a.closed), len(b.closed))

        # 1. silent for less than the expiry: nothing changes hands, A reads on, then renews over new connections
        dropped, reported = proxy.stats.bytes_dropped_up, len(a.operations)
        proxy.blackhole()
        short_from = time.time()
        time.sleep(SHORT)
        accepted = proxy.stats.connections_accepted
        healed_at = time.time()
        proxy.heal()
        assert wait_until(lambda: proxy.stats.connections_accepted > accepted, 10)  # a new connection after the heal
        assert wait_until(
            lambda: all(
                owner == "a" and modified >= healed_at - 1.0
                for pid, (owner, modified) in _records(conn, direct).items()
                if pid in mine
            ),
            10,
        )  # A renewed its records after the heal (the service's clock has a 1 s resolution)
        assert (len(a.closed), len(b.closed)) == closed, (a.closed, b.closed)  # no ownership changed
        assert balanced()
        assert all(_window(a, pid, short_from, healed_at) > 0 for pid in mine)  # consumption went on
        assert proxy.stats.bytes_dropped_up > dropped  # the silence was felt ...

        def felt() -> set[str]:  # the operations whose store calls failed (timed out) since the silence began
            return {op for op, error in a.operations[reported:] if isinstance(error, StoreError) and error.retriable}

        # ... and reported (a write in flight at the heal times out after it)
        assert wait_until(lambda: "checkpoint" in felt() and bool(felt() & {"list", "claim"}), 10), felt()

        # 2. silent for longer than the expiry: A gives its partitions up at the expiry, B takes them over
        caplog.clear()
        dropped = proxy.stats.bytes_dropped_up
        proxy.blackhole()
        long_from = time.time()
        assert wait_until(
            lambda: all((pid, CloseReason.OWNERSHIP_LOST) in a.closed[closed[0] :] for pid in mine), 4 * EXPIRY
        )
        closed_at = time.time()
        assert wait_until(lambda: all(_owners(conn, direct).get(pid) == "b" for pid in mine), 4 * EXPIRY)
        time.sleep(2 * INTERVAL)
        healed_at = time.time()
        proxy.heal()
        for pid in mine:  # A read during the outage until its ownership expired on its own clock, then no more
            assert _window(a, pid, long_from, closed_at - EXPIRY / 2) > 0
            assert _window(a, pid, closed_at, healed_at) == 0
            assert any(f"partition {pid} expired" in m for m in _warnings(caplog, "expired")), caplog.messages
        assert proxy.stats.bytes_dropped_up > dropped
        assert wait_until(balanced, 30)  # A takes its share back after the heal
        back_at = time.time()
        again = sorted(pid for pid, owner in _owners(conn, direct).items() if owner == "a")
        assert wait_until(lambda: all(_window(a, pid, back_at, time.time()) > 0 for pid in again), 30)

        # 3. a stop during a silence finishes; B takes A's partitions over at the expiry
        caplog.clear()
        proxy.blackhole()
        a.stop()  # bounded: every flush and release attempt times out
        for pid in again:  # it said which positions it could not write
            assert any(f"partition {pid} " in m for m in _warnings(caplog, "not written")), caplog.messages
        assert _warnings(caplog, "records will expire instead"), caplog.messages
        proxy.heal()
        assert wait_until(lambda: sorted(_owners(conn, direct).values()) == ["b"] * 4, 4 * EXPIRY)

        producer.stop.set()
        producer.join(timeout=30)
        assert producer.error is None, producer.error
        expected = expected_from(dict(producer.sent))
        assert wait_until(lambda: expected <= seen([a, b]), 40), len(expected - seen([a, b]))
        b.stop()
    finally:
        producer.stop.set()
        proxy.heal()
        for consumer in (a, b):
            if consumer.is_alive():
                consumer.stop()
    for consumer in (a, b):
        assert consumer.outcome is None, consumer.outcome
    account(expected, [a, b])
