"""The bookkeeping of the balancing loop: the sessions it holds, what a claim changed, losing them, expiry.

Starting what a claim gained (checkpoints, fences, restored state) is :mod:`~rxhubs.balancing._gains`.
"""

from __future__ import annotations

import logging
from collections.abc import Collection

from reactivex import abc

from rxhubs import _telemetry
from rxhubs._models import Ownership, PartitionContext
from rxhubs._rx import Signal
from rxhubs._rx._driver import current_stepper
from rxhubs.balancing._listener import LoopListener, RevokeReason
from rxhubs.balancing._looks import SETTLE_INTERVALS, Looks
from rxhubs.balancing._planner import Plan
from rxhubs.balancing._presence_watch import PresenceWatch
from rxhubs.balancing._records import fresh, next_round, split_won
from rxhubs.balancing._session import PartitionSession, SessionState
from rxhubs.balancing._store_calls import StoreCalls
from rxhubs.balancing._timing import BalancingSettings
from rxhubs.stores import CheckpointStore

__all__ = ["Holdings"]

log = logging.getLogger("rxhubs.balancing")


class Holdings:
    """What one consumer holds: a :class:`PartitionSession` per partition, and the partitions it avoids.

    :class:`~rxhubs.balancing._loop.BalancingLoop` builds on it: the loop talks to the store, this keeps the
    record of what came of it, and gives a partition up the moment its last renewal is older than the
    ownership expiration (another consumer may own it by then, so reading on would make two readers), less the
    store's ``timestamp_resolution`` when it has one: a blob's last-modified time is whole seconds, so others
    see a renewal as up to a second older than it was, and may take the partition that much earlier.
    """

    owner_id: str
    group: tuple[str, str, str]
    presence_group: str
    rounds: int
    _presence_etag: str | None
    _presence_at: float | None
    sessions: dict[str, PartitionSession]
    avoid: dict[str, float]
    failures: dict[str, int]
    settings: BalancingSettings
    scheduler: abc.SchedulerBase
    listener: LoopListener
    _wake: Signal
    _watchdog: abc.DisposableBase | None
    _finished: bool
    _expiry: float  # the ownership expiration less the store's timestamp resolution
    _times: tuple[float, float]  # the interval and the expiry: what fresh() weighs
    _round_times: tuple[float, float]  # the last round's seconds to its claim, and of its claim
    store: CheckpointStore
    calls: StoreCalls
    _stopping: RevokeReason | None
    last_plan: Plan | None
    _last_early: float
    _looks: Looks
    _watch: PresenceWatch
    _presence_listed: list[Ownership]
    #: The consumer group's records as the last round listed them (what a stop deals from: _dealing)
    _records_listed: list[Ownership]
    #: How long an owner settles before dealing to the last round's plan (:meth:`_settle_after`).
    _settle = 0.0

    def _now(self) -> float:
        return self.scheduler.now.timestamp()

    def _apply(
        self,
        decision: Plan,
        claims: list[Ownership],
        releases: list[Ownership],
        won: list[Ownership],
        sent_at: float,
        kept: Collection[str] = (),
        presence_sent: bool = True,
    ) -> None:
        """Take the claim's outcome in: new sessions, renewed records, partitions lost, handovers begun.

        ``kept``: renewals the claim did not carry (fresh, in a round a look triggered); ``won`` holds their
        records as they were, and they keep the time they were last renewed. ``presence_sent``: False when the
        claim did not carry this consumer's presence record (fresh too): what is known of it stays as it was.
        """
        records, presence = split_won(won, self.presence_group, self.owner_id)
        if presence_sent:
            self._presence_etag = presence.etag if presence is not None else None
            self._presence_at = sent_at if presence is not None else None
        self._forget_released(releases)
        claimed: set[str] = set()
        for claim in claims:
            pid = claim.partition_id
            claimed.add(pid)
            record = records.get(pid)
            session = self.sessions.get(pid)
            if record is None:
                if session is not None:
                    log.info("balancing: partition %s was taken over by another consumer", pid)
                    self._lose(pid, "taken")
            elif session is None:
                self._new_session(pid, record, sent_at, decision)
            elif pid not in kept:
                session.record, session.renewed_at = record, sent_at
        for pid in [p for p, s in self.sessions.items() if p not in claimed and not s.ready]:
            log.info("balancing: partition %s is no longer owned by this consumer", pid)
            self._lose(pid, "taken")
        self._begin_handovers(decision)
        self.rounds += 1

    def _begin_handovers(self, decision: Plan) -> None:
        """Begin handing over what ``decision`` releases: drain each partition (to its recipient, if dealt one).

        Under asyncio a round begins them before its claim (its records are left out of the claim while they stay
        fresh, :func:`~rxhubs.balancing._renewals.handing_over`, and each is released beside the claim once drained:
        :mod:`~rxhubs.balancing._releases`); then again after it, which changes nothing for a partition begun.
        """
        recipients = dict(decision.release_to)
        for pid in decision.release:
            session = self.sessions.get(pid)
            if session is None:
                continue
            session.release_to = recipients.get(pid, "")
            if session.state is SessionState.CLAIMED:
                session.mark_ready()
            elif session.drain():
                self.listener.on_revoke(session, "handover")

    async def _renew_unlisted(self) -> None:
        """The round's listing failed: renew what this consumer holds anyway, with the etags of its last renewals.

        A renewal needs no listing: it is a compare-and-swap on this consumer's own record, refused if anyone changed
        the record meanwhile. So a store that answers writes but not listings in time (listing 512 ownership blobs
        on a loaded Azurite took past the 10 s timeout) no longer lets this consumer's partitions expire while it
        reads them. A renewal refused or unanswered is left as it is: the next round's listing says who owns what.
        """
        now = self._now()
        records = [s.record for s in self.sessions.values()
                   if not s.ready and s.record.etag is not None and not fresh(s.renewed_at, now, *self._times)]
        if not records:
            return
        try:
            won, _ = await self.calls.claim_partly(records)
        except Exception as exc:  # the round's failure is reported; this was only a shortcut
            log.debug("balancing: renewing without a listing failed (%s)", exc)
            return
        for record in won:
            session = self.sessions.get(record.partition_id)
            if session is not None and not session.ready:
                session.record, session.renewed_at = record, now
        log.info("balancing: the listing failed; renewed %d of %d partitions without it", len(won), len(records))

    def _new_session(self, pid: str, record: Ownership, sent_at: float, decision: Plan) -> PartitionSession:
        ns, hub, group = self.group
        session = self.sessions[pid] = PartitionSession(PartitionContext(ns, hub, group, pid), record, sent_at)
        session.store_timeout = self.settings.store_timeout or self.settings.load_balancing_interval
        stolen = any(o.partition_id == pid for o in decision.steal)
        _telemetry.hooks.claimed(session.context, self.owner_id, stolen)
        return session

    def fenced(self, session: PartitionSession) -> None:
        """A fenced store refused ``session``'s checkpoint: another consumer claimed the partition. Give it up.

        Nothing is released (the record is the other consumer's); the next round sees who owns it.
        """
        if self.sessions.get(session.partition_id) is session:
            log.warning(
                "balancing: partition %s was taken over while this consumer still read it (it was paused past"
                " its ownership expiry?): its checkpoint write was refused; stopping it",
                session.partition_id,
            )
            self._lose(session.partition_id, "fenced")
            self._arm_watchdog()
            self._wake.set()
        else:
            session.lose()

    def _forget_released(self, releases: list[Ownership]) -> None:
        for release in releases:
            session = self.sessions.pop(release.partition_id, None)
            if session is not None:
                session.released()
                _telemetry.hooks.released(session.context, self.owner_id)
                self.listener.on_released(session)

    def _lose(self, partition_id: str, reason: _telemetry.LossReason) -> None:
        session = self.sessions.pop(partition_id, None)
        if session is not None:
            session.lose()
            _telemetry.hooks.lost(session.context, self.owner_id, reason)
            self.listener.on_lost(session)

    def _arm_watchdog(self) -> None:
        """Give up partitions whose renewal is older than the expiration, the moment it is (a timer)."""
        if self._watchdog is not None:
            self._watchdog.dispose()
            self._watchdog = None
        if not self.sessions or self._finished:
            return
        due = min(s.renewed_at for s in self.sessions.values()) + self._expiry
        self._watchdog = self.scheduler.schedule_relative(max(0.0, due - self._now()), lambda *_: self._expire())

    def _expire(self) -> None:
        now = self._now()
        for pid, session in list(self.sessions.items()):
            if session.renewed_at + self._expiry <= now:
                log.warning(
                    "balancing: ownership of partition %s expired (no renewal for %.1f s): stopping its reader",
                    pid,
                    now - session.renewed_at,
                )
                self._lose(pid, "expired")
        self._arm_watchdog()
        self._wake.set()

    def _avoid_after_failure(self, partition_id: str) -> None:
        failures = self.failures[partition_id] = self.failures.get(partition_id, 0) + 1
        wait = self.settings.load_balancing_interval * min(2 ** (failures - 1), 32)
        self.avoid[partition_id] = self._now() + wait

    def _handed_to_me(self, decision: Plan) -> dict[str, Ownership]:
        """Live records naming this consumer that it holds no session for: handed to it by their former owner.

        It starts reading them as they were listed, without a claim (the record is its own already), and renews
        them from its next round on. Only records written within the last interval (and the store's timestamp
        resolution) count: a former owner hands a partition over moments before the newcomer sees it. An older
        one (this consumer's own, from before it gave its partitions up when the store could not be reached) may be
        expiring, and another consumer claiming it then: it is renewed by the round's claim first, whose
        compare-and-swap decides who owns it, and read only if that renewal won.
        """
        fresh = self.settings.load_balancing_interval + (self.settings.ownership_expiration - self._expiry)
        now = self._now()
        return {
            o.partition_id: o
            for o in decision.renew
            if o.partition_id not in self.sessions
            and o.last_modified_time is not None
            and now - o.last_modified_time <= fresh
        }

    def _after_round(self, started: float) -> None:
        """Plan the looks; while a handover is awaited, have the links it brings prepared (``on_awaiting``)."""
        watched = self._watch.gap if current_stepper() is None else None  # owners watch presence (asyncio)
        self._looks.after_round(self.last_plan, started, self._settle, watched)  # an owner settles a join first
        plan = self.last_plan
        self._watch.after_round(self._presence_listed, started=started, now=self._now(),  # (_presence_watch)
                                planned=plan.owners if plan is not None else ())
        if plan is not None and log.isEnabledFor(logging.DEBUG):  # where a change's intervals go (bench logs)
            log.debug("balancing: round %d took %.2f s (%.2f to its claim, %.2f its claim): %d owners, target %d, own"
                      " %d, claim %d, release %d (%d handed), awaiting %d", self.rounds, self._now() - started,
                      *self._round_times, len(plan.owners), plan.target, len(self.sessions), len(plan.claim),
                      len(plan.release), len(plan.release_to), plan.awaiting)
        if plan is not None and plan.awaiting > 0 and self._stopping is None:
            self.listener.on_awaiting(plan.awaiting)

    def _settle_after(self, records: list[Ownership], plan: Plan) -> float:
        """How long an owner settles before dealing, when ``plan``'s owners include two or more holding no record."""
        holders = {r.owner_id for r in records if r.owner_id}
        joining = sum(1 for owner in plan.owners if owner not in holders)
        return self.settings.load_balancing_interval * SETTLE_INTERVALS if joining >= 2 else 0.0

    # -- time ------------------------------------------------------------------------------------------------
    def _due_after(self, started: float) -> float:
        """When the next round is due after a successful one that began at ``started``."""
        expiry = self.last_plan.earliest_expiry if self.last_plan is not None else None
        due, early = next_round(started, self.settings.load_balancing_interval, expiry, self._last_early, self._now())
        if early:
            self._last_early = due
        return due
