"""The balancing loop: every interval, list ownership, plan, then claim, renew and release through the store.

One :class:`BalancingLoop` runs per subscription of :func:`rxhubs.partitions`. It owns the conversation
with the store; the partition streams are the listener's business (:class:`LoopListener`). Every store
call goes through :func:`rxhubs._rx._aio.call`, so the loop runs on asyncio with a real store and in
virtual time under ``TestScheduler`` with the in-memory one.

One round (a *tick*), at most one store operation at a time:

1. ``list_ownership`` of the consumer group and of its presence group (see
   :mod:`rxhubs.balancing._planner`);
2. :func:`~rxhubs.balancing._planner.plan`;
3. one ``claim_ownership`` call carrying the renewals, the claims, the steals, the releases of partitions
   whose handover finished, and this consumer's presence record;
4. for partitions gained, one ``list_checkpoints`` call, then ``listener.on_acquired`` for each;
   for partitions to hand over, ``listener.on_revoke``; for renewals that lost their compare-and-swap
   (another consumer took the partition), ``listener.on_lost``.

The next round is one interval after the last one started, or sooner: right after another consumer's
record expires, if that happens first (at most one such early round per half interval), so a crashed
consumer's partitions are taken over within half an interval of its expiry, not up to a whole one later.
A failed round is retried with backoff (at most one interval apart); ownership is kept meanwhile. A
partition whose last successful renewal is older than the ownership expiration is given up
(``on_lost``): another consumer may own it now, so reading on would make two readers.

Stopping (graceful or on disposal) revokes every partition; once the listener reports each one ready
(batches finished, checkpoint written), a single ``claim_ownership`` call releases them all together with
the presence record, so other consumers take over at their next round instead of waiting for expiry.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal, Protocol

from reactivex import Observable, abc

from rxhubs._models import Checkpoint, Ownership
from rxhubs._rx._aio import call
from rxhubs.balancing._planner import BalancingSettings, Plan, plan, presence_group
from rxhubs.errors import AuthenticationError, ConfigurationError, NotFoundError, StoreError
from rxhubs.sources._retry import Backoff

__all__ = ["BalancingLoop", "LoopListener", "RevokeReason"]

log = logging.getLogger("rxhubs.balancing")

RevokeReason = Literal["handover", "shutdown", "dispose"]

#: Errors reading the hub's partitions that end the stream: retrying cannot help. Anything else (a dropped
#: connection, an SDK hiccup such as two management calls racing on one client) is retried.
_FATAL = (NotFoundError, AuthenticationError, ConfigurationError)

#: Partition ids are re-read from the hub every this many rounds (partitions can be added to a hub).
_REFRESH_IDS_EVERY = 30


class LoopListener(Protocol):
    """What the loop tells the owner of the partition streams."""

    def on_acquired(self, record: Ownership, checkpoint: Checkpoint | None) -> None:
        """The consumer now owns ``record.partition_id``; ``checkpoint`` is its stored checkpoint."""

    def on_revoke(self, partition_id: str, reason: RevokeReason) -> None:
        """Stop reading, finish, flush, then call :meth:`BalancingLoop.ready` so the loop releases it."""

    def on_lost(self, partition_id: str) -> None:
        """The partition is not this consumer's any more: stop reading at once; write nothing for it."""

    def on_released(self, partition_id: str) -> None:
        """The partition was released (or its release attempted): it is not this consumer's any more."""

    def on_stopped(self) -> None:
        """After :meth:`BalancingLoop.stop`: everything is released; the loop is done."""


@dataclass(slots=True)
class _Held:
    record: Ownership
    renewed_at: float
    revoking: bool = False
    ready: bool = False
    started: bool = False


class BalancingLoop:
    """Balances one consumer against the store on a scheduler. Create, :meth:`start`, then stop or dispose.

    Args:
        store: A checkpoint store (the rxhubs contract, or Rx-native ``observe_<verb>`` forms).
        namespace: The hub's fully qualified namespace.
        eventhub_name: The hub's name.
        consumer_group: The consumer group.
        partition_ids: Returns a one-shot Observable of the hub's partition ids.
        owner_id: This consumer's id.
        settings: Interval, expiration and strategy.
        scheduler: Where timers and store calls run.
        listener: Receives acquisitions, revocations and losses.
        retry: Backoff between failed rounds (each wait is capped at one interval).
        baseline: Also list the checkpoints before the first claim (``baseline_checkpoints``).
    """

    def __init__(
        self,
        store: object,
        *,
        namespace: str,
        eventhub_name: str,
        consumer_group: str,
        partition_ids: Callable[[], Observable[Sequence[str]]],
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
        self._partition_ids_source = partition_ids
        self.owner_id = owner_id
        self.settings = settings
        self.scheduler = scheduler
        self.listener = listener
        interval = settings.load_balancing_interval
        self.retry = retry or Backoff(initial=min(0.5, interval), maximum=interval, max_retries=None)
        self.want_baseline = baseline
        #: Checkpoints listed before the first claim (when ``baseline`` was asked for).
        self.baseline_checkpoints: dict[str, Checkpoint] | None = None
        self.partition_ids: tuple[str, ...] | None = None
        self.held: dict[str, _Held] = {}
        self.avoid: dict[str, float] = {}
        self.failures: dict[str, int] = {}
        self.last_plan: Plan | None = None
        self.rounds = 0
        self._presence_etag: str | None = None
        self._busy = False
        self._tick_due = False
        self._release_due = False
        self._attempt = 0
        self._timer: abc.DisposableBase | None = None
        self._watchdog: abc.DisposableBase | None = None
        self._stopping: RevokeReason | None = None
        self._finished = False
        self._final_attempts = 0
        #: A non-retriable error that ended the loop (an unknown hub, refused credentials), if any.
        self.fatal: Exception | None = None
        self._last_early = float("-inf")

    # -- public --------------------------------------------------------------------------------------------
    @property
    def owned(self) -> frozenset[str]:
        """The partitions this consumer holds right now (including those being handed over)."""
        return frozenset(self.held)

    @property
    def stopping(self) -> bool:
        """True once :meth:`stop` or :meth:`dispose` was called."""
        return self._stopping is not None

    def start(self) -> None:
        """Run the first round now, then one every interval."""
        self._schedule_tick(0.0)

    def ready(self, partition_id: str, *, failed: bool = False) -> None:
        """The listener finished handing ``partition_id`` over: release it with the next store call.

        Args:
            partition_id: The partition.
            failed: Its reader failed: do not claim it again for a while (doubling per failure).
        """
        held = self.held.get(partition_id)
        if failed:
            self._avoid_after_failure(partition_id)
        if held is None:
            return
        held.ready = True
        if self._stopping is not None:
            self._maybe_finish()
        elif self._busy:
            self._release_due = True
        else:
            self._release_due = True
            self.scheduler.schedule(lambda *_: self._release_now())

    def abandon(self, partition_id: str) -> None:
        """Forget a partition whose reader was cut off (a reader with a higher owner level took it).

        Its record is neither renewed nor released: whoever took it over claims it, or it expires.
        """
        self.held.pop(partition_id, None)
        self.avoid[partition_id] = self._now() + self.settings.ownership_expiration

    def stop(self, reason: RevokeReason = "shutdown") -> None:
        """Stop balancing: revoke every partition, release them all once ready, then ``on_stopped``."""
        if self._stopping is not None:
            if reason == "dispose" and self._stopping != "dispose":
                self._stopping = "dispose"
                for pid, held in list(self.held.items()):
                    if not held.ready:
                        self.listener.on_revoke(pid, "dispose")
            return
        self._stopping = reason
        if self._timer is not None:
            self._timer.dispose()
            self._timer = None
        for pid, held in list(self.held.items()):
            if not held.started:
                held.ready = True
            elif not held.revoking:
                held.revoking = True
                self.listener.on_revoke(pid, reason)
        self._schedule_tick(self.settings.load_balancing_interval)  # keep renewing while handovers finish
        self._maybe_finish()

    def dispose(self) -> None:
        """Stop without waiting for batches in flight (the pipeline is being torn down)."""
        self.stop("dispose")

    # -- time and scheduling -------------------------------------------------------------------------------
    def _now(self) -> float:
        return self.scheduler.now.timestamp()

    def _schedule_tick(self, delay: float) -> None:
        if self._finished:
            return
        if self._timer is not None:
            self._timer.dispose()
        self._timer = self.scheduler.schedule_relative(max(0.0, delay), lambda *_: self._tick())

    def _call(
        self, obj: object, verb: str, *args: Any, then: Callable[[Any], None], otherwise: Callable[[Exception], None]
    ) -> None:
        """Run one store (or hub) call with a timeout of one interval; exactly one of the continuations runs."""
        state = {"done": False}
        subscription: list[abc.DisposableBase] = []

        def ok(value: Any) -> None:
            if state["done"]:
                return
            state["done"] = True
            timer.dispose()
            then(value)

        def bad(exc: Exception) -> None:
            if state["done"]:
                return
            state["done"] = True
            timer.dispose()
            for sub in subscription:
                sub.dispose()
            otherwise(exc)

        def timed_out(*_: Any) -> None:
            bad(StoreError(f"{verb} did not answer within {self.settings.load_balancing_interval:.1f} s"))

        timer = self.scheduler.schedule_relative(self.settings.load_balancing_interval, timed_out)
        try:
            source = call(obj, verb, *args)
            values: list[Any] = []
            subscription.append(
                source.subscribe(
                    values.append, bad, lambda: ok(values[0] if values else None), scheduler=self.scheduler
                )
            )
        except Exception as exc:
            bad(exc)

    # -- one round -----------------------------------------------------------------------------------------
    def _tick(self) -> None:
        self._timer = None
        if self._finished:
            return
        if self._busy:
            self._tick_due = True
            return
        self._busy = True
        started = self._now()
        if self._stopping is not None:
            self._renew_only(started)
            return
        if self.partition_ids is None or self.rounds % _REFRESH_IDS_EVERY == 0:
            self._fetch_ids(started)
            return
        self._list(started)

    def _fetch_ids(self, started: float) -> None:
        state = {"done": False}

        def ok(ids: Sequence[str]) -> None:
            if state["done"]:
                return
            state["done"] = True
            self.partition_ids = tuple(str(i) for i in ids)
            self._list(started)

        def bad(exc: Exception) -> None:
            if state["done"]:
                return
            state["done"] = True
            if self.partition_ids is not None:  # a refresh failed: go on with the ids we know
                log.warning("balancing: reading the partition ids failed (%s); keeping the known ids", exc)
                self._list(started)
                return
            if isinstance(exc, _FATAL):  # an unknown hub, refused credentials: no retry helps; anything else retries
                log.error("balancing: cannot read the hub's partitions: %s", exc)
                self.fatal = exc
                self.stop("dispose")
            self._round_failed(exc)

        try:
            self._partition_ids_source().subscribe(ok, bad, scheduler=self.scheduler)
        except Exception as exc:
            bad(exc)

    def _list(self, started: float) -> None:
        ns, hub, group = self.group

        def got_ownership(records: Any) -> None:
            def got_presence(presence: Any) -> None:
                if self.want_baseline and self.baseline_checkpoints is None:
                    self._call(
                        self.store,
                        "list_checkpoints",
                        ns,
                        hub,
                        group,
                        then=lambda cps: self._got_baseline(cps, records, presence, started),
                        otherwise=self._round_failed,
                    )
                else:
                    self._claim(list(records or ()), list(presence or ()), started)

            self._call(
                self.store,
                "list_ownership",
                ns,
                hub,
                self.presence_group,
                then=got_presence,
                otherwise=self._round_failed,
            )

        self._call(self.store, "list_ownership", ns, hub, group, then=got_ownership, otherwise=self._round_failed)

    def _got_baseline(self, checkpoints: Any, records: Any, presence: Any, started: float) -> None:
        self.baseline_checkpoints = {c.partition_id: c for c in checkpoints or ()}
        self._claim(list(records or ()), list(presence or ()), started)

    def _presence_record(self, presence: list[Ownership] | None, owner_id: str) -> Ownership:
        ns, hub, _ = self.group
        etag = self._presence_etag
        if presence is not None:
            etag = None
            for record in presence:
                if record.partition_id.lower() == self.owner_id.lower():
                    etag = record.etag
        return Ownership(ns, hub, self.presence_group, self.owner_id, owner_id, None, etag)

    def _claim(self, records: list[Ownership], presence: list[Ownership], started: float) -> None:
        assert self.partition_ids is not None
        now = self._now()
        self.avoid = {pid: until for pid, until in self.avoid.items() if until > now}
        releasing = {pid for pid, h in self.held.items() if h.revoking}
        decision = plan(
            records,
            self.partition_ids,
            self.owner_id,
            now,
            self.settings,
            presence=presence,
            releasing=releasing,
            avoid=set(self.avoid),
            group=self.group,
        )
        self.last_plan = decision
        releases = self._ready_releases()
        released_ids = {r.partition_id for r in releases}
        claims = [o for o in decision.claims if o.partition_id not in released_ids]
        sent = [*claims, *releases, self._presence_record(presence, self.owner_id)]
        self._call(
            self.store,
            "claim_ownership",
            sent,
            then=lambda won: self._claimed(decision, claims, releases, list(won or ()), started),
            otherwise=self._round_failed,
        )

    def _ready_releases(self) -> list[Ownership]:
        return [replace(h.record, owner_id="") for h in self.held.values() if h.ready]

    def _split(self, won: list[Ownership]) -> tuple[dict[str, Ownership], Ownership | None]:
        presence: Ownership | None = None
        records: dict[str, Ownership] = {}
        for record in won:
            if record.consumer_group.lower() == self.presence_group.lower():
                if record.partition_id.lower() == self.owner_id.lower():
                    presence = record
            else:
                records[record.partition_id] = record
        return records, presence

    def _claimed(
        self,
        decision: Plan,
        claims: list[Ownership],
        releases: list[Ownership],
        won: list[Ownership],
        sent_at: float,
    ) -> None:
        records, presence = self._split(won)
        self._presence_etag = presence.etag if presence is not None else None
        self._forget_released(releases)
        acquired: list[str] = []
        claimed_ids = set()
        for claim in claims:
            pid = claim.partition_id
            claimed_ids.add(pid)
            record = records.get(pid)
            held = self.held.get(pid)
            if record is None:
                if held is not None:
                    log.info("balancing: partition %s was taken over by another consumer", pid)
                    self._lose(pid)
                continue
            if held is None:
                self.held[pid] = _Held(record, sent_at)
                acquired.append(pid)
            else:
                held.record, held.renewed_at = record, sent_at
        for pid in [p for p in self.held if p not in claimed_ids and not self.held[p].ready]:
            log.info("balancing: partition %s is no longer owned by this consumer", pid)
            self._lose(pid)
        for pid in decision.release:
            held = self.held.get(pid)
            if held is not None and not held.revoking:
                held.revoking = True
                if held.started:
                    self.listener.on_revoke(pid, "handover")
                else:
                    held.ready = True
                    self._release_due = True
        self.rounds += 1
        self._start_pending(sent_at)

    def _forget_released(self, releases: list[Ownership]) -> None:
        for release in releases:
            if self.held.pop(release.partition_id, None) is not None:
                self.listener.on_released(release.partition_id)

    def _lose(self, partition_id: str) -> None:
        if self.held.pop(partition_id, None) is not None:
            self.listener.on_lost(partition_id)

    def _start_pending(self, started: float) -> None:
        if self._stopping is not None:  # gained while stopping: release without reading
            for held in self.held.values():
                if not held.started:
                    held.ready = True
        pending = [pid for pid, h in self.held.items() if not h.started and not h.ready]
        if not pending:
            self._round_done(started)
            return
        ns, hub, group = self.group

        def got(checkpoints: Any) -> None:
            by_id = {c.partition_id: c for c in checkpoints or ()}
            for pid in pending:
                held = self.held.get(pid)
                if held is None or held.started or held.ready:
                    continue
                held.started = True
                self.listener.on_acquired(held.record, by_id.get(pid))
            self._round_done(started)

        self._call(self.store, "list_checkpoints", ns, hub, group, then=got, otherwise=self._round_failed)

    # -- after a store operation ---------------------------------------------------------------------------
    def _round_done(self, started: float) -> None:
        self._attempt = 0
        self._busy = False
        self._arm_watchdog()
        if self._stopping is None:
            interval = self.settings.load_balancing_interval
            due = started + interval
            expiry = self.last_plan.earliest_expiry if self.last_plan is not None else None
            if expiry is not None and expiry < due:
                # another owner's record expires before our next round: look again right after it expires,
                # but at most once per half interval (a mass crash must not turn into a storm of rounds)
                early = max(expiry + interval / 100, self._last_early + interval / 2, self._now())
                if early < due:
                    due = self._last_early = early
            self._schedule_tick(due - self._now())
        self._after_op()

    def _round_failed(self, exc: Exception) -> None:
        self._attempt += 1
        delay = min(self.retry.delay(self._attempt), self.settings.load_balancing_interval)
        log.warning("balancing: store call failed (%s); retry %d in %.1f s", exc, self._attempt, delay)
        self._busy = False
        self._expire()
        if self._stopping is None:
            self._schedule_tick(delay)
        self._after_op()

    def _after_op(self) -> None:
        if self._finished:
            return
        if self._stopping is not None:
            self._maybe_finish()
            return
        if self._tick_due:
            self._tick_due = False
            self._tick()
        elif self._release_due:
            self._release_now()

    def _release_now(self) -> None:
        self._release_due = False
        if self._busy or self._finished or self._stopping is not None:
            return
        releases = self._ready_releases()
        if not releases:
            return
        self._busy = True

        def done(_: Any) -> None:
            self._busy = False
            self._forget_released(releases)
            self._after_op()

        def failed(exc: Exception) -> None:
            log.warning("balancing: releasing %d partitions failed (%s); retrying next round", len(releases), exc)
            self._busy = False
            self._after_op()

        self._call(self.store, "claim_ownership", releases, then=done, otherwise=failed)

    def _renew_only(self, started: float) -> None:
        """While stopping: keep the records that are still being handed over from expiring."""
        renew = [h.record for h in self.held.values() if not h.ready]
        if not renew:
            self._busy = False
            self._maybe_finish()
            return

        def done(won: Any) -> None:
            records, _ = self._split(list(won or ()))
            for pid, record in records.items():
                held = self.held.get(pid)
                if held is not None:
                    held.record, held.renewed_at = record, started
            self._busy = False
            self._arm_watchdog()
            self._schedule_tick(self.settings.load_balancing_interval)
            self._maybe_finish()

        def failed(exc: Exception) -> None:
            self._busy = False
            self._expire()
            self._schedule_tick(min(self.retry.delay(1), self.settings.load_balancing_interval))
            self._maybe_finish()

        self._call(self.store, "claim_ownership", renew, then=done, otherwise=failed)

    # -- expiry --------------------------------------------------------------------------------------------
    def _arm_watchdog(self) -> None:
        if self._watchdog is not None:
            self._watchdog.dispose()
            self._watchdog = None
        if not self.held or self._finished:
            return
        due = min(h.renewed_at for h in self.held.values()) + self.settings.ownership_expiration
        self._watchdog = self.scheduler.schedule_relative(max(0.0, due - self._now()), lambda *_: self._expire())

    def _expire(self) -> None:
        now = self._now()
        for pid, held in list(self.held.items()):
            if held.renewed_at + self.settings.ownership_expiration <= now:
                log.warning(
                    "balancing: ownership of partition %s expired (no renewal for %.1f s): stopping its reader",
                    pid,
                    now - held.renewed_at,
                )
                self._lose(pid)
        if self._stopping is not None:
            self._maybe_finish()
        else:
            self._arm_watchdog()

    def _avoid_after_failure(self, partition_id: str) -> None:
        failures = self.failures[partition_id] = self.failures.get(partition_id, 0) + 1
        wait = self.settings.load_balancing_interval * min(2 ** (failures - 1), 32)
        self.avoid[partition_id] = self._now() + wait

    # -- stopping ------------------------------------------------------------------------------------------
    def _maybe_finish(self) -> None:
        if self._finished or self._busy or self._stopping is None:
            return
        if any(not h.ready for h in self.held.values()):
            return
        self._busy = True
        self._final_attempts += 1
        ns, hub, _ = self.group

        def release(presence: Ownership) -> None:
            releases = self._ready_releases()

            def done(_: Any) -> None:
                self._busy = False
                self._finish(releases)

            self._call(self.store, "claim_ownership", [*releases, presence], then=done, otherwise=failed)

        def listed(records: Any) -> None:
            release(self._presence_record(list(records or ()), ""))

        def failed(exc: Exception) -> None:
            self._busy = False
            if self._final_attempts <= 3:
                log.warning("balancing: releasing on stop failed (%s); retrying", exc)
                self.scheduler.schedule_relative(
                    self.retry.delay(self._final_attempts), lambda *_: self._maybe_finish()
                )
            else:
                log.warning("balancing: releasing on stop failed (%s); the records will expire instead", exc)
                self._finish([])

        if self._presence_etag is None:  # the last presence claim failed: read the record's etag first
            self._call(self.store, "list_ownership", ns, hub, self.presence_group, then=listed, otherwise=failed)
        else:
            release(self._presence_record(None, ""))

    def _finish(self, releases: list[Ownership]) -> None:
        self._forget_released(releases)
        for pid in list(self.held):
            self._lose(pid)
        self._finished = True
        for timer in (self._timer, self._watchdog):
            if timer is not None:
                timer.dispose()
        self._timer = self._watchdog = None
        self.listener.on_stopped()
