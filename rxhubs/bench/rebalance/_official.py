"""The official processor's balancing rules, simulated beside rxhubs for the ``rebalance`` benchmark.

``balance_ownership_official`` is ``OwnershipManager._balance_ownership`` (azure-eventhub 5.x, greedy strategy)
ported line for line with ``random`` injected, so the simulation is deterministic; ``_Official`` runs it for a
group of simulated SDK processors on the same virtual clock and store as the rxhubs consumers.
"""

from __future__ import annotations

import math
import random
from collections import Counter, defaultdict
from dataclasses import replace
from typing import Any

from reactivex import abc

from rxhubs._models import Ownership
from rxhubs.bench.rebalance._sim import EXPIRY, GROUP, INTERVAL, _Group, _World
from rxhubs.stores._sdk import _ownership_dict as _to_dict  # the SDK's record shape, as the adapter writes it

OFFICIAL = "azure-eventhub EventProcessor rules (_balance_ownership, greedy)"


def _to_ownership(d: dict[str, Any]) -> Ownership:
    return Ownership(
        d["fully_qualified_namespace"],
        d["eventhub_name"],
        d["consumer_group"],
        d["partition_id"],
        d["owner_id"],
        d.get("last_modified_time"),
        d.get("etag"),
    )


def balance_ownership_official(
    ownership_list: list[dict[str, Any]],
    all_partition_ids: list[str],
    *,
    owner_id: str,
    now: float,
    ownership_timeout: float,
    namespace: str,
    eventhub_name: str,
    consumer_group: str,
    rng: random.Random,
) -> list[dict[str, Any]]:
    """``OwnershipManager._balance_ownership`` (greedy) of azure-eventhub 5.x, with ``random`` injected."""
    ownership_dict = {x["partition_id"]: x for x in ownership_list}
    unclaimed_partition_ids = [pid for pid in all_partition_ids if pid not in ownership_dict]
    released_partitions = [
        x for x in ownership_list if x["last_modified_time"] + ownership_timeout < now or not x["owner_id"]
    ]
    released_partition_ids = [ownership["partition_id"] for ownership in released_partitions]
    claimable_partition_ids = unclaimed_partition_ids + released_partition_ids

    active_ownership = [o for o in ownership_list if o not in released_partitions]
    active_ownership_by_owner: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for ownership in active_ownership:
        active_ownership_by_owner[ownership["owner_id"]].append(ownership)
    active_ownership_self = active_ownership_by_owner[owner_id]

    all_partition_count = len(all_partition_ids)
    owners_count = len(active_ownership_by_owner) + (0 if owner_id in active_ownership_by_owner else 1)
    expected_count_per_owner = all_partition_count // owners_count
    max_count_per_owner = int(math.ceil(all_partition_count * 1.0 / owners_count))  # noqa: RUF046 - as in the SDK

    to_claim = active_ownership_self
    if len(active_ownership_self) < max_count_per_owner:
        to_try_steal = True
        to_greedy_claim_ids = rng.sample(
            claimable_partition_ids,
            k=min(max_count_per_owner - len(active_ownership_self), len(claimable_partition_ids)),
        )
        if to_greedy_claim_ids:
            for pid in to_greedy_claim_ids:
                random_chosen_to_claim = ownership_dict.get(
                    pid,
                    {
                        "fully_qualified_namespace": namespace,
                        "partition_id": pid,
                        "eventhub_name": eventhub_name,
                        "consumer_group": consumer_group,
                    },
                )
                random_chosen_to_claim["owner_id"] = owner_id
                to_claim.append(random_chosen_to_claim)
            to_try_steal = False
        if to_try_steal and len(active_ownership_self) < expected_count_per_owner:
            active_ownership_count_group_by_owner = Counter({x: len(y) for x, y in active_ownership_by_owner.items()})
            most_frequent_owner_id = active_ownership_count_group_by_owner.most_common(1)[0][0]
            to_steal_partition = rng.choice(active_ownership_by_owner[most_frequent_owner_id])
            to_steal_partition["owner_id"] = owner_id
            to_claim.append(to_steal_partition)
    return to_claim


class _Official(_Group):
    """Processors following the SDK's rules: cycle = list, balance, claim; release on stop."""

    def __init__(self, world: _World, seed: int = 7) -> None:
        super().__init__(world)
        self.rng = random.Random(seed)
        self.owned: dict[str, list[dict[str, Any]]] = {}
        self.timers: dict[str, abc.DisposableBase] = {}
        self.call_count = 0

    def _claim(self, claims: list[Ownership]) -> list[Ownership]:
        self.call_count += 1
        won: list[Ownership] = []
        self.world.store.observe_claim_ownership(claims).subscribe(won.extend, scheduler=self.world.scheduler)
        return won

    def _cycle(self, name: str) -> None:
        if name not in self.alive:
            return
        world = self.world
        self.call_count += 1
        ownership_list = [_to_dict(o) for o in world.records()]
        to_claim = balance_ownership_official(
            ownership_list,
            list(world.ids),
            owner_id=name,
            now=world.scheduler.clock,
            ownership_timeout=EXPIRY,
            namespace=world.hub.fully_qualified_namespace,
            eventhub_name=world.hub.eventhub_name,
            consumer_group=GROUP,
            rng=self.rng,
        )
        before = {o["partition_id"] for o in self.owned.get(name, [])}
        won = self._claim([_to_ownership(d) for d in to_claim]) if to_claim else []
        self.owned[name] = [_to_dict(o) for o in won]
        self.moved += len({o.partition_id for o in won} - before)
        delay = INTERVAL + INTERVAL * self.rng.random() * 0.2
        self.timers[name] = world.scheduler.schedule_relative(delay, lambda *_: self._cycle(name))

    def join(self, name: str) -> None:
        self.alive.add(name)
        self.owned[name] = []
        self._cycle(name)

    def leave(self, name: str) -> None:
        self.alive.discard(name)
        self.timers[name].dispose()
        releases = [replace(_to_ownership(o), owner_id="") for o in self.owned.pop(name, [])]
        if releases:
            self._claim(releases)

    def crash(self, name: str) -> None:
        self.alive.discard(name)
        self.timers[name].dispose()
        self.owned.pop(name, None)

    def reading(self, name: str) -> set[str]:
        return {o["partition_id"] for o in self.owned.get(name, [])}

    def calls(self) -> int:
        return self.call_count


# -- scenarios ----------------------------------------------------------------------------------------------


