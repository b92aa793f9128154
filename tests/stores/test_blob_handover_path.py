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
import contextlib
import itertools
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
        self.stop = rxhubs.Shutdown()

        def work(batch: EventBatch) -> None:
            self.processed += [(batch.context.partition_id, e.sequence_number) for e in batch.events]

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


async def feed(hub: InMemoryEventHub) -> None:
    """Four events every 20 ms, one per partition, until cancelled."""
    while True:
        hub.send([b"x"] * 4)
        await asyncio.sleep(0.02)


async def a_then_b(hub: InMemoryEventHub, stores: list[BlobCheckpointStore]) -> tuple[Consumer, Consumer, Any]:
    """Feeding the hub: ``a`` (checkpointing) takes the four partitions, then ``b`` (not checkpointing: whatever its
    checkpoint blobs show, it did not write) joins and is handed two; the consumers and the feeder's task."""
    feeder = asyncio.create_task(feed(hub))
    a = Consumer(hub, stores[0], "a", checkpoints=True)
    await until(lambda: len(a.partitions()) == 4)
    b = Consumer(hub, stores[1], "b", checkpoints=False)
    await until(lambda: len(b.partitions()) == 2)
    return a, b, feeder


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
    a, b, feeder = await a_then_b(hub, stores)
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


class HeldAnswers(BlobCheckpointStore):
    """The blob store whose checkpoint writes land at once and are answered only once :attr:`release` is set (or 4 s
    later, so that a release that waits for an answer still gets one: a busy storage account)."""

    release: asyncio.Event
    answered: set[tuple[str, int]]

    async def update_checkpoint_fenced(self, checkpoint: rxhubs.Checkpoint, ownership: rxhubs.Ownership) -> None:
        await super().update_checkpoint_fenced(checkpoint, ownership)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.release.wait(), 4.0)
        self.answered.add((checkpoint.partition_id, checkpoint.sequence_number))


async def test_the_release_does_not_wait_for_the_answer_to_the_last_checkpoint(
    azurite: Any, blob_container: str
) -> None:
    """``a``'s checkpoint writes are answered only once ``b`` has read both partitions it is handed. At the handover
    ``a`` releases each partition as soon as its last write is sent, the hand naming that write's position: ``b``
    processes its first event of each handed partition while ``a`` has not heard that the write landed, starts
    right after ``a``'s last event, and nothing is processed twice or lost. (Waiting for the answer, ``b`` would
    start only once the answers came, 4 s later.)"""
    hub = InMemoryEventHub(partition_count=4)
    held = HeldAnswers.from_connection_string(azurite.connection_string, blob_container)
    held.release, held.answered = asyncio.Event(), set()
    stores = [held, BlobCheckpointStore.from_connection_string(azurite.connection_string, blob_container)]

    feeder = asyncio.create_task(feed(hub))
    a = Consumer(hub, stores[0], "a", checkpoints=True, store_timeout=10.0)  # (answers may take 4 s)
    await until(lambda: len(a.partitions()) == 4)
    held.release.set()  # a's first writes answered; from now on they are held again
    await until(lambda: len(held.answered) >= 4)
    held.release.clear()
    b = Consumer(hub, stores[1], "b", checkpoints=True)
    await until(lambda: len(b.partitions()) == 2)
    handed = b.partitions()
    # b read both before a heard that its last writes of them landed
    unanswered = {pid: max(n for p, n in a.processed if p == pid) for pid in handed}
    assert not {(pid, n) for pid, n in unanswered.items()} & held.answered, (unanswered, sorted(held.answered))
    held.release.set()
    feeder.cancel()
    await a.close()
    await b.close()
    marks = {c.partition_id: c.sequence_number
             for c in await stores[1].list_checkpoints(hub.fully_qualified_namespace, hub.eventhub_name, GROUP)}
    for store in stores:
        await store.close()
    for pid in sorted(handed):
        last = max(n for p, n in a.processed if p == pid)
        by_b = [n for p, n in b.processed if p == pid]
        assert by_b[0] == last + 1, (pid, last, by_b[:3])  # right after a's last event
        # and the checkpoint reached it: a's last write landed, or b's later one (a's then refused: b wrote since)
        assert marks[pid] >= last, (pid, last, marks[pid])
    everything = sorted(a.processed + b.processed)
    assert len(everything) == len(set(everything))
