"""Looks: while a consumer awaits a handover, when it lists the records between rounds, and for how long.

A round's plan says how many partitions cooperating owners above their target will hand over to this
consumer (:attr:`Plan.awaiting <rxhubs.balancing.Plan.awaiting>`) and when the first of them balances next
(:attr:`Plan.release_expected <rxhubs.balancing.Plan.release_expected>`). From that moment the loop lists the
ownership records every :func:`look_gap` seconds, on a grid from its own round's start (so consumers that
joined together do not look in step), and runs its round as soon as a release shows. Once the owner is seen
releasing (a round claimed released partitions while more are awaited, or the owner renewed since this consumer
began awaiting: it has balanced and is draining what it hands over), the next look is one gap later, not at
the owner's next round: an owner releases partition by partition as its streams drain, and a listing may have
caught none or only the first of its writes. It stops looking when nothing is awaited any more, or one
ownership expiration after it began (an owner that never finishes its handover does not cost store calls
forever). In steady state nothing is awaited and nothing is looked at.
"""

from __future__ import annotations

import math

from rxhubs.balancing._planner import BalancingSettings, Plan

__all__ = ["Looks", "look_gap"]

#: While awaiting a handover, the records are listed this many times per interval. More would find a release
#: sooner but multiply the store calls of a mass join (200 consumers joining at once all await).
_LOOKS_PER_INTERVAL = 8


def look_gap(interval: float) -> float:
    """Seconds between two looks at the records while a consumer awaits a handover.

    Example:
        >>> look_gap(2.0), look_gap(10.0)
        (0.25, 1.25)
    """
    return interval / _LOOKS_PER_INTERVAL


class Looks:
    """When the next look is due, for one consumer.

    Example:
        >>> looks = Looks(BalancingSettings(load_balancing_interval=2.0, ownership_expiration=12.0))
        >>> looks.due(0.0) is None  # nothing awaited
        True
    """

    def __init__(self, settings: BalancingSettings) -> None:
        self.gap = look_gap(settings.load_balancing_interval)
        self.expiration = settings.ownership_expiration
        #: Looks taken so far (each one ``list_ownership`` call).
        self.count = 0
        self._since: float | None = None
        self._first_expected: float | None = None
        self._next = 0.0

    def after_round(self, plan: Plan | None, now: float) -> None:
        """A round that began at ``now`` planned ``plan``: begin, go on or end looking."""
        if plan is None or plan.awaiting <= 0:
            self._since = self._first_expected = None
            return
        expected = plan.release_expected
        if self._since is None:
            self._since, self._first_expected = now, expected
        steps = 1 if self._under_way(plan) or expected is None else max(1, math.ceil((expected - now) / self.gap))
        self._next = now + steps * self.gap

    def _under_way(self, plan: Plan) -> bool:
        """Whether the owner is releasing now, so the releases come within moments, not at its next round.

        Either partitions were free to claim (an owner releases each partition as its stream drains, in several
        writes, and a listing can catch the first of them), or the owner renewed since this consumer began
        awaiting: it balanced after this consumer's presence was written, and is draining what it hands over.
        Renewal times are the store's and compared only with each other (a blob's have one-second resolution,
        so the owner's next round is not known to the second, but a newer renewal is always a later one).
        """
        renewed = (
            plan.release_expected is not None
            and self._first_expected is not None
            and plan.release_expected > self._first_expected
        )
        return bool(plan.claim) or renewed

    def due(self, now: float) -> float | None:
        """When to look next; None unless awaiting (for at most one expiration per handover)."""
        if self._since is None or now - self._since > self.expiration:
            return None
        return self._next

    def taken(self, now: float) -> None:
        """A look begins at ``now``: count it, and schedule the next one a gap later."""
        self.count += 1
        self._next = now + self.gap
