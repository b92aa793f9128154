"""rxhubs consumers and the Azure SDK's processors on one store: presence records stay out of the SDK's way."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from azure.eventhub import EventHubConsumerClient, LoadBalancingStrategy
from azure.eventhub._eventprocessor.in_memory_checkpoint_store import InMemoryCheckpointStore as SdkMemoryStore
from azure.eventhub._eventprocessor.ownership_manager import OwnershipManager

import rxhubs
from rxhubs._shutdown import Shutdown
from rxhubs.balancing import presence_group
from rxhubs.testing import InMemoryEventHub


async def test_presence_records_are_invisible_to_the_sdk_and_its_rules_claim_only_real_partitions() -> None:
    hub = InMemoryEventHub(4)
    sdk_store = SdkMemoryStore()  # the SDK's own store (sync, dicts), wrapped by rxhubs
    ns, name = hub.fully_qualified_namespace, hub.eventhub_name
    stop = Shutdown()
    pipeline = rxhubs.consume(
        hub, "$Default", sdk_store, owner_id="rx", load_balancing_interval=0.05, ownership_expiration=0.2
    )
    runner = asyncio.create_task(rxhubs.arun(pipeline, shutdown=stop, signals=()))
    await asyncio.sleep(0.3)

    listed = sdk_store.list_ownership(ns, name, "$Default")
    assert sorted(o["partition_id"] for o in listed) == ["0", "1", "2", "3"]
    assert {o["owner_id"] for o in listed} == {"rx"}
    presence = sdk_store.list_ownership(ns, name, presence_group("$Default"))
    assert [(o["partition_id"], o["owner_id"]) for o in presence] == [("rx", "rx")]

    # an SDK processor joining runs its rules on what it lists: only the hub's partitions can come up
    to_claim = sdk_rules("sdk", ownership_timeout=-1.0)._balance_ownership(  # every record expired: claimable
        [dict(o) for o in listed], list(hub.partition_ids)
    )
    assert {o["partition_id"] for o in to_claim} <= set(hub.partition_ids)

    stop.request()
    await asyncio.wait_for(runner, 5.0)
    assert {o["owner_id"] for o in sdk_store.list_ownership(ns, name, "$Default")} == {""}
    released = sdk_store.list_ownership(ns, name, presence_group("$Default"))  # presence, and the stop's leaving
    assert sorted((o["partition_id"], o["owner_id"]) for o in released) == [("rx", ""), ("rx$leaving", "")]


def test_the_balanced_strategy_moves_one_partition_per_round_with_the_real_loop() -> None:
    from tests.balancing.kit import Group

    g = Group(8, interval=10.0)
    g.add("a", at=0.0, strategy="balanced")  # claims one partition per round
    g.add("b", at=5.0, strategy="balanced")  # likewise, from 5 s
    history: list[tuple[int, int]] = []
    for t in range(0, 80, 10):
        g.run(t + 9.0)
        history.append((len(g.consumers["a"].owned), len(g.consumers["b"].owned)))
    assert history == [(1, 1), (2, 2), (3, 3), (4, 4), (4, 4), (4, 4), (4, 4), (4, 4)]
    assert g.counts() == {"a": 4, "b": 4}


def test_a_greedy_owner_hands_its_whole_surplus_to_a_balanced_newcomer_at_once() -> None:
    """The balanced strategy limits what a consumer claims, steals and releases; what a greedy owner hands to it is
    its own at once (were it released instead, the partitions the newcomer does not claim yet would go unread)."""
    from tests.balancing.kit import Group

    g = Group(8, interval=10.0)
    g.add("a", at=0.0)
    g.add("b", at=5.0, strategy="balanced")
    g.run(12.0)
    assert g.counts() == {"a": 4, "b": 4}
    assert g.readers_per_partition() and all(len(r) == 1 for r in g.readers_per_partition().values())


def sdk_rules(owner_id: str, ownership_timeout: float) -> Any:
    """The official processor's own balancing rules (azure-eventhub's OwnershipManager, greedy)."""
    conn = "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=k;SharedAccessKey=a2V5;EntityPath=h"
    client = EventHubConsumerClient.from_connection_string(conn, "$Default")
    return OwnershipManager(client, "$Default", owner_id, None, ownership_timeout, LoadBalancingStrategy.GREEDY, None)


def test_the_official_rules_steal_one_partition_per_round() -> None:
    """What the rebalance benchmark's baseline models: a newcomer facing one owner of 8 steals exactly one."""
    now = time.time()
    listed = [
        {
            "fully_qualified_namespace": "ns.servicebus.windows.net",
            "eventhub_name": "h",
            "consumer_group": "$Default",
            "partition_id": str(p),
            "owner_id": "a",
            "last_modified_time": now,
            "etag": str(p),
        }
        for p in range(8)
    ]
    claims = sdk_rules("b", ownership_timeout=30.0)._balance_ownership(listed, [str(p) for p in range(8)])
    assert len(claims) == 1 and claims[0]["owner_id"] == "b"
