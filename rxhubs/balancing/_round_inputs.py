"""What a balancing round plans from: the hub's partition ids, the ownership and presence records, the plan.

:class:`RoundInputs` is the part of :class:`~rxhubs.balancing._loop.BalancingLoop` that gathers a round's inputs:
the partition ids (re-read every round, but never holding the round up once known), both listings, and the plan
made from them (:func:`~rxhubs.balancing.plan`); and, while a handover is awaited, the looks whose listings a round
then plans from (:meth:`RoundInputs._handed_over`). Its state is set by ``BalancingLoop.__init__``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

from rxhubs._models import Ownership
from rxhubs._retry import is_retriable
from rxhubs._rx import deadline, sleep
from rxhubs._rx._driver import current_stepper
from rxhubs.balancing._listener import RevokeReason
from rxhubs.balancing._looks import SETTLE_INTERVALS
from rxhubs.balancing._planner import Plan, plan
from rxhubs.balancing._session import SessionState
from rxhubs.balancing._wind_down import WindDown

__all__ = ["SETTLE_INTERVALS", "RoundInputs"]

log = logging.getLogger("rxhubs.balancing")

#: Partition ids are re-read from the hub every this many rounds (partitions can be added to a live hub:
#: every round, so new ones are claimed within an interval of appearing; one management call per round).
_REFRESH_IDS_EVERY = 1


class RoundInputs(WindDown):
    """The steps of a round that read: partition ids, listings, and the plan made from them."""

    partition_ids: tuple[str, ...] | None
    _read_partition_ids: Callable[[], Awaitable[Sequence[str]]]
    _refresh: asyncio.Future[tuple[str, ...] | None] | None
    #: The records and presence records of the look that saw a release: the round it triggers plans from them.
    _looked: tuple[list[Ownership], list[Ownership]] | None

    if TYPE_CHECKING:

        def stop(self, reason: RevokeReason = "shutdown") -> None: ...

    async def _partition_ids(self) -> tuple[str, ...] | None:
        """The hub's partition ids, re-read every round but while a handover is awaited; None if that failed for good.

        (While awaiting, the round's listings would wait for the management call: up to 0.4 s on the emulator.)
        """
        awaiting = self.last_plan is not None and self.last_plan.awaiting > 0
        if self.partition_ids is not None and (awaiting or self.rounds % _REFRESH_IDS_EVERY != 0):
            return self.partition_ids
        try:
            if self.partition_ids is None:
                ids = await self._read_partition_ids()
            else:  # a slow refresh (a busy service, retries) must not hold up renewing what is owned
                async with deadline(self.calls.timeout):
                    ids = await self._read_partition_ids()
        except Exception as exc:
            if self.partition_ids is not None:  # a refresh failed: go on with the ids we know
                why = str(exc) or f"no answer within {self.calls.timeout:.1f} s"
                log.warning("balancing: reading the partition ids failed (%s); keeping the known ids", why)
                return self.partition_ids
            if not is_retriable(exc):  # an unknown hub, refused credentials: no retry helps
                log.error("balancing: cannot read the hub's partitions: %s", exc)
                self.fatal = exc
                self.stop("dispose")
                return None
            raise
        self.partition_ids = tuple(str(i) for i in ids)
        return self.partition_ids

    async def _ids_and_listings(self) -> tuple[tuple[str, ...] | None, list[Ownership], list[Ownership]]:
        """The partition ids, the ownership records and the presence records that a round plans from.

        Once the ids are known, the refresh goes out with both listings under asyncio, and the round waits for
        the listings only: the claim carries the renewals, and a management call that a busy service answers
        late (or never, until its ``store_timeout``) must not hold them up. Waiting for it, the renewals of a
        loaded machine slipped past the expiration (the Azurite outage test, after the heal: a refresh timed out
        after 1 s, the renewal went out late, the partitions expired and their events were read twice). A
        refresh answered before the listings counts in this round; a later answer, in the next one (at most one
        refresh is in flight). The first read of the ids, and virtual time, keep the order.
        """
        if self.partition_ids is None or current_stepper() is not None:
            if (ids := await self._partition_ids()) is None:
                return None, [], []
            return (ids, *await self.calls.owners_and_presence())
        if self._refresh is None or self._refresh.done():
            self._refresh = asyncio.ensure_future(self._partition_ids())
        records, presence = await self.calls.owners_and_presence()
        return self.partition_ids, records, presence

    def _plan(self, records: list[Ownership], presence: list[Ownership], ids: tuple[str, ...]) -> Plan:
        self.last_plan = self._decide(records, presence, ids)
        self._settle = self._settle_after(records, self.last_plan)  # (for the looks' window)
        return self.last_plan

    async def _plan_settled(
        self, records: list[Ownership], presence: list[Ownership], ids: tuple[str, ...]
    ) -> tuple[Plan, list[Ownership]]:
        """The round's plan and presence records, a join of several consumers let settle before dealing to them.

        When the plan deals partitions to recipients (:attr:`Plan.release_to`) and two or more of its owners are new
        since the last round, consumers are joining together (processes started at once: a deployment scaled out),
        and the rest of them may be writing their presence records at this very moment. Dealt to those it saw, the
        others' shares come from the recipients' surplus at *their* next rounds: one more interval (seven joiners of
        an owner of 1,024 partitions: 3.08 intervals instead of 1.35, quiet; the owner's listing began 0.3 s into the
        0.6 s in which the seven wrote theirs). So it lists the presence records again after
        :data:`SETTLE_INTERVALS` of an interval and plans from them: Kafka's group coordinator delays a new group's
        first rebalance for the same reason (``group.initial.rebalance.delay.ms``, 3 s).
        """
        before = set(self.last_plan.owners) if self.last_plan is not None else None
        decision = self._plan(records, presence, ids)
        if before is None or not decision.release_to or len(set(decision.owners) - before) < 2:
            return decision, presence
        await sleep(self.settings.load_balancing_interval * SETTLE_INTERVALS)
        try:
            presence = await self.calls.presence()
        except Exception as exc:  # deal from what the round listed: the settle is only a refinement
            log.debug("balancing: listing the presence records again failed (%s)", exc)
            return decision, presence
        return self._plan(records, presence, ids), presence

    def _decide(self, records: list[Ownership], presence: list[Ownership], ids: tuple[str, ...]) -> Plan:
        now = self._now()
        self.avoid = {pid: until for pid, until in self.avoid.items() if until > now}
        releasing = {pid for pid, s in self.sessions.items() if s.state is SessionState.DRAINING or s.ready}
        return plan(
            records,
            ids,
            self.owner_id,
            now,
            self.settings,
            presence=presence,
            releasing=releasing,
            avoid=set(self.avoid),
            group=self.group,
        )

    # -- awaiting a handover -----------------------------------------------------------------------------------
    async def _handed_over(self) -> bool:
        """List the records once: True if a partition this consumer would claim was released meanwhile.

        With the presence records (a consumer joined since the last round changes every target): the round this
        look triggers claims from both listings at once.
        """
        self._looks.taken(self._now())
        if self.partition_ids is None:
            return False
        try:
            records, presence = await self.calls.owners_and_presence()
        except Exception as exc:  # the next round reports it; a look is only a shortcut
            log.debug("balancing: looking for a handover failed (%s)", exc)
            return False
        finally:
            self._looks.answered(self._now())
        seen = self._decide(records, presence, self.partition_ids)
        if not seen.claim and not self._handed_to_me(seen):
            self._looks.looked(seen, self._now(), self._settle_after(records, seen))
            return False
        self._looked = records, presence
        return True
