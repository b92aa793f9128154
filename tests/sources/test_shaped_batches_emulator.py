"""Shaped batches against the emulator: 10 events/s per partition, ``min_batch_size=100, max_wait=5``.

The issue's figure: batches of about 50 events (5 s of traffic) instead of one or two, and one checkpoint write
per batch. The producer is azure-eventhub's own async client; the store counts the writes it receives.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

import pytest
from azure.eventhub import EventData
from azure.eventhub.aio import EventHubProducerClient

import rxhubs
from rxhubs import operators as hops
from rxhubs._shutdown import Shutdown
from rxhubs.emulator.pytest_plugin import emulator_factory  # noqa: F401  (fixture)
from rxhubs.stores import InMemoryCheckpointStore

RATE = 10.0  # events per second per partition
SECONDS = 17.0  # three full batches and a partial one per partition
PARTITIONS = ("0", "1")


async def _produce(conn: str) -> dict[str, int]:
    sent = dict.fromkeys(PARTITIONS, 0)
    async with EventHubProducerClient.from_connection_string(conn) as producer:
        due = time.monotonic()
        for tick in range(int(SECONDS * RATE)):
            # never faster than RATE: a send that fell behind (a loaded machine) is not made up in a burst
            due = max(due + 1 / RATE, time.monotonic())
            await asyncio.sleep(due - time.monotonic())
            await asyncio.gather(*(producer.send_batch([EventData(f"{p}-{tick}")], partition_id=p) for p in PARTITIONS))
            for pid in PARTITIONS:
                sent[pid] += 1
    return sent


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.parametrize("shaped", [True, False], ids=["min_batch_size=100", "unshaped"])
async def test_ten_events_a_second_make_batches_of_about_fifty_with_one_checkpoint_write_each(
    emulator_factory: Any,  # noqa: F811
    shaped: bool,
) -> None:
    """Shaped: batches of about 50, one write each. Unshaped (the baseline): the same traffic as batches of 1-2."""
    emulator = emulator_factory(hubs={"shaped": len(PARTITIONS)})
    conn = emulator.connection_string("shaped")
    hub = rxhubs.EventHub.from_connection_string(conn)
    store = InMemoryCheckpointStore()
    batches: list[tuple[str, list[int]]] = []
    expected: list[int] = []
    complete = asyncio.Event()

    def work(batch: rxhubs.EventBatch) -> None:
        batches.append((batch.partition_id, [e.sequence_number for e in batch.events]))
        if expected and sum(len(seqs) for _, seqs in batches) >= expected[0]:
            complete.set()

    stop, owned = Shutdown(), asyncio.Event()
    initialized: set[str] = set()

    def on_initialize(context: rxhubs.PartitionContext) -> None:
        initialized.add(context.partition_id)
        if len(initialized) == len(PARTITIONS):
            owned.set()

    pipeline = rxhubs.consume(
        hub, "$Default", store, owner_id="shaped", min_batch_size=100 if shaped else None, max_wait=5.0,
        load_balancing_interval=1.0, on_partition_initialize=on_initialize,
    ).pipe(
        hops.process(work),
        hops.checkpoint(store),  # the default: at most one write per partition per 5 s
    )
    running = asyncio.ensure_future(rxhubs.arun(pipeline, shutdown=stop, signals=()))
    try:
        await asyncio.wait_for(owned.wait(), 30.0)  # traffic starts once both partitions are read: no backlog
        sent = await _produce(conn)
        expected.append(sum(sent.values()))
        work_done = sum(len(seqs) for _, seqs in batches) >= expected[0]
        if not work_done:  # the last, partial batch of each partition comes 5 s after its first event
            await asyncio.wait_for(complete.wait(), 60.0)
        stop.request()
        await asyncio.wait_for(running, 30.0)
    finally:
        if not running.done():
            running.cancel()
        await hub.close()
    for pid in PARTITIONS:
        seqs = [s for p, batch in batches if p == pid for s in batch]
        assert seqs == list(range(sent[pid])), f"partition {pid}: every event once, in order"
    sizes = [len(seqs) for _, seqs in batches]
    full = [len(seqs) for pid in PARTITIONS for seqs in [b for p, b in batches if p == pid][:-1]]
    print("shaped" if shaped else "unshaped", "batch sizes:", sizes if shaped else statistics.median(sizes),
          "batches:", len(sizes), "checkpoint writes:", store.calls["update_checkpoint"])
    if not shaped:  # the baseline: every pull delivers what arrived, one or two events at this rate
        assert statistics.median(sizes) <= 2 and len(sizes) >= sum(sent.values()) / 2, sizes
        return
    assert max(sizes) < 100  # delivered by time, not by count, at this rate
    assert len(full) >= 2 * len(PARTITIONS)
    assert 35 <= statistics.median(full) <= 55, sizes  # about 5 s of traffic each (not 1 or 2 events)
    assert min(full) >= 25, sizes
    assert store.calls["update_checkpoint"] == len(batches), "one checkpoint write per batch"
    ns, name = hub.fully_qualified_namespace, hub.eventhub_name
    marks = {c.partition_id: c.sequence_number for c in await store.list_checkpoints(ns, name, "$Default")}
    assert marks == {pid: sent[pid] - 1 for pid in PARTITIONS}
