"""The service's own faults (the emulator's fault control), survived by ``rxhubs.consume``: nothing is lost.

Each test runs a consumer (``consume`` -> record -> ``checkpoint``, a SQLite store, 1 s interval, 3 s expiry)
against the emulator while a feeder sends numbered events, injects one fault, and checks that every event the
emulator stored was processed (the partition properties are the ground truth) and that the fault was felt
(the emulator's link log shows the detach with its condition). The last test grows a hub in virtual time.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from azure.eventhub import EventData, EventHubProducerClient

import rxhubs
from rxhubs import CloseReason
from rxhubs.emulator import BackgroundEmulator
from rxhubs.stores import SqliteCheckpointStore
from tests.balancing.kit import Group
from tests.faults.kit import Consumer, account, seen, wait_until

pytestmark = pytest.mark.timeout(120)

HUB = "faulty"


class Feeder(threading.Thread):
    """Sends small batches to every partition the hub has (re-read each pass) until stopped; sends that fail
    (the fault reaches the producer too) are counted and tried again later. When the hub grows, a new SDK
    producer is opened: the SDK's refuses partitions it did not know when it started ("Invalid partition")."""

    def __init__(self, connection_string: str) -> None:
        super().__init__(daemon=True)
        self.connection_string = connection_string
        self.stop = threading.Event()
        self.failures = 0
        self.sent_to: set[str] = set()

    def run(self) -> None:
        producer = EventHubProducerClient.from_connection_string(self.connection_string, retry_total=1)
        known: list[str] = []
        n = 0
        try:
            while not self.stop.is_set():
                try:
                    ids = producer.get_partition_ids()
                    if known and ids != known:  # the SDK's producer refuses partitions it did not know at start
                        producer.close()
                        producer = EventHubProducerClient.from_connection_string(self.connection_string,
                                                                                 retry_total=1)
                    known = ids
                    for pid in ids:
                        batch = producer.create_batch(partition_id=pid)
                        for _ in range(5):
                            batch.add(EventData(f"{pid}-{n}"))
                            n += 1
                        producer.send_batch(batch)
                        self.sent_to.add(pid)
                except Exception:
                    self.failures += 1
                    time.sleep(0.2)
                time.sleep(0.05)
        finally:
            producer.close()


def stored(emulator: BackgroundEmulator) -> set[tuple[str, int]]:
    """Every (partition, sequence number) the emulator holds: what must be processed."""
    with EventHubProducerClient.from_connection_string(emulator.connection_string(HUB)) as producer:
        return {(pid, seq) for pid in producer.get_partition_ids()
                for seq in range(producer.get_partition_properties(pid)["last_enqueued_sequence_number"] + 1)}


def run_with_fault(emulator: BackgroundEmulator, tmp_path: Path, inject: Any, settle: float = 2.0) -> Consumer:
    """Consume while feeding; once every partition flows, ``inject()``; then stop feeding and check 0 lost."""
    conn = emulator.connection_string(HUB)
    path = tmp_path / "cp.sqlite"
    consumer = Consumer("c", conn, lambda: SqliteCheckpointStore(path)).start_and_wait()
    feeder = Feeder(conn)
    try:
        feeder.start()
        assert wait_until(lambda: {p for p, _ in seen([consumer])} == {"0", "1", "2", "3"}, 30)
        inject()
        time.sleep(settle)
        feeder.stop.set()
        feeder.join(30)
        expected = stored(emulator)
        assert wait_until(lambda: expected <= seen([consumer]), 60), sorted(expected - seen([consumer]))[:10]
        account(expected, [consumer])  # asserts 0 lost
    finally:
        feeder.stop.set()
        consumer.stop()
    assert consumer.outcome is None, consumer.outcome
    return consumer


@pytest.mark.slow
def test_server_busy_on_attach_flow_and_management_loses_nothing(
    tmp_path: Path, emulator_factory: Any, caplog: pytest.LogCaptureFixture
) -> None:
    emulator = emulator_factory(hubs={HUB: 4})
    window: list[float] = []

    def busy() -> None:
        window.append(time.time())
        emulator.faults.server_busy(3.0, hub=HUB)

    caplog.set_level(logging.WARNING, "rxhubs.balancing")
    consumer = run_with_fault(emulator, tmp_path, busy, settle=5.0)
    # a busy service costs no ownership (the store was fine) and no event twice (each reader reopened after the
    # last event it handed out, dropping what the new link replayed)
    assert not [c for c in consumer.closed if c[1] == CloseReason.OWNERSHIP_LOST], consumer.closed
    duplicates = account(stored(emulator), [consumer])
    assert not duplicates, sorted(duplicates)[:10]
    # management: the balancing loop re-reads the partition ids every round, and those reads failed while the
    # window lasted (and only then: the ids are read again after it)
    refused = [r.created for r in caplog.records if "reading the partition ids failed" in r.getMessage()]
    assert refused and all(window[0] <= t <= window[0] + 3.0 + 2.0 for t in refused), (window, refused)
    log = emulator.link_log
    busy = [r for r in log if r.condition == "com.microsoft:server-busy"]
    assert {r.partition_id for r in busy if r.event == "detach"} == {"0", "1", "2", "3"}  # flow: readers cut
    assert any(r.event == "refuse" for r in busy)  # attach: re-attaches refused while it lasted
    back = {r.partition_id for r in log if r.event == "attach" and r.time > max(b.time for b in busy)}
    assert back == {"0", "1", "2", "3"}  # every partition reopened after the window


@pytest.mark.slow
def test_a_stolen_link_with_no_new_owner_is_reclaimed_and_the_others_flow_on(
    tmp_path: Path, emulator_factory: Any
) -> None:
    """The emulator detaches partition 1's receiver with amqp:link:stolen but nobody takes it: rxhubs drops the
    partition (OWNERSHIP_LOST) without renewing or releasing its record, which expires, and claims it again."""
    emulator = emulator_factory(hubs={HUB: 4})
    stolen_at: list[float] = []

    def steal() -> None:
        stolen_at.append(time.time())
        assert emulator.faults.steal(HUB, "1") == 1

    consumer = run_with_fault(emulator, tmp_path, steal, settle=6.0)
    assert ("1", CloseReason.OWNERSHIP_LOST) in consumer.closed
    log = [r for r in emulator.link_log if r.partition_id == "1"]
    cut = next(r for r in log if r.event == "detach" and r.condition == "amqp:link:stolen")
    assert cut.owner_level is not None  # an epoch receiver, as rxhubs' balancing opens
    assert any(r.event == "attach" and r.time > cut.time for r in log)  # partition 1 was reopened
    rows = consumer.snapshot()
    assert any(p == "1" and at > cut.time for p, _, _, at in rows)  # and read again
    for other in ("0", "2", "3"):  # the other partitions were not disturbed
        assert (other, CloseReason.OWNERSHIP_LOST) not in consumer.closed
        assert any(p == other and at > stolen_at[0] for p, _, _, at in rows), other  # read on after the steal


@pytest.mark.slow
def test_a_forced_close_of_every_connection_loses_nothing(tmp_path: Path, emulator_factory: Any) -> None:
    emulator = emulator_factory(hubs={HUB: 4})
    closed: list[int] = []
    run_with_fault(emulator, tmp_path, lambda: closed.append(emulator.faults.force_close()), settle=3.0)
    assert closed[0] >= 4  # a connection per receiver, and the feeder's
    forced = [r for r in emulator.link_log if r.event == "detach" and r.condition == "amqp:connection:forced"]
    assert {r.partition_id for r in forced} == {"0", "1", "2", "3"}
    assert all(any(r.event == "attach" and r.partition_id == f.partition_id and r.time > f.time
                   for r in emulator.link_log) for f in forced)  # every partition reopened


@pytest.mark.slow
def test_partitions_added_to_a_live_hub_are_owned_and_read(tmp_path: Path, emulator_factory: Any) -> None:
    emulator = emulator_factory(hubs={HUB: 4})
    conn = emulator.connection_string(HUB)
    path = tmp_path / "cp.sqlite"
    consumer = Consumer("c", conn, lambda: SqliteCheckpointStore(path)).start_and_wait()
    feeder = Feeder(conn)
    try:
        feeder.start()
        assert wait_until(lambda: {p for p, _ in seen([consumer])} == {"0", "1", "2", "3"}, 30)
        emulator.faults.add_partitions(HUB, 6)
        assert wait_until(lambda: {"4", "5"} <= {p for p, _ in seen([consumer])}, 15)
        time.sleep(1.0)
        feeder.stop.set()
        feeder.join(30)
        assert {"4", "5"} <= feeder.sent_to
        expected = stored(emulator)
        assert wait_until(lambda: expected <= seen([consumer]), 60)
        account(expected, [consumer])
    finally:
        feeder.stop.set()
        consumer.stop()
    assert consumer.outcome is None, consumer.outcome
    new = [r for r in emulator.link_log if r.event == "attach" and r.partition_id in ("4", "5")]
    assert {r.partition_id for r in new} == {"4", "5"}


class CountingHub(rxhubs.testing.InMemoryEventHub):
    """Counts the partition-id reads (what the balancing loop asks the hub each round)."""

    reads = 0

    async def get_partition_ids(self) -> Any:
        self.reads += 1
        return await super().get_partition_ids()


def test_new_partitions_are_claimed_and_read_within_two_intervals_in_virtual_time() -> None:
    interval = 10.0
    group = Group(4, interval=interval, expiry=30.0)
    group.hub = CountingHub(4, clock=lambda: group.scheduler.now)
    group.add("a")
    group.add("b")
    group.traffic(0.0, 200.0, every=1.0)
    grown_at = 100.0
    group.at(grown_at, lambda: group.hub.add_partitions(6))
    group.run(grown_at + 2 * interval)
    assert set(group.readers_per_partition()) == {"0", "1", "2", "3", "4", "5"}
    assert all(len(owners) == 1 for owners in group.readers_per_partition().values())
    first = {pid: min(p.finished for p in group.ledger if p.partition_id == pid) for pid in ("4", "5")}
    assert all(grown_at < t <= grown_at + 2 * interval for t in first.values()), first
    group.run(220.0)
    assert group.missing() == [] and group.overlaps() == []
    rounds = group.scheduler.clock / interval * 2  # two consumers
    assert group.hub.reads <= rounds * 1.5  # about one read per round (each is one management call)


@pytest.mark.slow
async def test_an_event_hub_sends_to_partitions_added_after_its_first_send(emulator_factory: Any) -> None:
    emulator = emulator_factory(hubs={HUB: 2})
    async with rxhubs.EventHub.from_connection_string(emulator.connection_string(HUB)) as hub:
        await hub.send([b"before"], partition_id="1")  # the SDK's producer reads the ids (2) when it opens
        emulator.faults.add_partitions(HUB, 4)
        await hub.send([b"after"], partition_id="3")  # refused as "Invalid partition" by a producer that knew 2
        assert list(await hub.get_partition_ids()) == ["0", "1", "2", "3"]
    reader = rxhubs.EventHub.from_connection_string(emulator.connection_string(HUB))
    async with reader, reader.receiver("3") as receiver:
        assert [e.body for e in await receiver.receive_batch(10, max_wait=5.0)] == [b"after"]
