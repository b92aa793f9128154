"""An owner serves a join between its rounds: it watches the presence records (under asyncio).

``a`` owns 4 partitions with a 60 s interval (its next round is a minute away); ``b`` joins. Before, ``a`` saw ``b``
only at its next round (``rxhubs bench scale --real``: with the owner's round phase and the joiners' records coming
over several seconds, seven joiners took 2.8-3.3 intervals against 2). Now ``a`` lists the presence records every
quarter interval while it holds more than its share would be with one more consumer, and runs a round as soon as a
live record of a consumer it did not count shows: ``b`` gets its two partitions long before ``a``'s next regular
round; and ``b``, awaiting, looks from a quarter interval after its presence record on (not only from ``a``'s next
round), so it reads what it was handed before then too. Nothing is read twice or lost. Broken by never watching
(``_watch_after`` planning no watch): ``b`` has nothing after the 40 s this test waits; and by leaving ``b``'s looks
to ``a``'s next round (no ``Looks.watched_from``): ``b`` reads nothing of its partitions within 40 s.
"""

from __future__ import annotations

import asyncio

import rxhubs
from rxhubs import EventBatch
from rxhubs import operators as hops
from rxhubs.stores import InMemoryCheckpointStore
from rxhubs.testing import InMemoryEventHub
from tests.balancing.test_release_in_flight import GROUP, owners, until

SLOW = {"load_balancing_interval": 60.0, "ownership_expiration": 360.0, "max_wait": 0.05, "store_timeout": 30.0}


async def test_an_owner_hands_over_to_a_newcomer_before_its_next_round() -> None:
    hub = InMemoryEventHub(partition_count=4)
    store = InMemoryCheckpointStore()
    seen: dict[str, list[tuple[str, int]]] = {"a": [], "b": []}
    stops = {"a": rxhubs.Shutdown(), "b": rxhubs.Shutdown()}

    def run(owner: str) -> asyncio.Task[int]:
        async def work(batch: EventBatch) -> None:
            seen[owner].extend((batch.partition_id, e.sequence_number) for e in batch)

        pipeline = rxhubs.consume(hub, GROUP, store, owner_id=owner, **SLOW).pipe(
            hops.process(work), hops.checkpoint(store, max_interval=0.2))
        return asyncio.create_task(rxhubs.arun(pipeline, shutdown=stops[owner], grace=10.0, signals=()))

    for pid in hub.partition_ids:
        hub.send([b"before"], partition_id=pid)
    a = run("a")
    await until(lambda: sorted(owners(hub, store).values()) == ["a"] * 4 and len(seen["a"]) == 4)
    b = run("b")
    try:  # a's next regular round is ~60 s after its first: the handover must come from the watch
        await asyncio.wait_for(until(lambda: sorted(owners(hub, store).values()) == ["a", "a", "b", "b"]), 40.0)
    except TimeoutError:
        raise AssertionError(f"b got nothing before a's next round: {owners(hub, store)}") from None
    for pid in hub.partition_ids:
        hub.send([b"after"], partition_id=pid)
    try:  # b looks from a quarter interval after its presence record on, not only from a's next round
        await asyncio.wait_for(until(lambda: len(seen["a"]) + len(seen["b"]) == 8), 40.0)
    except TimeoutError:
        raise AssertionError(f"b did not read what it was handed before a's next round: {seen}") from None
    for owner in ("a", "b"):
        stops[owner].request()
    await asyncio.gather(a, b)
    every = seen["a"] + seen["b"]
    assert sorted(every) == sorted(set(every)) and len(every) == 8, seen  # nothing twice, nothing lost
    assert {pid for pid, _ in seen["b"]} == {p for p, o in owners_of(seen).items() if o == "b"}


def owners_of(seen: dict[str, list[tuple[str, int]]]) -> dict[str, str]:
    """Who processed each partition's second event (the one sent after the handover)."""
    return {pid: owner for owner, events in seen.items() for pid, number in events if number == 1}
