"""An in-memory transactional table, for tests (yours and rxhubs')."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rxhubs._batch import EventBatch
from rxhubs._models import PartitionContext
from rxhubs.operators import CommitResult
from rxhubs.tables._plan import Key, contexts_of, key_of, plan, result_of
from rxhubs.tables._rows import row

__all__ = ["InMemoryTable"]


class InMemoryTable:
    """A :class:`~rxhubs.operators.TransactionalSink` held in memory: rows and positions, committed atomically.

    It awaits nothing, so it also runs in virtual time (marble tests). Each commit applies every partition's
    rows and position at once, or nothing.

    Attributes:
        rows: Every row written, in commit order (the columns of ``rxhubs.tables.COLUMNS``).
        commits: Commits that changed something.

    Example:
        >>> import asyncio, datetime as dt
        >>> from rxhubs import Event, EventBatch, PartitionContext
        >>> ctx, t = PartitionContext("ns", "hub", "$Default", "0"), dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
        >>> table = InMemoryTable()
        >>> def batch(first, last):
        ...     return EventBatch(ctx, tuple(Event(b"x", n, str(n), t) for n in range(first, last + 1)))
        >>> _ = asyncio.run(table.commit([batch(0, 100)], owned=lambda _: True))
        >>> asyncio.run(table.commit([batch(90, 120)], owned=lambda _: True)).written
        {'0': 20}
        >>> len(table.rows), table.position(ctx)
        (121, 120)
    """

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        self.commits = 0
        self._positions: dict[Key, int] = {}

    def position(self, context: PartitionContext) -> int | None:
        """The sequence number of the partition's last event in the table (None: nothing yet)."""
        return self._positions.get(key_of(context))

    async def positions(self, partitions: Sequence[PartitionContext]) -> Mapping[str, int | None]:
        """The position of each partition, by partition id."""
        return {p.partition_id: self.position(p) for p in partitions}

    async def commit(
        self, batches: Sequence[EventBatch], *, owned: Callable[[PartitionContext], bool]
    ) -> CommitResult:
        """Write what is above each partition's position and move the positions, in one step."""
        writes = plan(batches, {c: self.position(c) for c in contexts_of(batches)}, owned)
        changed = [w for w in writes if w.moves]
        for write in changed:
            self.rows.extend(row(batch, event) for batch, event in write.events)
            assert write.after is not None
            self._positions[key_of(write.context)] = write.after
        self.commits += bool(changed)
        return result_of(writes)

    def __repr__(self) -> str:
        return f"InMemoryTable(rows={len(self.rows)}, partitions={len(self._positions)})"
