"""The Event Hubs service restarts mid-run (the emulator with durable logs, ``data_dir``).

A consumer (``consume`` + ``checkpoint``, SQLite store) is in the middle of a backlog when the emulator goes
down and comes back on the same port with the same data. While the burst is sent and the emulator restarts,
the consumer's work is slow (an async handler that takes 0.2 s a batch of 50: at most 1,000 events/s over the
four partitions), so the backlog is still in the hub when the restart hits, however fast the reader and the
producer are. Its receivers retry and reopen after the last event they delivered; events sent before the
restart (durable) and after it all arrive, and the redone work is none (the consumer kept its partitions, so
its receivers resume after the last event they delivered).
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from rxhubs import operators as hops
from rxhubs.stores import SqliteCheckpointStore
from tests.faults.kit import PARTITIONS, Consumer, Producer, account, seen, wait_until

BURST = 3000  # events per partition, sent just before the restart: a backlog the consumer is still reading
SLOW_BATCH = 0.2  # s of work per batch of 50 while the burst is sent and the emulator restarts: 1,000 events/s


def send_burst(connection_string: str, per_partition: int) -> dict[str, int]:
    from azure.eventhub import EventData, EventHubProducerClient

    sent: dict[str, int] = {}
    with EventHubProducerClient.from_connection_string(connection_string) as producer:
        for pid in map(str, range(PARTITIONS)):
            left = per_partition
            while left:
                batch = producer.create_batch(partition_id=pid)
                n = 0
                while n < left:
                    try:
                        batch.add(EventData(b"b" * 200))
                    except ValueError:
                        break
                    n += 1
                producer.send_batch(batch)
                left -= n
            sent[pid] = per_partition
    return sent


@pytest.mark.slow
def test_emulator_restart_with_durable_data_mid_run_nothing_lost(tmp_path: Path, emulator_factory: Any) -> None:
    emulator = emulator_factory(hubs={"restart": PARTITIONS}, data_dir=tmp_path / "emulator")
    conn = emulator.connection_string("restart")
    slow = threading.Event()

    async def work(batch: Any) -> None:
        if slow.is_set():
            await asyncio.sleep(SLOW_BATCH)  # slow work: the burst piles up in the hub behind it

    consumer = Consumer(
        "a",
        conn,
        lambda: SqliteCheckpointStore(tmp_path / "cp.sqlite"),
        middle=[hops.process(work)],
        max_batch_size=50,
        # a lone consumer: the 3 s expiration of the other fault tests let its renewals lapse under the full suite's
        # load (its partitions expired, and were read again from their checkpoints): not what this test is about
        ownership_expiration=30.0,
    )
    before = Producer(conn)
    after = Producer(conn)
    try:
        consumer.start_and_wait()
        before.start()
        assert wait_until(lambda: len(seen([consumer])) > 200, 15)
        before.stop.set()
        before.join(timeout=30)
        assert before.error is None, before.error
        slow.set()
        burst = send_burst(conn, BURST)
        emulator.restart()
        read_at_restart = len(seen([consumer]))
        slow.clear()
        assert emulator.connection_string("restart") == conn  # same port, same data
        after.start()
        time.sleep(3.0)
        after.stop.set()
        after.join(timeout=30)
        assert after.error is None, after.error
        total = {pid: before.sent[pid] + burst[pid] + after.sent[pid] for pid in map(str, range(PARTITIONS))}
        expected = {(pid, seq) for pid, n in total.items() for seq in range(n)}
        assert read_at_restart < len(expected) - sum(after.sent.values())  # the restart hit mid-backlog
        assert wait_until(lambda: expected <= seen([consumer]), 45), len(expected - seen([consumer]))
        consumer.stop()
    finally:
        before.stop.set()
        after.stop.set()
        if consumer.is_alive():
            consumer.stop()
    assert any(op == "receive" for op, _ in consumer.operations), consumer.operations  # the restart was felt
    assert consumer.outcome is None, consumer.outcome
    duplicates = account(expected, [consumer])
    # the receivers reopened just after the last event they delivered: nothing was read twice
    assert not duplicates, (sum(duplicates.values()), sorted(duplicates)[:10])
