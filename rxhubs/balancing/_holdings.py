"""The bookkeeping half of the balancing loop: the sessions it holds, what a claim changed, losing them, expiry."""

from __future__ import annotations

import logging
from collections.abc import Collection

from reactivex import abc

from rxhubs import _telemetry
from rxhubs._models import Checkpoint, Ownership, PartitionContext
from rxhubs._rx import Signal
from rxhubs._rx._driver import current_stepper
from rxhubs.balancing._listener import LoopListener, RevokeReason
from rxhubs.balancing._looks import SETTLE_INTERVALS, Looks
from rxhubs.balancing._planner import BalancingSettings, Plan
from rxhubs.balancing._presence_watch import PresenceWatch
from rxhubs.balancing._records import fresh, next_round, split_won
from rxhubs.balancing._session import PartitionSession, SessionState
from rxhubs.balancing._store_calls import Cut, Fenced, StoreCalls
from rxhubs.errors import OwnershipLostError, StateError
from rxhubs.state._codec import decode
from rxhubs.stores import CheckpointStore, is_fenced

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

    def _start_claimed(self, checkpoints: dict[str, Checkpoint]) -> None:
        """Hand each partition just gained to the listener, with its stored checkpoint."""
        for pid, session in list(self.sessions.items()):
            if session.state is SessionState.CLAIMED and self.sessions.get(pid) is session:
                session.state = SessionState.READING
                self.listener.on_acquired(session, checkpoints.get(pid))

    def _new_session(self, pid: str, record: Ownership, sent_at: float, decision: Plan) -> PartitionSession:
        ns, hub, group = self.group
        session = self.sessions[pid] = PartitionSession(PartitionContext(ns, hub, group, pid), record, sent_at)
        session.store_timeout = self.settings.store_timeout or self.settings.load_balancing_interval
        stolen = any(o.partition_id == pid for o in decision.steal)
        _telemetry.hooks.claimed(session.context, self.owner_id, stolen)
        return session

    async def _claim_and_read(
        self, sent: list[Ownership], decision: Plan, handed: dict[str, Ownership], sent_at: float, cut: Cut | None
    ) -> tuple[list[Ownership], dict[str, Checkpoint] | None, list[Ownership]]:
        """Claim ``sent``; when partitions are gained without a steal, read the checkpoints meanwhile.

        Returns the records won, the checkpoints read (None: not read), and the records whose claim call failed
        (:meth:`StoreCalls.claim_partly <rxhubs.balancing._store_calls.StoreCalls.claim_partly>`).

        Gained: released or expired partitions claimed, or partitions handed to this consumer (``handed``). Their
        checkpoints are final already: an owner writes a partition's checkpoint before it releases it, and the listing
        that showed the release came before this read (an expired owner writes no more). Not for steals (the owner still
        reads) or while stopping; with a fenced store, the fence reads them: the partitions handed over are fenced
        alongside the claim, and each starts as soon as its fence answered (:meth:`_start_fenced`); partitions
        claimed are fenced after the claim. The partitions handed over start as soon as their checkpoints are read
        (:meth:`_start_handed`), without waiting for the claim of the rest. ``cut``: a steady round's (renewals).
        """
        gaining = decision.claim or bool(handed)
        fenced = is_fenced(self.store)
        if not gaining or decision.steal or (fenced and not handed) or self._stopping is not None:
            won, unanswered = await self.calls.claim_partly(sent, cut=cut)
            return won, None, unanswered
        if fenced:  # the handed partitions' fences go out with the claim; each starts on its fence's answer
            def start(record: Ownership, result: Fenced | Exception) -> None:
                self._start_fenced(record, result, sent_at, decision)

            won, unanswered = await self.calls.claim_fencing(sent, list(handed.values()), start)
            return won, None, unanswered

        def start_handed(checkpoints: dict[str, Checkpoint]) -> None:
            self._start_handed(handed, checkpoints, sent_at, decision)

        return await self.calls.claim_reading_checkpoints(sent, start_handed if handed else None)

    def _start_handed(
        self, handed: dict[str, Ownership], checkpoints: dict[str, Checkpoint], sent_at: float, decision: Plan
    ) -> None:
        """Start reading the partitions handed to this consumer, while the round's claim is still in flight.

        Their records name it already, so nothing that claim (this consumer's presence, its renewals) answers can
        change that; waiting for it would only add a store call's time to the handover. :meth:`_apply` then renews
        them like the rest.
        """
        if self._stopping is not None:
            return
        for pid, record in handed.items():
            if pid not in self.sessions:
                session = self._new_session(pid, record, sent_at, decision)
                session.state, session.handed = SessionState.READING, True
                self.listener.on_acquired(session, checkpoints.get(pid))

    def _start_fenced(self, record: Ownership, result: Fenced | Exception, sent_at: float, decision: Plan) -> None:
        """Start one partition handed to this consumer as soon as its fence answered, the round's claim in flight.

        The fence began the period before anything is read, as for any partition gained. A failed fence starts
        nothing: the round fences the partition again after its claim, and takes the outcome in as it does for
        claimed partitions (lost: given up; another failure: the round is retried).
        """
        pid = record.partition_id
        if self._stopping is not None or isinstance(result, Exception) or pid in self.sessions:
            return
        session = self._new_session(pid, record, sent_at, decision)
        session.handed = True
        checkpoints = self._fenced_checkpoints([session], [result])
        if session.state is SessionState.CLAIMED and self.sessions.get(pid) is session:
            session.state = SessionState.READING
            self.listener.on_acquired(session, checkpoints.get(pid))

    async def _checkpoints_of_claimed(self, read: dict[str, Checkpoint] | None = None) -> dict[str, Checkpoint]:
        """The stored checkpoints, if partitions were just gained (none are read while stopping).

        ``read``: the checkpoints read while the claim was in flight, if they were (see :meth:`_claim_and_read`).

        With a fenced store, each partition gained is fenced first, and its checkpoint read by the fence: from
        then on a former owner's checkpoint writes fail. A partition whose record moved on meanwhile is lost.
        """
        if self._stopping is not None:  # gained while stopping: release without reading
            for session in self.sessions.values():
                if session.state is SessionState.CLAIMED:
                    session.mark_ready()
        claimed = [s for s in self.sessions.values() if s.state is SessionState.CLAIMED]
        if not claimed:
            return {}
        if not is_fenced(self.store):
            return read if read is not None else await self.calls.checkpoints()
        return self._fenced_checkpoints(claimed, await self.calls.fence([s.record for s in claimed]))

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

    def _fenced_checkpoints(
        self, claimed: list[PartitionSession], results: list[Fenced | Exception]
    ) -> dict[str, Checkpoint]:
        """Take the fences of the partitions just claimed in: periods begun, checkpoints read, partitions lost.

        The operator state read with a checkpoint is decoded onto the session (``restored_state``): the
        stateful operators restore it on the period's first batch. A state that cannot be decoded (corrupt, or
        not rxhubs state) is never replaced by an empty one: the partition is reported, not read, released and
        avoided for a backoff, like a partition whose reader failed.

        Raises:
            Exception: The first failure other than a lost partition (the round is then retried, and the
                partitions not fenced yet are fenced then).
        """
        checkpoints: dict[str, Checkpoint] = {}
        failure: Exception | None = None
        for session, result in zip(claimed, results, strict=True):
            if isinstance(result, OwnershipLostError):
                log.info("balancing: partition %s was taken over before its fence", session.partition_id)
                self._lose(session.partition_id, "taken")
            elif isinstance(result, Exception):
                failure = failure or result
            else:
                session.period = session.record
                checkpoint, state = result
                if state is not None and not self._restore(session, checkpoint, state):
                    continue
                if checkpoint is not None:
                    checkpoints[session.partition_id] = checkpoint
        if failure is not None:
            raise failure
        return checkpoints

    def _restore(self, session: PartitionSession, checkpoint: Checkpoint | None, state: bytes) -> bool:
        """Decode ``state`` onto ``session``; False (the partition reported, released later) if it cannot be."""
        try:
            session.restored_state = decode(state)
            return True
        except StateError as exc:
            at = f" (checkpoint at sequence number {checkpoint.sequence_number})" if checkpoint is not None else ""
            error = StateError(
                f"partition {session.partition_id}: the operator state saved with its checkpoint{at} cannot be "
                f"restored: {exc}; the partition is not read (restarting from empty state would give wrong "
                "results): repair or delete the saved state"
            )
            log.error("balancing: %s", error)
            self._avoid_after_failure(session.partition_id)
            session.mark_ready()  # released with the next claim, never read
            self.listener.on_unreadable(session, "state", error)
            return False

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
