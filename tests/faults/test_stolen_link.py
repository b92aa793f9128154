"""A link stolen by a higher owner level: a foreign reader takes one partition for a while, then goes.

That partition's stream ends with OWNERSHIP_LOST, the other partitions keep flowing meanwhile, and once the
thief is gone (and the abandoned record expired) the partition is read again from its checkpoint: nothing
lost, and the only duplicates are on that partition, within one checkpoint window.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import rxhubs
from rxhubs import CloseReason
from rxhubs.stores import SqliteCheckpointStore
from tests.faults.kit import PARTITIONS, Consumer, Producer, account, expected_from, seen, wait_until

VICTIM = "1"


class Thief(threading.Thread):
    """Reads the victim partition with owner level 1000 until told to go."""

    def __init__(self, connection_string: str) -> None:
        super().__init__(daemon=True)
        self.connection_string = connection_string
        self.go = threading.Event()
        self.attached = threading.Event()
        self.read = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        async def steal() -> None:
            hub = rxhubs.EventHub.from_connection_string(self.connection_string)
            try:
                async with hub.receiver(VICTIM, "$Default", rxhubs.Position.latest(), owner_level=1000) as receiver:
                    while not self.go.is_set():
                        self.read += len(await receiver.receive_batch(100, max_wait=0.2))
                        self.attached.set()
            finally:
                await hub.close()

        try:
            asyncio.run(steal())
        except BaseException as exc:  # reported by the test
            self.error = exc


@pytest.mark.slow
def test_a_stolen_link_ends_that_stream_only_and_the_partition_resumes_from_its_checkpoint(
    tmp_path: Path, emulator_factory: Any
) -> None:
    emulator = emulator_factory(hubs={"stolen": PARTITIONS})
    conn = emulator.connection_string("stolen")
    path = tmp_path / "cp.sqlite"
    producer = Producer(conn)
    consumer = Consumer("a", conn, lambda: SqliteCheckpointStore(path))
    thief = Thief(conn)
    try:
        consumer.start_and_wait()
        producer.start()
        assert wait_until(lambda: {p for p, _ in seen([consumer])} == set(map(str, range(PARTITIONS))), 15)
        time.sleep(1.0)
        thief.start()
        assert thief.attached.wait(15), thief.error
        assert wait_until(lambda: (VICTIM, CloseReason.OWNERSHIP_LOST) in consumer.closed, 10), consumer.closed
        stolen_at = time.time()
        time.sleep(5.0)  # longer than the expiry: the consumer may try again, and is cut off again
        thief.go.set()
        thief.join(timeout=15)
        assert thief.error is None, thief.error
        gone_at = time.time()
        producer.stop.set()
        producer.join(timeout=30)
        assert producer.error is None, producer.error
        expected = expected_from(dict(producer.sent))
        assert wait_until(lambda: expected <= seen([consumer]), 30)
        consumer.stop()
    finally:
        producer.stop.set()
        thief.go.set()
        if consumer.is_alive():
            consumer.stop()
    assert consumer.outcome is None, consumer.outcome
    duplicates = account(expected, [consumer])
    rows = consumer.snapshot()
    # the other partitions kept flowing while the victim was stolen
    for pid in map(str, range(PARTITIONS)):
        if pid != VICTIM:
            assert any(p == pid and stolen_at + 1.0 <= at <= gone_at for p, _, _, at in rows), pid
    # only the victim was read twice, from its last checkpoint: a window, not the stream
    assert {pid for pid, _ in duplicates} <= {VICTIM}, sorted(duplicates)[:10]
    victim_events = sum(1 for pid, _ in expected if pid == VICTIM)
    assert sum(duplicates.values()) < victim_events / 2, (sum(duplicates.values()), victim_events)
    assert thief.read > 0  # the thief did hold the partition
