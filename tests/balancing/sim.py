"""A discrete-event model of N consumers running the planner against a shared store (no Rx, no I/O).

Each consumer ticks once per interval at its own phase: it lists the records, plans, and sends one claim
(renewals, claims, steals, its presence record). A handover it decides lands ``handover`` seconds later (the
time to finish in-flight batches and write the checkpoint), as a release: written with the recipient the plan
chose as owner (``Plan.release_to``), or with none. A crashed consumer stops ticking and never releases; its
records expire. Official SDK processors can be mixed in (no presence, no handover, no looks).

As the real loop (:mod:`rxhubs.balancing._loop`), a cooperating consumer that awaits a handover
(``Plan.awaiting``) *looks* at the records between its ticks, when the loop's own
:class:`~rxhubs.balancing._looks.Looks` says, and ticks at once when a look shows a partition it would claim or
one handed to it; its next tick is then one interval after that one. Without looks a newcomer would see a
release only at its next tick, up to an interval late, which the loop does not do.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from rxhubs import Ownership
from rxhubs.balancing import BalancingSettings, Plan, plan, presence_group
from rxhubs.balancing._looks import Looks

NS, HUB, GROUP = "ns", "hub", "$Default"
PRESENCE = presence_group(GROUP)


class Store:
    """Compare-and-swap on etags, stamping the model's clock."""

    def __init__(self) -> None:
        self.records: dict[tuple[str, str], Ownership] = {}
        self.versions = itertools.count(1)
        self.claims = 0

    def list(self, group: str) -> list[Ownership]:
        return [r for (g, _), r in self.records.items() if g == group]

    def claim(self, claims: Iterable[Ownership], now: float) -> list[Ownership]:
        self.claims += 1
        won = []
        for claim in claims:
            key = (claim.consumer_group, claim.partition_id)
            current = self.records.get(key)
            if (current is None) != (claim.etag is None):
                continue
            if current is not None and current.etag != claim.etag:
                continue
            stored = replace(claim, etag=str(next(self.versions)), last_modified_time=now)
            self.records[key] = stored
            won.append(stored)
        return won


@dataclass
class Member:
    owner_id: str
    phase: float
    handover: float
    cooperative: bool = True
    alive: bool = True
    held: dict[str, Ownership] = field(default_factory=dict)
    releasing: set[str] = field(default_factory=set)
    recipients: dict[str, str] = field(default_factory=dict)
    presence_etag: str | None = None
    looks: Looks | None = None
    next_tick: float = 0.0
    next_look: float | None = None


class Simulation:
    def __init__(self, partitions: int, settings: BalancingSettings) -> None:
        self.ids = [str(i) for i in range(partitions)]
        self.settings = settings
        self.store = Store()
        self.members: dict[str, Member] = {}
        self.queue: list[tuple[float, int, str, str, str]] = []
        self.seq = itertools.count()
        self.now = 0.0
        self.moves = 0

    # -- membership ----------------------------------------------------------------------------------------
    def join(self, owner_id: str, at: float, *, handover: float = 0.0, cooperative: bool = True) -> None:
        interval = self.settings.load_balancing_interval
        looks = Looks(self.settings) if cooperative else None
        self.members[owner_id] = Member(owner_id, at % interval, handover, cooperative, looks=looks, next_tick=at)
        self._push(at, "tick", owner_id)

    def leave(self, owner_id: str, at: float) -> None:
        self._push(at, "leave", owner_id)

    def crash(self, owner_id: str, at: float) -> None:
        self._push(at, "crash", owner_id)

    def _push(self, at: float, kind: str, owner_id: str, partition_id: str = "") -> None:
        heapq.heappush(self.queue, (at, next(self.seq), kind, owner_id, partition_id))

    # -- running -------------------------------------------------------------------------------------------
    def run_until(self, until: float) -> None:
        while self.queue and self.queue[0][0] <= until:
            at, _, kind, owner_id, partition_id = heapq.heappop(self.queue)
            self.now = at
            member = self.members[owner_id]
            if not member.alive:
                continue
            if kind == "tick":
                if at == member.next_tick:  # else superseded by a tick a look brought forward
                    self._tick(member)
            elif kind == "look":
                if at == member.next_look:
                    self._look(member)
            elif kind == "release":
                self._release(member, [partition_id])
            elif kind == "leave":
                member.alive = False
                self._release(member, list(member.held), presence=True)
            elif kind == "crash":
                member.alive = False
        self.now = until

    def _plan(self, m: Member) -> Plan:
        presence = self.store.list(PRESENCE) if m.cooperative else []
        return plan(
            self.store.list(GROUP),
            self.ids,
            m.owner_id,
            self.now,
            self.settings,
            presence=presence,
            releasing=m.releasing,
            group=(NS, HUB, GROUP),
        )

    def _tick(self, m: Member) -> None:
        decision = self._plan(m)
        claims = list(decision.claims)
        if m.cooperative:
            claims.append(Ownership(NS, HUB, PRESENCE, m.owner_id, m.owner_id, None, m.presence_etag))
        won = self.store.claim(claims, self.now)
        by_id = {w.partition_id: w for w in won if w.consumer_group == GROUP}
        if m.cooperative:
            mine = [w for w in won if w.consumer_group == PRESENCE]
            m.presence_etag = mine[0].etag if mine else self._presence_etag(m.owner_id)
        gained = set(by_id) - set(m.held)
        self.moves += len(gained)
        m.held = by_id
        m.releasing &= set(by_id)
        if m.cooperative:
            recipients = dict(decision.release_to)
            for pid in decision.release:
                if pid not in m.releasing:
                    m.releasing.add(pid)
                    m.recipients[pid] = recipients.get(pid, "")
                    self._push(self.now + m.handover, "release", m.owner_id, pid)
        m.next_tick = self.now + self.settings.load_balancing_interval
        self._push(m.next_tick, "tick", m.owner_id)
        if m.looks is not None:
            m.looks.after_round(decision, self.now)
            self._schedule_look(m)

    def _look(self, m: Member) -> None:
        """List the records between ticks, as the loop does while it awaits a handover; tick if one showed."""
        assert m.looks is not None
        m.looks.taken(self.now)
        m.looks.answered(self.now)
        seen = self._plan(m)
        handed = {o.partition_id for o in seen.renew} - set(m.held)
        if seen.claim or handed:
            self._tick(m)
            return
        m.looks.looked(seen, self.now)
        self._schedule_look(m)

    def _schedule_look(self, m: Member) -> None:
        assert m.looks is not None
        due = m.looks.due(self.now)
        m.next_look = due if due is not None and due < m.next_tick else None
        if m.next_look is not None:
            self._push(max(m.next_look, self.now), "look", m.owner_id)
            m.next_look = max(m.next_look, self.now)

    def _presence_etag(self, owner_id: str) -> str | None:
        record = self.store.records.get((PRESENCE, owner_id))
        return record.etag if record is not None else None

    def _release(self, m: Member, partition_ids: list[str], *, presence: bool = False) -> None:
        records = [replace(m.held[p], owner_id=m.recipients.pop(p, "")) for p in partition_ids if p in m.held]
        if presence:
            records.append(Ownership(NS, HUB, PRESENCE, m.owner_id, "", None, m.presence_etag))
        self.store.claim(records, self.now)
        for pid in partition_ids:
            m.held.pop(pid, None)
            m.releasing.discard(pid)

    # -- observations --------------------------------------------------------------------------------------
    def live_owner(self, partition_id: str) -> str | None:
        record = self.store.records.get((GROUP, partition_id))
        if record is None or not record.owner_id or record.last_modified_time is None:
            return None
        if record.last_modified_time + self.settings.ownership_expiration < self.now:
            return None
        return record.owner_id

    def alive(self) -> list[Member]:
        return [m for m in self.members.values() if m.alive]

    def counts(self) -> dict[str, int]:
        counts = {m.owner_id: 0 for m in self.alive()}
        for pid in self.ids:
            owner = self.live_owner(pid)
            if owner is not None and owner in counts:
                counts[owner] += 1
        return counts

    def converged(self) -> bool:
        """Every partition owned and read by a live consumer, shares within one, no handover pending, one reader each.

        A record handed to a consumer is read once that consumer saw it (a look or a tick): until then it is owned
        but not read.
        """
        alive = self.alive()
        if not alive:
            return False
        counts = self.counts()
        if sum(counts.values()) != len(self.ids):
            return False
        if max(counts.values()) - min(counts.values()) > 1:
            return False
        if any(m.releasing for m in alive):
            return False
        readers: dict[str, str] = {}
        for m in alive:
            for pid in m.held:
                if pid in readers or self.live_owner(pid) != m.owner_id:
                    return False
                readers[pid] = m.owner_id
        return len(readers) == len(self.ids)

    def time_to_converge(self, start: float, limit: float, step: float = 0.25) -> float | None:
        """Seconds from ``start`` until :meth:`converged` first holds (None if not by ``start + limit``)."""
        for k in range(int(limit / step) + 1):
            self.run_until(start + k * step)
            if self.converged():
                return k * step
        return None
