"""The handover without a stamp, on the user's path: ``rxhubs.consume`` with a ``BlobCheckpointStore`` each (Azurite).

``a`` owns four partitions; ``b`` joins and ``a`` hands it two. ``a``'s balancing loop notes each handover with its
store, so the ownership blob it writes for ``b`` names ``a``'s period and gives the checkpoint as ``a`` left it, and
``b``'s fence takes the position from the listing that showed the hand: it sends no request for a checkpoint blob
at all, and writes nothing: until ``b`` checkpoints, the checkpoint blobs of its partitions still carry ``a``'s key
(a stamp would have put ``b``'s there). ``b`` starts right after ``a``'s last checkpointed event: nothing twice,
nothing lost.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import Any
from urllib.parse import unquote

import rxhubs
from rxhubs import EventBatch
from rxhubs import operators as hops
from rxhubs.stores import BlobCheckpointStore
from rxhubs.stores._blob_fence import FENCE_KEY
from rxhubs.testing import InMemoryEventHub

GROUP = "$Default"
SETTINGS: dict[str, Any] = {"load_balancing_interval": 0.5, "ownership_expiration": 6.0, "max_wait": 0.05}


async def until(condition: Any) -> None:
    """Poll until ``condition()``; a condition never reached fails by the test's timeout (pytest-timeout)."""
    for _ in itertools.count():
        if condition():
            return
        await asyncio.sleep(0.01)


class Consumer:
    def __init__(
        self, hub: InMemoryEventHub, store: BlobCheckpointStore, owner_id: str, checkpoints: bool, **options: Any
    ) -> None:
        self.processed: list[tuple[str, int]] = []
        self.first: dict[str, float] = {}  # when it processed its first event of each partition
        self.stop = rxhubs.Shutdown()

        def work(batch: EventBatch) -> None:
            self.processed += [(batch.context.partition_id, e.sequence_number) for e in batch.events]
            if batch.events:
                self.first.setdefault(batch.context.partition_id, time.monotonic())

        settings = {**SETTINGS, **options}
        pipeline = rxhubs.consume(hub, GROUP, store, owner_id=owner_id, **settings).pipe(hops.process(work))
        if checkpoints:
            pipeline = pipeline.pipe(hops.checkpoint(store, max_interval=0.0))
        self.task = asyncio.create_task(rxhubs.arun(pipeline, shutdown=self.stop, grace=10.0, signals=()))

    def partitions(self) -> set[str]:
        return {pid for pid, _ in self.processed}

    async def close(self) -> None:
        self.stop.request()
        await self.task


async def test_the_recipient_starts_from_the_former_owners_checkpoint_without_stamping_it(
    azurite: Any, blob_container: str
) -> None:
    hub = InMemoryEventHub(partition_count=4)
    sent_by_b: list[tuple[str, str]] = []  # (method, url) of b's requests, as its storage client's pipeline sends them

    def note(request: Any) -> None:
        sent_by_b.append((request.http_request.method, unquote(str(request.http_request.url))))

    stores = [
        BlobCheckpointStore.from_connection_string(azurite.connection_string, blob_container),
        BlobCheckpointStore.from_connection_string(azurite.connection_string, blob_container, raw_request_hook=note),
    ]
    sent = 0

    async def feed() -> None:
        nonlocal sent
        while True:
            hub.send([b"x"] * 4)
            sent += 4
            await asyncio.sleep(0.02)

    feeder = asyncio.create_task(feed())
    a = Consumer(hub, stores[0], "a", checkpoints=True)
    await until(lambda: len(a.partitions()) == 4)
    b = Consumer(hub, stores[1], "b", checkpoints=False)  # whatever b's checkpoint blobs show, b did not write
    await until(lambda: len(b.partitions()) == 2)
    handed = b.partitions()
    checkpoint_requests = [(method, url) for method, url in sent_by_b if "/checkpoint/" in url]
    assert checkpoint_requests == [], checkpoint_requests  # the hands gave the positions: nothing read, nothing stamped
    for pid in sorted(handed):
        blob = stores[1]._blob(f"{hub.fully_qualified_namespace}/{hub.eventhub_name}/{GROUP}/checkpoint/{pid}".lower())
        props = await blob.get_blob_properties()
        assert props.metadata[FENCE_KEY].endswith(" a"), (pid, props.metadata)  # a's period: b did not stamp
    feeder.cancel()
    await a.close()
    await b.close()
    for store in stores:
        await store.close()
    # b began right after a's last event of each handed partition: nothing processed twice, nothing skipped
    for pid in handed:
        by_a = [n for p, n in a.processed if p == pid]
        by_b = [n for p, n in b.processed if p == pid]
        assert by_b[0] == max(by_a) + 1, (pid, max(by_a), by_b[:3])
    everything = sorted(a.processed + b.processed)
    assert len(everything) == len(set(everything))


class SlowAnswers(BlobCheckpointStore):
    """The blob store whose checkpoint writes are answered 1.5 s late (a busy storage account): each write lands,
    and its caller hears of it 1.5 s later. Notes when each write of each partition was answered."""

    answered: dict[tuple[str, int], float]

    async def update_checkpoint_fenced(self, checkpoint: rxhubs.Checkpoint, ownership: rxhubs.Ownership) -> None:
        await super().update_checkpoint_fenced(checkpoint, ownership)
        await asyncio.sleep(1.5)
        self.answered[(checkpoint.partition_id, checkpoint.sequence_number)] = time.monotonic()


async def test_the_release_does_not_wait_for_the_answer_to_the_last_checkpoint(
    azurite: Any, blob_container: str
) -> None:
    """``a``'s checkpoint writes are answered 1.5 s late. At the handover ``a`` releases each partition as soon as
    its last write is sent, the hand naming that write's position: ``b`` processes its first event of each handed
    partition before ``a`` hears that the write landed, starts right after ``a``'s last event, and nothing is
    processed twice or lost. (Waiting for the answer, ``b`` would start 1.5 s later.)"""
    hub = InMemoryEventHub(partition_count=4)
    slow = SlowAnswers.from_connection_string(azurite.connection_string, blob_container)
    slow.answered = {}
    stores = [slow, BlobCheckpointStore.from_connection_string(azurite.connection_string, blob_container)]

    async def feed() -> None:
        while True:
            hub.send([b"x"] * 4)
            await asyncio.sleep(0.02)

    feeder = asyncio.create_task(feed())
    a = Consumer(hub, stores[0], "a", checkpoints=True, store_timeout=5.0)  # (writes take 1.5 s)
    await until(lambda: len(a.partitions()) == 4)
    b = Consumer(hub, stores[1], "b", checkpoints=True)
    await until(lambda: len(b.partitions()) == 2)
    handed = b.partitions()
    await asyncio.sleep(2.0)  # every write of a's is answered by now
    feeder.cancel()
    await a.close()
    await b.close()
    for store in stores:
        await store.close()
    for pid in sorted(handed):
        last = max(n for p, n in a.processed if p == pid)
        by_b = [n for p, n in b.processed if p == pid]
        assert by_b[0] == last + 1, (pid, last, by_b[:3])  # right after a's last event
        assert (pid, last) in slow.answered, (pid, last, sorted(k for k in slow.answered if k[0] == pid)[-3:])
        assert b.first[pid] < slow.answered[(pid, last)], (pid, b.first[pid], slow.answered[(pid, last)])
    everything = sorted(a.processed + b.processed)
    assert len(everything) == len(set(everything))
