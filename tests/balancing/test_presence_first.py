"""A consumer writes its presence record beside its first read of the partition ids, not after it.

The others count consumers by their presence records. A newcomer's first record went out with its first claim,
after that read and both listings: at 512 partitions on a loaded machine (``rxhubs bench scale --real``) the seven
joiners' records came 5-13 s after they started, and the owner's round that fell meanwhile dealt only to those it
saw (the rest got their share one interval later). Here the hub holds ``b``'s read of the partition ids until ``b``'s
presence record is in the store: ``b`` must write it first, and then run its round as usual (its first claim renews
that record). Broken by writing the presence record with the first claim only (the old order): the record never
shows while the read is held, and the test times out waiting for it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import rxhubs
from rxhubs.balancing._planner import presence_group
from rxhubs.stores import InMemoryCheckpointStore
from rxhubs.testing import InMemoryEventHub
from tests.balancing.test_release_in_flight import GROUP, owners, until


class SlowIds(InMemoryEventHub):
    """A hub whose partition-id reads wait until :attr:`answer` is set (a loaded emulator's management link)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.answer = asyncio.Event()
        self.reads = 0

    async def get_partition_ids(self) -> Sequence[str]:
        self.reads += 1
        await self.answer.wait()
        return await super().get_partition_ids()


async def test_a_newcomer_is_present_before_it_knows_the_partition_ids() -> None:
    hub = SlowIds(partition_count=4)
    store = InMemoryCheckpointStore()
    ns, name = hub.fully_qualified_namespace, hub.eventhub_name

    def present() -> set[str]:
        records, _ = store.peek(ns, name, presence_group(GROUP))
        return {o.owner_id for o in records if o.owner_id}

    shutdown = rxhubs.Shutdown()
    streams = rxhubs.partitions(hub, GROUP, store, owner_id="b", load_balancing_interval=0.2,
                                ownership_expiration=3.0)
    task = asyncio.create_task(rxhubs.arun(streams, shutdown=shutdown, signals=()))
    await until(lambda: hub.reads > 0)
    try:
        await asyncio.wait_for(until(lambda: present() == {"b"}), timeout=30.0)
    except TimeoutError:
        raise AssertionError("b's presence record was not written while its read of the ids was held") from None
    assert not owners(hub, store)  # nothing claimed yet: the round waits for the ids
    hub.answer.set()
    await until(lambda: sorted(owners(hub, store).values()) == ["b"] * 4)
    records, _ = store.peek(ns, name, presence_group(GROUP))
    assert [o.owner_id for o in records] == ["b"]  # one record, renewed by the first claim (not a second one)
    shutdown.request()
    await task
    assert set(owners(hub, store).values()) == {""}
