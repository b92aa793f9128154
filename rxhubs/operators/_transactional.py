"""Exactly once into a table: the :class:`TransactionalSink` seam that tables implement for ``hops.exactly_once``.

A transactional sink keeps, next to the rows, each partition's *position*: the sequence number of the last event
of that partition in the table. Rows and positions change in one atomic commit, and a commit drops what is at or
below the position it reads, so a batch delivered twice (a crash before the checkpoint, a handover, a paused
former owner waking up) is written once. Reading resumes right after the table's position
(``rxhubs.consume(..., positions=sink)``). The operator that commits through the seam is
``rxhubs/operators/_exactly_once.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from rxhubs._batch import EventBatch
from rxhubs._models import PartitionContext

__all__ = ["CommitResult", "TransactionalSink", "read_position"]


@dataclass(frozen=True, slots=True)
class CommitResult:
    """What one :meth:`TransactionalSink.commit` did, per partition id.

    Attributes:
        positions: The table's position (last sequence number) of each partition after the commit.
        written: Rows written by this commit.
        skipped: Events dropped: already in the table, or the partition was no longer owned.
        version: The table's version after the commit (Delta), if it has one.

    Example:
        >>> CommitResult({"0": 120}, {"0": 20}, {"0": 11}).written["0"]
        20
    """

    positions: Mapping[str, int]
    written: Mapping[str, int]
    skipped: Mapping[str, int]
    version: int | None = None


@runtime_checkable
class TransactionalSink(Protocol):
    """A table that stores each partition's position in the same atomic commit as its rows.

    Implement both methods to plug in your own store; :class:`rxhubs.tables.SqlSink` and
    :class:`rxhubs.tables.InMemoryTable` are two. Positions are sequence numbers (int) per partition, keyed by
    namespace, hub, consumer group and partition id (a :class:`~rxhubs.PartitionContext`). A batch's position
    is :func:`read_position` (its last event as read, even if a pipeline filtered events out).

    Example:
        >>> from rxhubs.tables import InMemoryTable
        >>> isinstance(InMemoryTable(), TransactionalSink)
        True
    """

    async def positions(self, partitions: Sequence[PartitionContext]) -> Mapping[str, int | None]:
        """The sequence number of the last event of each partition in the table (None: nothing yet)."""
        ...

    async def commit(
        self, batches: Sequence[EventBatch], *, owned: Callable[[PartitionContext], bool]
    ) -> CommitResult:
        """One commit of ``batches`` (in order per partition; several partitions may be mixed).

        For each partition the batches carry: drop events at or below the table's position, write the rest and
        set the position to the last event read, all in ONE atomic commit. On a conflict (another writer
        committed the same partition meanwhile) reload, filter again, retry; a partition for which
        ``owned(ctx)`` is False by then is dropped (skipped), never written.
        """
        ...


def read_position(batch: EventBatch) -> int | None:
    """The sequence number a commit of ``batch`` moves its partition's position to (None: no event read).

    That is the last event the batch was *read* with, so a batch whose events a pipeline filtered out still
    moves the position past them.

    Example:
        >>> import datetime as dt
        >>> from rxhubs import Event, EventBatch, PartitionContext
        >>> t = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
        >>> b = EventBatch(PartitionContext("ns", "hub", "$Default", "0"), (Event(b"a", 7, "70", t),))
        >>> read_position(b), read_position(b.with_events([]))
        (7, None)
    """
    origin = batch._origin
    numbers = [e.sequence_number for e in (origin.last if origin is not None else None, batch.last_event) if e]
    return max(numbers) if numbers else None
