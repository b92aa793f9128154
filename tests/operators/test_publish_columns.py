"""hops.publish with its default options into an rxhubs.EventHub: sends go as columns (no object per event), and
what arrives is what was read (bodies, properties, keys), in order per key, each checkpoint after its events'
acknowledgement. The emulator, the real azure-eventhub client under rxhubs on both sides.

Broken on purpose to see it fail: each send's columns reversed (order per key), the plain events' key taken as
None (keys), the other events' properties dropped (properties), the send left running in the background while
the batch moves on (a checkpoint before the acknowledgement): each failed.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from reactivex import operators as ops

import rxhubs
from rxhubs import Checkpoint, Ownership
from rxhubs import operators as hops
from rxhubs.stores import InMemoryCheckpointStore
from rxhubs.transport._encode import compiled_encoder
from rxhubs.transport._publisher import EventColumns
from tests.operators.test_publish_emulator import FAST, read_all, run_until

PER_KEY = 40
PLAIN_KEYS = ["plain-0", "plain-1", "plain-2"]  # events without properties (the receive path's plain events)
PROPS_KEYS = ["props-0", "props-1"]  # events with application properties


class Acks:
    """The target's ``publish`` wrapped: the bodies it acknowledged, and the kinds of sequence it was given."""

    def __init__(self, hub: rxhubs.EventHub) -> None:
        self.inner = hub.publish
        self.acked: set[bytes] = set()
        self.kinds: set[str] = set()

    async def publish(self, events: Sequence[hops.OutgoingEvent], *, partition_id: str | None = None,
                      partition_key: str | None = None) -> None:
        self.kinds.add(type(events).__name__)
        bodies = [e.body for e in events]
        await self.inner(events, partition_id=partition_id, partition_key=partition_key)
        self.acked.update(bodies)


class Store(InMemoryCheckpointStore):
    """At every checkpoint write: was every source event up to it acknowledged by the target?"""

    def __init__(self, acks: Acks, read: dict[tuple[str, int], bytes]) -> None:
        super().__init__()
        self.acks, self.read = acks, read
        self.early: list[Checkpoint] = []
        self.writes = 0

    def _check(self, checkpoint: Checkpoint) -> None:
        self.writes += 1
        for (pid, seq), body in list(self.read.items()):
            if pid == checkpoint.partition_id and seq <= checkpoint.sequence_number and body not in self.acks.acked:
                self.early.append(checkpoint)
                return

    async def update_checkpoint(self, checkpoint: Checkpoint) -> None:
        self._check(checkpoint)
        await super().update_checkpoint(checkpoint)

    async def update_checkpoint_fenced(self, checkpoint: Checkpoint, ownership: Ownership) -> None:
        self._check(checkpoint)
        await super().update_checkpoint_fenced(checkpoint, ownership)


async def test_default_publish_sends_columns_keeps_bodies_properties_keys_and_order_and_acks_first(
    emulator_factory: Any,
) -> None:
    emulator = emulator_factory(hubs={"a": 4, "b": 4})
    source = rxhubs.EventHub.from_connection_string(emulator.connection_string("a"))
    target = rxhubs.EventHub.from_connection_string(emulator.connection_string("b"))
    acks = Acks(target)
    target.publish = acks.publish  # type: ignore[method-assign]
    total = PER_KEY * (len(PLAIN_KEYS) + len(PROPS_KEYS))
    try:
        for n in range(0, PER_KEY, 10):  # interleaved keys, several sends per key
            await asyncio.gather(
                *(source.send([f"{k}/{i}" for i in range(n, n + 10)], partition_key=k) for k in PLAIN_KEYS),
                *(source.send([f"{k}/{i}" for i in range(n, n + 10)], partition_key=k, properties={"k": k, "n": n})
                  for k in PROPS_KEYS),
            )
        read: dict[tuple[str, int], bytes] = {}

        def remember(batch: rxhubs.EventBatch) -> rxhubs.EventBatch:
            read.update(((batch.partition_id, e.sequence_number), e.body) for e in batch)
            return batch

        store = Store(acks, read)
        pipeline = rxhubs.consume(source, "$Default", store, max_batch_size=7, **FAST).pipe(
            ops.map(remember), hops.publish(target), hops.checkpoint(store, max_interval=0.2),
        )

        async def all_checkpointed() -> bool:
            written = store.peek(source.fully_qualified_namespace, "a", "$Default")[1]
            return sum(c.sequence_number + 1 for c in written) == total

        await run_until(pipeline, all_checkpointed)
        published = await read_all(target, total)
        native = target._senders.native
    finally:
        await source.close()
        await target.close()
    if compiled_encoder() is not None:
        assert native and acks.kinds == {"EventColumns"}  # the columns went to the native send path
    by_key: dict[str, list[bytes]] = defaultdict(list)
    for event in published:
        key = str(event.partition_key)
        by_key[key].append(event.body)
        if key in PROPS_KEYS:
            n = int(event.body.decode().split("/")[1])
            assert event.properties == {"k": key, "n": n - n % 10}
        else:
            assert event.properties == {}
    assert by_key == {k: [f"{k}/{i}".encode() for i in range(PER_KEY)] for k in PLAIN_KEYS + PROPS_KEYS}
    assert len(published) == total
    assert store.early == [] and store.writes >= 4  # every checkpoint after its events' acknowledgement


def test_columns_of_a_send_share_one_empty_properties_mapping_or_keep_each() -> None:
    from rxhubs.operators._publish_columns import _NO_PROPERTIES, as_columns

    plain = as_columns([b"a", b"b"], [_NO_PROPERTIES, {}])
    assert isinstance(plain, EventColumns) and plain.properties == {} and not isinstance(plain.properties, list)
    mixed = as_columns([b"a", b"b"], [_NO_PROPERTIES, {"x": 1}])
    assert mixed.properties == [{}, {"x": 1}]
    assert [e.properties for e in mixed] == [{}, {"x": 1}]
