"""Looks: while a consumer awaits a handover, when it lists the records between rounds, and for how long.

A round's plan says how many partitions cooperating owners above their target will hand over to this consumer
(:attr:`Plan.awaiting <rxhubs.balancing.Plan.awaiting>`) and when the first of them balances next
(:attr:`Plan.release_expected <rxhubs.balancing.Plan.release_expected>`). Around that moment the release is
**imminent**: the owner lists, sees this consumer, stops reading what it hands over, finishes the batches in flight,
writes their checkpoints and releases, all within a fraction of a second. So the loop lists the ownership records
every :func:`imminent_gap` seconds (20 ms at most) from that moment for a short **window** (:func:`imminent_window`:
the store's timestamp resolution, which blurs when the owner renewed, plus a quarter of a second and the owner's
:data:`LINGER`), and every :func:`look_gap` seconds outside it; it runs its round as soon as a release shows. Once
the owner is seen releasing (a round claimed released partitions while more are awaited, or the owner renewed since
this consumer began awaiting: it has balanced and is draining what it hands over), a window opens at once: an owner
releases partition by partition as its streams drain, and a listing may have caught none or only the first of its
writes; and another opens at the owner's next round (it may not have seen this consumer's presence yet). Looks stay
on a grid from the consumer's own round (so consumers that joined together do not look in step). They stop when
nothing is awaited any more, or one ownership expiration after they began (an owner that never finishes its handover
does not cost store calls forever). In steady state nothing is awaited and nothing is looked at.
"""

from __future__ import annotations

import math

from rxhubs.balancing._planner import Plan
from rxhubs.balancing._timing import BalancingSettings

__all__ = ["LINGER", "SAME_INSTANT", "SETTLE_INTERVALS", "Looks", "imminent_gap", "imminent_window", "look_gap"]

#: While awaiting a handover, the records are listed this many times per interval outside the windows where a
#: release is imminent. More would find a late release sooner but multiply the store calls of a mass join
#: (200 consumers joining at once all await).
_LOOKS_PER_INTERVAL = 8
#: Seconds between looks while a release is imminent (at most; less for intervals under 0.4 s).
_IMMINENT_GAP = 0.02
#: Seconds the owner reads on a partition it hands over while idle, waiting for its next batch (at most): the
#: events that arrive meanwhile are served at once, and it stops right after a batch (``PartitionStream._close``).
LINGER = 0.1
#: Seconds a window of imminent looks lasts, beyond the store's timestamp resolution: the owner's round (three
#: store calls), its linger and its drain (the batches in flight, a checkpoint write, the release) take about
#: 0.2 s.
_IMMINENT_SPAN = 0.25 + LINGER
#: Seconds within which two times are the same instant (virtual clocks count microseconds).
SAME_INSTANT = 1e-6
#: A round that deals partitions to several consumers that joined since the last one waits this part of an interval
#: and lists the presence records again before dealing (:meth:`RoundInputs._plan_settled
#: <rxhubs.balancing._round_inputs.RoundInputs._plan_settled>`); newcomers that see others join with them open their
#: window of imminent looks that much after the owner's expected round (:meth:`Looks.after_round`).
SETTLE_INTERVALS = 1 / 8


def look_gap(interval: float) -> float:
    """Seconds between two looks at the records while a consumer awaits a handover that is not imminent.

    Example:
        >>> look_gap(2.0), look_gap(10.0)
        (0.25, 1.25)
    """
    return interval / _LOOKS_PER_INTERVAL


def imminent_gap(interval: float) -> float:
    """Seconds between two looks while a release is imminent: 20 ms, or one look gap if that is shorter.

    Example:
        >>> imminent_gap(2.0), imminent_gap(10.0), imminent_gap(0.2)
        (0.02, 0.02, 0.02)
    """
    return min(_IMMINENT_GAP, look_gap(interval))


def imminent_window(resolution: float) -> float:
    """Seconds a window of imminent looks lasts, for a store whose timestamps have ``resolution`` seconds.

    A blob's last-modified time is whole seconds, so the owner's round is known to within a second only.

    Example:
        >>> imminent_window(0.0), imminent_window(1.0)
        (0.35, 1.35)
    """
    return resolution + _IMMINENT_SPAN


class Looks:
    """When the next look is due, for one consumer.

    Args:
        settings: The balancing settings (interval and expiration).
        resolution: The store's timestamp resolution in seconds (``CheckpointStore.timestamp_resolution``).

    Example:
        >>> looks = Looks(BalancingSettings(load_balancing_interval=2.0, ownership_expiration=12.0))
        >>> looks.due(0.0) is None  # nothing awaited
        True
    """

    def __init__(self, settings: BalancingSettings, resolution: float = 0.0) -> None:
        self.gap = look_gap(settings.load_balancing_interval)
        self.fast = imminent_gap(settings.load_balancing_interval)
        self.window = imminent_window(resolution)
        self.expiration = settings.ownership_expiration
        #: Looks taken so far (each one ``list_ownership`` call).
        self.count = 0
        self._since: float | None = None
        self._first_expected: float | None = None
        self._windows: list[tuple[float, float]] = []
        self._origin = 0.0
        self._last_expected: float | None = None
        self._next = 0.0
        self._taken_at: float | None = None
        self._not_before = -math.inf  # the last look's answer, plus as long as it took, 2 * lookers - 1 times
        self._lookers = 1  # consumers that may be looking at once: the others of the last round's plan
        self._settle = 0.0  # how much later than the owner's expected round its release is awaited

    def after_round(self, plan: Plan | None, now: float, settle: float = 0.0, watched: float | None = None) -> None:
        """A round that began at ``now`` planned ``plan``: begin, go on or end looking.

        ``watched``: under asyncio owners watch the presence records (:mod:`~rxhubs.balancing._presence_watch`) and
        see this consumer's within that many seconds of its round: the owner's round may come then, long before the
        one expected from its records, so looks begin then too (else they began only at the expected round, and a
        newcomer found the partitions handed to it up to an interval after they were).

        ``settle``: seconds the owner waits before dealing when this consumer joined together with others
        (:data:`SETTLE_INTERVALS` of an interval; 0 otherwise): the window at the owner's expected round opens that
        much later. Opened at the round itself, 199 newcomers looked every 20 ms through all of it while the owner
        settled, 3,200 looks more than without the settle (``rxhubs bench scale``, virtual time, 1 -> 200 at 1,024
        partitions: 40.5 store calls per consumer per interval instead of 18.4, 0.8 intervals instead of 0.55).

        Example:
            >>> looks = Looks(BalancingSettings(load_balancing_interval=8.0, ownership_expiration=48.0))
            >>> looks.after_round(Plan(owner_id="c", owners=("a", "b", "c"), awaiting=4, release_expected=10.0), 5.0,
            ...                   settle=1.0)
            >>> looks.due(5.0)  # the first look: the owner's expected round, and its settle
            11.0
        """
        if plan is not None:
            self._lookers = max(1, len(plan.owners) - 1)
        if plan is None or plan.awaiting <= 0:
            self._since = self._first_expected = None
            self._windows = []
            return
        expected = plan.release_expected
        if self._since is None:
            self._since, self._first_expected = now, expected
        self._windows, self._origin, self._last_expected = [], now, expected
        if self._under_way(plan) or expected is None or expected <= now:
            self._windows.append((now, now + self.window))
        self._settle = settle
        if expected is not None and expected > now:
            self._windows.append((expected + settle, expected + settle + self.window))
            if watched is not None and now + watched + settle < expected:
                self._windows.append((now + watched + settle, now + watched + settle + self.window))
        self._next = self._after(now)

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

    def _after(self, now: float) -> float:
        """The look after one at ``now``: the next step of the imminent grid inside a window, else a look gap's.

        None before the first window (the owner cannot have seen this consumer yet). Both grids begin at this
        consumer's round.
        """
        due = self._step(now, now, self.gap) if any(start <= now for start, _ in self._windows) else math.inf
        for start, end in self._windows:
            step = self._step(now, start, self.fast)
            if step < end:
                due = min(due, step)
        return due

    def _step(self, now: float, start: float, gap: float) -> float:
        """The first point of the grid of ``gap`` from the round's start that is after ``now``, from ``start``.

        Times within a microsecond count as equal: a virtual clock keeps microseconds, so a look due at a grid point
        runs at that point rounded, and the next one must still be a whole step later (not the same point again).
        """
        slack = SAME_INSTANT / gap
        steps = max(math.floor((now - self._origin) / gap + slack) + 1, math.ceil((start - self._origin) / gap - slack))
        return self._origin + steps * gap

    def due(self, now: float) -> float | None:
        """When to look next; None unless awaiting (for at most one expiration per handover)."""
        if self._since is None or now - self._since > self.expiration:
            return None
        return max(self._next, self._not_before)

    def looked(self, plan: Plan, now: float, settle: float = 0.0) -> None:
        """A look at ``now`` planned ``plan``, claiming nothing yet: a window opens if the owner renewed meanwhile.

        An owner that renewed since the last round's plan is balancing now (later than expected: a slow round,
        or renewal times of coarse resolution), so its release is imminent. ``settle``: as for :meth:`after_round`,
        when the look shows others joining with this consumer (consumers that join at the same instant see each
        other only here, often at the first look of the window at the owner's expected round): the windows not yet
        over move that much later, once.
        """
        self._lookers = max(1, len(plan.owners) - 1)  # newcomers seen since the round look too
        if settle > self._settle:
            self._windows = [(start + settle - self._settle, end + settle - self._settle) if end > now
                             else (start, end) for start, end in self._windows]
            self._settle = settle
            self._next = self._after(now)
        expected, last = plan.release_expected, self._last_expected
        if plan.awaiting > 0 and expected is not None and last is not None and expected > last:
            self._last_expected = expected
            self._windows.append((now, now + self.window))
            self._next = self._after(now)

    def taken(self, now: float) -> None:
        """A look begins at ``now``: count it, and schedule the next one."""
        self.count += 1
        self._taken_at = now
        self._next = self._after(now)

    def answered(self, now: float) -> None:
        """A look's listings came back at ``now``: the next one waits ``2 * lookers - 1`` times as long as it took.

        (And half an imminent gap at least.) A look lists every ownership blob (Azurite took 0.3-1 s for 1,024), and
        every consumer awaiting a handover looks: seven newcomers looking as soon as their last look was answered
        kept a single-threaded Azurite busy, and the owner's own round, whose listing and claim the handover waits
        for, took 16 s instead of 1 (``rxhubs bench scale --real``, 1,024 partitions, quiet). The consumers that may
        be looking at once are the others of the last plan (all but this one); each looks for one part in
        ``2 * lookers`` of the time, so all of them together take half of the store's time at most, and the looks
        slow down with the store instead of adding to its queue. One newcomer alone waits as long as its look took,
        as before.

        Example:
            >>> looks = Looks(BalancingSettings(load_balancing_interval=2.0, ownership_expiration=12.0))
            >>> looks.after_round(Plan(owner_id="b", owners=("a", "b"), awaiting=4, release_expected=10.0), 5.0)
            >>> looks.taken(10.0); looks.answered(10.5); looks.due(10.5)
            11.0
            >>> looks.after_round(Plan(owner_id="b", owners=tuple("abcdefgh"), awaiting=4, release_expected=12.0), 11.0)
            >>> looks.taken(12.0); looks.answered(12.5); looks.due(12.5)  # seven may look: 13 * 0.5 s
            19.0
        """
        took = max(0.0, now - self._taken_at) if self._taken_at is not None else 0.0
        self._not_before = now + max(self.fast / 2, (2 * self._lookers - 1) * took)
