"""Batches users shape: hold a partition's events until ``min_batch_size`` arrived or ``max_wait`` passed.

At low traffic a partition hands the pipeline a batch per event or two, and each batch costs a write, an
HTTP call or a Spark job downstream. With ``min_batch_size=N`` the partition source keeps what it read in a
:class:`Shaper` and emits one batch once it holds ``N`` events, or once ``max_wait`` seconds have passed since
the first of them arrived, whichever comes first (the Azure Functions extension's ``MinEventBatchSize`` and
``MaxWaitTime``). It is one batch with one lease and one origin, so backpressure, the order of a partition and
the checkpoint operator's contiguous prefix work on it as on any other.

The rule, in virtual time (``N=3``, ``max_wait=4``; one character is one second)::

    partition:  -a-b-c---d------e-f-g-h---
    batches:    -----x-------y------z-----     x = abc (three events)   y = d (4 s after d)
                                               z = efg (three events; h waits for the next batch)

Held events are not the pipeline's yet: a partition that closes (handed over, lost, a graceful stop) with a
partial batch drops it without delivering it. Nothing of it was processed or checkpointed, so whoever reads
the partition next (the new owner, this consumer after a restart) reads those events from the checkpoint:
nothing is lost, nothing is processed twice. After a retried receive error the source reopens after the last
event it emitted, so the held events are dropped and read again the same way.
"""

from __future__ import annotations

from rxhubs._models import Event

__all__ = ["Shaper"]

#: Slack for float arithmetic on clocks (virtual time goes through datetimes, at microsecond resolution).
_EPSILON = 1e-6


class Shaper:
    """The events of one partition held until their batch is due.

    Example:
        >>> import datetime as dt, rxhubs
        >>> t = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
        >>> def events(*seqs):
        ...     return [rxhubs.Event(b"x", s, str(s), t) for s in seqs]
        >>> shaper = Shaper(min_size=3, max_size=10, max_wait=5.0)
        >>> shaper.offer(events(0, 1), now=100.0)      # two of three: held
        []
        >>> shaper.wait(now=102.0, idle_wait=1.0)      # 5 s after the first event, 3 s from now
        3.0
        >>> [e.sequence_number for e in shaper.offer(events(2), now=102.5)]
        [0, 1, 2]
        >>> shaper.offer(events(3), now=103.0), shaper.offer([], now=108.0)[0].sequence_number
        ([], 3)
    """

    __slots__ = ("max_size", "max_wait", "min_size", "pending", "since")

    def __init__(self, *, min_size: int, max_size: int, max_wait: float) -> None:
        self.min_size = min_size
        self.max_size = max_size
        self.max_wait = max_wait
        self.pending: list[Event] = []
        self.since = 0.0  # when the first held event arrived

    @property
    def room(self) -> int:
        """How many more events the batch being filled takes (at least 1 while it is not due)."""
        return max(1, self.max_size - len(self.pending))

    def due(self, now: float) -> bool:
        """True when the held events make a batch: enough of them, or held long enough."""
        pending = self.pending
        if not pending:
            return False
        return len(pending) >= self.min_size or now >= self.since + self.max_wait - _EPSILON

    def offer(self, events: list[Event], now: float) -> list[Event]:
        """Hold ``events`` (read at ``now``); return the batch if it is due, else ``[]``."""
        if events:
            if not self.pending:
                self.since = now
            self.pending.extend(events)
        if not self.due(now):
            return []
        batch, self.pending = self.pending, []
        return batch

    def wait(self, now: float, idle_wait: float) -> float:
        """Seconds the next pull may wait: until the held batch is due, or ``idle_wait`` with nothing held."""
        if not self.pending:
            return idle_wait
        return max(0.0, self.since + self.max_wait - now)

    def clear(self) -> int:
        """Drop the held events (they are read again from the last one emitted); return how many."""
        dropped = len(self.pending)
        self.pending = []
        return dropped
