"""Between rounds a consumer watches the presence records and runs its round at once when the group changed.

Consumer ``a`` owns four partitions with a 20 s interval. ``b`` joins: its first round writes its presence record,
``a``'s next watch (a quarter interval at most) sees it and runs ``a``'s round at once, which hands ``b`` its two.
``b`` stops: its wind-down releases its records and its presence record, ``a``'s watch sees it gone and its round
takes the two back. Without the watch both waited for ``a``'s next round, up to an interval later
(rxhubs/balancing/_presence_watch.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import rxhubs
from rxhubs import Checkpoint, Ownership
from rxhubs.stores import CheckpointStore, InMemoryCheckpointStore
from tests.balancing.test_release_in_flight import four_partitions, owners, until

GROUP = "$Default"
SLOW: dict[str, Any] = {"load_balancing_interval": 20.0, "ownership_expiration": 60.0, "max_wait": 0.05}


class Noted(CheckpointStore):
    """``a``'s view of the shared store, noting its listings (which group, whom the presence showed) and claims."""

    def __init__(self, inner: InMemoryCheckpointStore) -> None:
        self.inner = inner
        self.calls: list[tuple[str, Any]] = []

    async def list_ownership(self, ns: str, hub: str, group: str) -> list[Ownership]:
        found = await self.inner.list_ownership(ns, hub, group)
        if group.endswith("$presence"):
            self.calls.append(("presence", {o.owner_id for o in found if o.owner_id}))
        else:
            self.calls.append(("records", None))
        return found

    async def claim_ownership(self, claims: Iterable[Ownership]) -> list[Ownership]:
        claims = list(claims)
        self.calls.append(("claim", {(c.partition_id, c.owner_id) for c in claims if c.consumer_group == GROUP}))
        return await self.inner.claim_ownership(claims)

    async def list_checkpoints(self, *args: Any) -> list[Checkpoint]:
        return await self.inner.list_checkpoints(*args)

    async def update_checkpoint(self, checkpoint: Checkpoint) -> None:
        await self.inner.update_checkpoint(checkpoint)


def run(hub: Any, owner: str, store: CheckpointStore, stop: rxhubs.Shutdown) -> Any:
    import asyncio

    return asyncio.create_task(rxhubs.arun(rxhubs.consume(hub, GROUP, store, owner_id=owner, **SLOW),
                                           shutdown=stop, grace=10.0, signals=()))


def watched_before(calls: list[tuple[str, Any]], claim: int) -> Any:
    """What the listing just before the round of the claim at ``claim`` was: a watch (presence alone) and its owners.

    A round lists the records and the presence records together; a watch lists the presence records alone.
    """
    records = max(i for i in range(claim) if calls[i][0] == "records")
    before = [c for c in calls[:records] if c[0] != "claim"]
    assert before[-1][0] == "presence" and before[-2][0] == "presence", f"no watch began this round: {calls}"
    return before[-1][1]


async def test_a_join_and_a_leave_are_answered_at_the_next_watch_not_the_next_round() -> None:
    hub = four_partitions()
    inner = InMemoryCheckpointStore()
    noted = Noted(inner)
    stops = {"a": rxhubs.Shutdown(), "b": rxhubs.Shutdown()}
    a = run(hub, "a", noted, stops["a"])
    await until(lambda: sorted(owners(hub, inner).values()) == ["a"] * 4)
    opened: list[str] = []
    receiver = hub.receiver
    hub.receiver = lambda pid, *args, **kwargs: (opened.append(pid), receiver(pid, *args, **kwargs))[1]  # type: ignore[method-assign]
    b = run(hub, "b", inner, stops["b"])
    await until(lambda: sorted(owners(hub, inner).values()) == ["a", "a", "b", "b"])
    bs = [pid for pid, owner in owners(hub, inner).items() if owner == "b"]
    await until(lambda: all(pid in opened for pid in bs))  # b opened their links (started, or prepared for them)
    hand = next(i for i, (kind, what) in enumerate(noted.calls) if kind == "claim" and any(o == "b" for _, o in what))
    assert "b" in watched_before(noted.calls, hand)  # a watch saw b and began the round that handed b its share

    stops["b"].request()
    await b  # its stop handed them to a, started or not yet (rxhubs/balancing/_wind_down.py): a starts them next
    assert sorted(owners(hub, inner).values()) == ["a"] * 4
    gone = len(noted.calls)
    await until(lambda: any(kind == "records" for kind, _ in noted.calls[gone:]))
    back = next(i for i, (kind, _) in enumerate(noted.calls) if i >= gone and kind == "records") + 1
    assert "b" not in watched_before(noted.calls, back)  # a watch saw b gone and began that round (interval: 20 s)
    stops["a"].request()
    await a


def test_a_round_planned_with_a_consumer_whose_presence_is_released_runs_again_at_the_next_watch() -> None:
    """A round's listing of the records still named ``b`` (answered before ``b`` released them), its presence listing
    showed ``b``'s presence record released (``b`` releases it last): the round planned with ``b``. The next watch
    lists the same presence records and runs the round again; once: records that keep naming ``b`` (its release
    lost) do not make every watch run a round. An owner without a presence record (the SDK's processor) never does.
    Before, the watch compared with the presence listing alone, saw no change, and the survivor of a stop of four
    consumers of 1,024 partitions claimed the leavers' partitions an interval later (``rxhubs bench scale --real``)."""
    from rxhubs.balancing._presence_watch import PresenceWatch

    def record(pid: str, owner: str) -> Ownership:
        return Ownership("ns", "hub", GROUP + "$presence", pid, owner, 100.0, "0x1")

    presence = [record("a", "a"), record("c", "c"), record("b", "")]
    watch = PresenceWatch("a", interval=4.0, expiration=60.0)
    watch.after_round(presence, started=100.0, now=101.0, planned=("a", "b", "c", "sdk"))
    assert watch.differs(presence, 102.0)  # b, planned with, is gone
    watch.after_round(presence, started=102.0, now=103.0, planned=("a", "b", "c", "sdk"))  # b's records still live
    assert not watch.differs(presence, 104.0)  # once
    unplanned = PresenceWatch("a", interval=4.0, expiration=60.0)
    unplanned.after_round(presence, started=100.0, now=101.0, planned=("a", "c", "sdk"))
    assert not unplanned.differs(presence, 102.0)
    assert unplanned.differs([record("a", "a"), record("b", "")], 102.0)  # c left: a change as before
