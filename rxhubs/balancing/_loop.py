"""The balancing loop: one coroutine that lists, plans, claims and releases through the store, round by round.

One :class:`BalancingLoop` runs per subscription of :func:`rxhubs.partitions`. It owns the conversation with
the store and the :class:`~rxhubs.balancing._session.PartitionSession` of every partition it holds; what
happens to partition streams is its listener's business (:class:`LoopListener`). It is a coroutine on the
subscribing scheduler (:func:`rxhubs._rx.from_coroutine`), so it runs on asyncio with a real store and in
virtual time under ``TestScheduler`` with the in-memory one. :meth:`BalancingLoop._run` reads top to bottom:

1. a **round** (:meth:`~BalancingLoop._round`): the partition ids (one management call per round, as .NET's
   processor does every cycle, so partitions added to a live hub are claimed in the round that sees them;
   under asyncio a refresh still unanswered when the listings are in never holds the round up: it plans
   from the ids known, and the next round from what the refresh read), ``list_ownership`` of the consumer
   group and of its presence group, the plan
   (:func:`~rxhubs.balancing.plan`; a plan that deals partitions to several consumers that joined together is
   made again from the presence records listed a moment later: :meth:`~RoundInputs._plan_settled`), one
   ``claim_ownership`` carrying the renewals due (each record before it is a third of the expiration old,
   spread over the rounds: :mod:`~rxhubs.balancing._renewals`), the claims,
   the steals, the releases of partitions whose handover finished and this consumer's presence record (a round
   that a look triggered leaves out the renewals and the presence record that stay live until well past the next
   round without it: :func:`~rxhubs.balancing._records.fresh`; with nothing else to send it makes no call; a
   claim of many records goes out in calls of 32, and records whose call failed are retried next round), then
   ``list_checkpoints`` for the partitions gained (alongside the claim when they were released or expired and
   the store has no fence), each handed to ``listener.on_acquired``;
2. **between rounds** (:meth:`~BalancingLoop._between_rounds`, :mod:`~rxhubs.balancing._between`) it releases
   partitions as soon as their handover finished (:meth:`ready`; under asyncio also while a round's claim is in
   flight, when the claim does not carry their records: :mod:`~rxhubs.balancing._releases`), and sleeps until the
   next round: one interval after the last began, or sooner, right after another consumer's record expires (at most
   once per half interval), so a crashed consumer's partitions are taken over within half an interval of its expiry.
   Under asyncio it **watches the presence records** every quarter interval and runs its round at once when a
   consumer joined or left since its last round (:mod:`~rxhubs.balancing._presence_watch`). While it **awaits a
   handover** (:attr:`Plan.awaiting <rxhubs.balancing.Plan.awaiting>`: other consumers will release partitions for
   it) it looks: lists the records and the presence records, from the moment the releasing owner balances next
   (:attr:`Plan.release_expected <rxhubs.balancing.Plan.release_expected>`), every 20 ms while the release is
   imminent and every :func:`~rxhubs.balancing._looks.look_gap` seconds otherwise, and runs the round from the
   look's listings as soon as a release shows, for at most one ownership expiration per handover (store calls rise
   only then; when to look is :class:`~rxhubs.balancing._looks.Looks`);
3. once stopped (:meth:`stop`), the **wind-down** (:meth:`~BalancingLoop._wind_down`) keeps renewing the
   partitions still draining, then releases them all, with the presence record, in one call.

A failed round is retried with backoff (at most one interval apart); ownership is kept meanwhile. A
partition whose last successful renewal is older than the ownership expiration is given up (``on_lost``):
another consumer may own it now. Each store call is bounded by ``store_timeout``
(:class:`~rxhubs.balancing._store_calls.StoreCalls`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence

from reactivex import abc

from rxhubs import _telemetry
from rxhubs._models import Checkpoint, Ownership
from rxhubs._retry import Backoff
from rxhubs._rx import Signal, from_coroutine
from rxhubs._rx._driver import current_stepper
from rxhubs._siblings import take_start_gate
from rxhubs.balancing._between import BetweenRounds
from rxhubs.balancing._listener import LoopListener, RevokeReason
from rxhubs.balancing._looks import Looks
from rxhubs.balancing._planner import Plan, presence_group
from rxhubs.balancing._presence_watch import PresenceWatch
from rxhubs.balancing._records import fresh, fresh_renewals, lost_claims, releases_of
from rxhubs.balancing._releases import Releases
from rxhubs.balancing._renewals import handing_over, spread_renewals
from rxhubs.balancing._session import PartitionSession, SessionState
from rxhubs.balancing._start_gate import announce
from rxhubs.balancing._store_calls import CLAIM_CHUNK, Cut, StoreCalls
from rxhubs.balancing._timing import BalancingSettings
from rxhubs.balancing._unanswered import unanswered as unanswered_in
from rxhubs.errors import StoreError
from rxhubs.stores import CheckpointStore

__all__ = ["BalancingLoop", "LoopListener", "RevokeReason"]

log = logging.getLogger("rxhubs.balancing")

def _running_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


class BalancingLoop(BetweenRounds):
    """Balances one consumer against the store on a scheduler. Create, :meth:`start`, then stop or dispose.

    Args:
        store: The checkpoint store.
        namespace: The hub's fully qualified namespace.
        eventhub_name: The hub's name.
        consumer_group: The consumer group.
        partition_ids: Reads the hub's partition ids.
        owner_id: This consumer's id.
        settings: Interval, expiration, strategy and store timeout.
        scheduler: Where the loop and its timers run.
        listener: Receives acquisitions, revocations and losses.
        retry: Backoff between failed rounds (each wait is capped at one interval).
        baseline: Also list the checkpoints before the first claim (``baseline_checkpoints``).
    """

    def __init__(
        self,
        store: CheckpointStore,
        *,
        namespace: str,
        eventhub_name: str,
        consumer_group: str,
        partition_ids: Callable[[], Awaitable[Sequence[str]]],
        owner_id: str,
        settings: BalancingSettings,
        scheduler: abc.SchedulerBase,
        listener: LoopListener,
        retry: Backoff | None = None,
        baseline: bool = False,
    ) -> None:
        self.store = store
        self.group = (namespace, eventhub_name, consumer_group)
        self.presence_group = presence_group(consumer_group)
        self.calls = StoreCalls(store, self.group, self.presence_group, settings)
        self._read_partition_ids = partition_ids
        self.owner_id = owner_id
        self.settings = settings
        resolution = getattr(store, "timestamp_resolution", 0.0)
        if not isinstance(resolution, int | float) or not 0 <= resolution < settings.ownership_expiration / 2:
            resolution = 0.0
        self._expiry = settings.ownership_expiration - resolution
        self.scheduler = scheduler
        self.listener = listener
        interval = settings.load_balancing_interval
        self.retry = retry or Backoff(initial=min(0.5, interval), maximum=interval, max_retries=None)
        self.want_baseline = baseline
        #: Checkpoints listed before the first claim (when ``baseline`` was asked for).
        self.baseline_checkpoints: dict[str, Checkpoint] | None = None
        self.partition_ids: tuple[str, ...] | None = None
        self.sessions: dict[str, PartitionSession] = {}
        self.avoid: dict[str, float] = {}
        self.failures: dict[str, int] = {}
        self.last_plan: Plan | None = None
        self.rounds = 0
        #: A non-retriable error that ended the loop (an unknown hub, refused credentials), if any.
        self.fatal: Exception | None = None
        self._presence_etag: str | None = None
        #: When this consumer's presence record was last written (None: not yet, or the write failed).
        self._presence_at: float | None = None
        #: The interval and the expiry (less the store's timestamp resolution): what :func:`fresh` weighs.
        self._times = (interval, self._expiry)
        #: What :func:`~rxhubs.balancing._renewals.spread` weighs: the interval and the expiration as configured.
        self._renewal_times = (interval, settings.ownership_expiration)
        self._attempt = 0
        self._next_round = 0.0
        self._last_early = float("-inf")
        self._reran = False  # the last round ran at once because the one before lost claims (lost_claims)
        self._claim_cut: Cut | None = None  # the cut of a steady round's claim in flight
        self._presence_listed: list[Ownership] = []
        self._records_listed: list[Ownership] = []
        self._stop_presence: list[Ownership] | None = None  # the presence records a stop dealt from (_wind_down)
        self._announced: asyncio.Future[list[Ownership]] | None = None
        self._looks = Looks(settings, resolution)
        self._watch = PresenceWatch(owner_id, interval=interval, expiration=self._expiry)
        #: The records and presence records of the look that saw a release: the round it triggers plans from them.
        self._looked: tuple[list[Ownership], list[Ownership]] | None = None
        #: The last round's seconds to its claim (listings, plan) and of its claim: where a slow round went (debug).
        self._round_times = (0.0, 0.0)
        self._release_failed = False
        self._stopping: RevokeReason | None = None
        self._stopped_at = 0.0
        self._finished = False
        self._wake = Signal()
        self._releases = Releases(self.calls.claim_partly, self._forget_released, self._release_failed_with,
                                  self._wake.set)
        #: The partition-id refresh in flight (under asyncio), which a round does not wait for.
        self._refresh: asyncio.Future[tuple[str, ...] | None] | None = None
        self._watchdog: abc.DisposableBase | None = None
        self._task: abc.DisposableBase | None = None

    # -- public --------------------------------------------------------------------------------------------
    @property
    def looks(self) -> int:
        """Looks at the records while awaiting a handover so far (each one ``list_ownership`` call)."""
        return self._looks.count

    @property
    def owned(self) -> frozenset[str]:
        """The partitions this consumer holds right now (including those being handed over)."""
        return frozenset(self.sessions)

    @property
    def stopping(self) -> bool:
        """True once :meth:`stop` or :meth:`dispose` was called."""
        return self._stopping is not None

    def start(self) -> None:
        """Run the first round now (as the scheduler's next action), then one every interval."""

        def run(*_: object) -> None:
            self._task = from_coroutine(self._run).subscribe(on_error=self._crashed, scheduler=self.scheduler)

        self.scheduler.schedule(run)

    def ready(self, partition_id: str, *, failed: bool = False) -> None:
        """The listener finished handing ``partition_id`` over: release it with the next store call.

        Args:
            partition_id: The partition.
            failed: Its reader failed: do not claim it again for a while (doubling per failure).
        """
        if failed:
            self._avoid_after_failure(partition_id)
        session = self.sessions.get(partition_id)
        if session is not None:
            session.mark_ready()
            if self._stopping is None and not self._release_failed and current_stepper() is None:  # (_releases)
                self._releases.beside(partition_id, lambda: releases_of([session], self.store))
            self._wake.set()

    def abandon(self, partition_id: str) -> None:
        """Forget a partition whose reader was cut off (a reader with a higher owner level took it).

        Its record is neither renewed nor released: whoever took it over claims it, or it expires.
        """
        session = self.sessions.pop(partition_id, None)
        if session is not None:
            session.lose()
            _telemetry.hooks.lost(session.context, self.owner_id, "cut_off")
        self.avoid[partition_id] = self._now() + self.settings.ownership_expiration
        self._wake.set()

    def stop(self, reason: RevokeReason = "shutdown") -> None:
        """Stop balancing: revoke every partition, release them all once ready, then ``on_stopped``."""
        if self._stopping is not None:
            if reason == "dispose" and self._stopping != "dispose":
                self._stopping = "dispose"
                for session in list(self.sessions.values()):
                    if not session.ready:
                        self.listener.on_revoke(session, "dispose")
            return
        self._stopping = reason
        self._stopped_at = self._now()
        if current_stepper() is None and self._task is not None and _running_loop():  # the leaving record goes
            self._announced = asyncio.ensure_future(self._announce_leaving())  # before the drains' final writes
        if self._claim_cut is not None:  # renewals not sent yet: the wind-down releases those records instead
            self._claim_cut.event.set()
        for session in list(self.sessions.values()):
            if session.state is SessionState.CLAIMED:
                session.mark_ready()
            elif session.drain():
                self.listener.on_revoke(session, reason)
        self._wake.set()

    def dispose(self) -> None:
        """Stop without waiting for batches in flight (the pipeline is being torn down)."""
        self.stop("dispose")

    # -- the coroutine ---------------------------------------------------------------------------------------
    async def _run(self) -> None:
        try:
            if current_stepper() is None and (gate := take_start_gate()) is not None:  # run_workers' siblings
                await announce(self.calls, lambda presence: self._presence_record(presence, self.owner_id), gate)
            while self._stopping is None:
                await self._round()
                await self._between_rounds()
            await self._wind_down()
        finally:
            if self._refresh is not None:
                self._refresh.cancel()

    async def _round(self) -> None:
        """List, plan, claim, start what was gained. A failed store call schedules a retry; it never raises."""
        self._release_failed = False
        started = self._now()
        listed = False
        try:
            self.calls.operation = "list"
            looked, self._looked = self._looked, None
            if looked is not None and self.partition_ids is not None:  # a look saw a release: claim at once
                ids, (records, presence) = self.partition_ids, looked
            else:
                looked = None  # a round that lists renews what is due (_renewals)
                read_ids, records, presence = await self._ids_and_listings()
                if read_ids is None:
                    return  # fatal: stop() was called
                ids = read_ids
            listed = True
            if self.want_baseline and self.baseline_checkpoints is None:
                self.baseline_checkpoints = await self.calls.checkpoints()
            decision, presence = await self._plan_settled(records, presence, ids)
            self._presence_listed, self._records_listed = presence, records
            handed = self._handed_to_me(decision)
            # once stopping, the wind-down deals what is ready to the consumers that stay (_dealing), not this round
            releases = releases_of(self.sessions.values(), self.store) if self._stopping is None else []
            released = {r.partition_id for r in releases}
            claims = [o for o in decision.claims if o.partition_id not in released]
            # renewals count from when the claim is sent (the store stamps them no earlier), not from the start of
            # the round: a slow partition-id refresh and slow listings must not eat into the ownership expiration
            sent_at = self._now()
            # a round a look triggered writes only what it gains: fresh renewals and presence wait for the next round;
            # others renew each record before it is a third of the expiration old, spread over the rounds (_renewals)
            # (and the partitions it begins handing over wait for the next round, released by then: _renewals)
            handing = set(decision.release)
            kept = (fresh_renewals(claims, self.sessions, sent_at, *self._times) if looked is not None
                    else {**spread_renewals([o for o in claims if o.partition_id not in handing], self.sessions,
                                            sent_at, *self._renewal_times),
                          **handing_over(handing, self.sessions, sent_at, *self._renewal_times)})
            presence_sent = looked is None or not fresh(self._presence_at, sent_at, *self._times)
            # releases, presence and gains first: a claim cut short by a slow store (StoreCalls.claim_partly) drops
            # renewals, which the next round sends again: the oldest first, so a cut never drops the same ones twice
            gains, age = set(decision.acquiring), {pid: s.renewed_at for pid, s in self.sessions.items()}
            sent = [*releases, *([self._presence_record(presence, self.owner_id)] if presence_sent else []),
                    *sorted((o for o in claims if o.partition_id not in handed and o.partition_id not in kept),
                            key=lambda o: (o.partition_id not in gains, age.get(o.partition_id, 0.0)))]
            self._releases.open_window({o.partition_id for o in sent if o.consumer_group == self.group[2]})
            if current_stepper() is None:  # handovers begin now: drained meanwhile, released beside the claim
                self._begin_handovers(decision)
            steady = not (decision.claim or decision.steal or decision.release or handed or releases or looked)
            cut = Cut() if steady and len(sent) > CLAIM_CHUNK and current_stepper() is None else None
            watching = None if cut is None else asyncio.ensure_future(  # a join cuts renewals short (_presence_watch)
                self._watch.during_claim(self.calls, self._now, presence, cut))
            self._claim_cut = cut  # and so does a stop (stop())
            try:
                won, read, unanswered = await self._claim_and_read(sent, decision, handed, sent_at, cut)
            finally:  # partitions released beside the claim are not this round's to record (_releases)
                self._claim_cut = None
                beside = self._releases.close_window()
                if watching is not None:
                    watching.cancel()
            claims, kept = [o for o in claims if o.partition_id not in beside], {
                pid: o for pid, o in kept.items() if pid not in beside}
            self._round_times = (sent_at - started, self._now() - sent_at)  # listings; claim (the bench's log)
            if unanswered:  # part of a large claim failed: those records stay as they were, retried next round
                cut_short = len(cut.records) if cut is not None else 0  # (not a failure)
                if len(unanswered) > cut_short:
                    self.listener.on_error("claim", StoreError(
                        f"claim_ownership: {len(unanswered) - cut_short} records not answered"))
                releases, presence_sent, kept = unanswered_in(
                    unanswered, self.group[2], self.presence_group, self.owner_id, self.sessions, releases,
                    presence_sent, kept, cut_short)
                won = [*won, *(kept[o.partition_id] for o in unanswered if o.partition_id in kept)]
        except Exception as exc:
            if not listed and self._stopping is None:
                await self._renew_unlisted()  # a renewal needs no listing (_holdings)
                self.calls.operation = "list"  # what failed
            self._round_failed(exc)
            return
        self._apply(decision, claims, releases, [*won, *handed.values(), *kept.values()], sent_at, kept,
                    presence_sent)
        try:
            checkpoints = await self._checkpoints_of_claimed(read)
        except Exception as exc:
            self._round_failed(exc)
            return
        self._start_claimed(checkpoints)
        self._attempt = 0
        # claims lost to a consumer that dealt from another listing leave room that the next round fills: at once,
        # once in a row (at a stop of four of 1,024 partitions the loser otherwise waited out an interval)
        lost = lost_claims(decision, self.sessions)
        rerun = self._reran = lost > 0 and not self._reran
        if rerun:
            log.info("balancing: %d claims went to other consumers; the next round runs at once", lost)
        cut_short = cut is not None and cut.event.is_set()
        self._next_round = self._now() if rerun or cut_short else self._due_after(started)
        self._after_round(started)
        self._arm_watchdog()

    def _round_failed(self, error: Exception) -> None:
        self._attempt += 1
        delay = min(self.retry.delay(self._attempt), self.settings.load_balancing_interval)
        operation = self.calls.operation
        log.warning("balancing: %s failed (%s); retry %d in %.1f s", operation, error, self._attempt, delay)
        self.listener.on_error(operation, error)
        self._expire()
        self._next_round = self._now() + delay

    def _crashed(self, error: Exception) -> None:
        log.error("balancing: the loop failed: %r", error)
        if self._finished:
            return
        self.fatal = self.fatal or error
        self._finish([])
