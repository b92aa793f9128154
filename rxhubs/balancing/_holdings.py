"""The bookkeeping half of the balancing loop: the sessions it holds, losing them, and their expiry."""

from __future__ import annotations

import logging

from reactivex import abc

from rxhubs import _telemetry
from rxhubs._models import Ownership
from rxhubs._rx import Signal
from rxhubs.balancing._listener import LoopListener
from rxhubs.balancing._planner import BalancingSettings
from rxhubs.balancing._session import PartitionSession

__all__ = ["Holdings"]

log = logging.getLogger("rxhubs.balancing")


class Holdings:
    """What one consumer holds: a :class:`PartitionSession` per partition, and the partitions it avoids.

    :class:`~rxhubs.balancing._loop.BalancingLoop` builds on it: the loop talks to the store, this keeps the
    record of what came of it, and gives a partition up the moment its last renewal is older than the
    ownership expiration (another consumer may own it by then, so reading on would make two readers).
    """

    owner_id: str
    sessions: dict[str, PartitionSession]
    avoid: dict[str, float]
    failures: dict[str, int]
    settings: BalancingSettings
    scheduler: abc.SchedulerBase
    listener: LoopListener
    _wake: Signal
    _watchdog: abc.DisposableBase | None
    _finished: bool

    def _now(self) -> float:
        return self.scheduler.now.timestamp()

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
        due = min(s.renewed_at for s in self.sessions.values()) + self.settings.ownership_expiration
        self._watchdog = self.scheduler.schedule_relative(max(0.0, due - self._now()), lambda *_: self._expire())

    def _expire(self) -> None:
        now = self._now()
        for pid, session in list(self.sessions.items()):
            if session.renewed_at + self.settings.ownership_expiration <= now:
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
