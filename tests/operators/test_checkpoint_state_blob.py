"""State committed with the checkpoint for real: the emulator, the blob store on Azurite, asyncio. A graceful
stop flushes the pairs; the next run restores each partition's state and reads on after its checkpoint."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest
from reactivex import operators as ops

import rxhubs
from rxhubs import EventBatch
from rxhubs import operators as hops
from rxhubs.stores import BlobCheckpointStore
from rxhubs.testing._azurite import Azurite
from tests.operators.state_kit import counting

pytestmark = [pytest.mark.azurite, pytest.mark.slow]

PARTITIONS = 2
FAST = {"load_balancing_interval": 1.0, "ownership_expiration": 4.0, "max_wait": 0.1}


async def _run(
    hub: rxhubs.EventHub, store: BlobCheckpointStore, expected: int, more: bool = False
) -> tuple[list[Any], Counter[str]]:
    """Consume until ``expected`` events passed, then stop gracefully; what was restored, and what was read.

    With ``more``, each partition's first batch makes one more event ``s`` be sent to it: its state then
    reaches the store only through the flush of the stop (the writes after the first wait 30 s).
    """
    seen: list[Any] = []
    read: Counter[str] = Counter()
    stop = rxhubs.Shutdown()
    sending: list[asyncio.Task[Any]] = []

    def downstream(batch: EventBatch) -> None:
        if more and not any(k.startswith(f"{batch.partition_id}:") for k in read):
            sending.append(asyncio.get_running_loop().create_task(hub.send([b"s"], partition_id=batch.partition_id)))
        read.update(f"{batch.partition_id}:{e.body.decode()}" for e in batch)
        if sum(read.values()) >= expected:
            stop.request()

    pipeline = rxhubs.consume(hub, "$Default", store, **FAST).pipe(
        counting(seen=seen),
        hops.checkpoint(store, max_interval=30.0),  # the first write at once; the rest only by the stop's flush
        ops.do_action(downstream),
    )
    await asyncio.wait_for(rxhubs.arun(pipeline, shutdown=stop, signals=()), 60)
    await asyncio.gather(*sending)
    return seen, read


async def test_a_stop_flushes_the_pairs_and_the_next_run_restores_them_and_reads_on(
    emulator_factory: Any, azurite: Azurite, blob_container: str
) -> None:
    emulator = emulator_factory(hubs={"counted": PARTITIONS})
    hub = rxhubs.EventHub.from_connection_string(emulator.connection_string("counted"))
    store = BlobCheckpointStore.from_connection_string(azurite.connection_string, blob_container)
    try:
        for pid in map(str, range(PARTITIONS)):
            await hub.send([b"p", b"q", b"p"], partition_id=pid)
        first_seen, first_read = await _run(hub, store, 4 * PARTITIONS, more=True)
        assert sorted(first_seen) == [(str(p), None) for p in range(PARTITIONS)]

        for pid in map(str, range(PARTITIONS)):
            await hub.send([b"q", b"r"], partition_id=pid)
        second_seen, second_read = await _run(hub, store, 2 * PARTITIONS)
    finally:
        await hub.close()
        await store.close()

    restored = {"p": 2, "q": 1, "s": 1}  # s came after the first write: the stop's flush wrote it
    assert sorted(second_seen) == [(str(p), restored) for p in range(PARTITIONS)]
    assert second_read == Counter({f"{p}:{b}": 1 for p in range(PARTITIONS) for b in "qr"})  # no replay
    assert first_read == Counter({f"{p}:{b}": n for p in range(PARTITIONS) for b, n in restored.items()})
