"""Resume from a table: a checkpoint store whose checkpoints are the table's positions where it has them.

``rxhubs.partitions(..., positions=sink)`` wraps its store with :func:`with_table_positions`. The balancing loop
reads where to start through ``fence`` (a fenced store) or ``list_checkpoints``; the wrapper answers with the
table's position (the sequence number of the partition's last event in the table) whenever the table has one,
and with the store's own checkpoint otherwise. Ownership, fencing and checkpoint writes go to the store
unchanged: a fenced store stays fenced, an unfenced one stays unfenced.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol, runtime_checkable

from rxhubs._models import Checkpoint, Ownership, PartitionContext
from rxhubs.errors import ConfigurationError
from rxhubs.stores import CheckpointStore, FencedCheckpointStore, is_fenced

__all__ = ["TablePositions", "with_table_positions"]


@runtime_checkable
class TablePositions(Protocol):
    """What ``positions=`` takes: the ``positions`` half of ``rxhubs.operators.TransactionalSink``."""

    async def positions(self, partitions: Sequence[PartitionContext]) -> Mapping[str, int | None]:
        """The sequence number of the last event of each partition in the table (None: nothing yet)."""
        ...


def _override(context: PartitionContext, checkpoint: Checkpoint | None, position: int | None) -> Checkpoint | None:
    """The table's position as a checkpoint (it wins over the store's), or the store's checkpoint."""
    if position is None:
        return checkpoint
    if checkpoint is not None and checkpoint.sequence_number == position:
        return checkpoint  # keeps its offset
    ns, hub, group, pid = (context.fully_qualified_namespace, context.eventhub_name, context.consumer_group,
                           context.partition_id)
    return Checkpoint(ns, hub, group, pid, None, position)


class TablePositionStore(CheckpointStore):
    """A checkpoint store that reports a table's positions as the checkpoints (see the module docstring).

    Example:
        >>> import asyncio
        >>> from rxhubs import Checkpoint
        >>> from rxhubs.stores import InMemoryCheckpointStore
        >>> class Table:
        ...     async def positions(self, partitions):
        ...         return {p.partition_id: 100 for p in partitions}
        >>> store = InMemoryCheckpointStore()
        >>> _ = asyncio.run(store.update_checkpoint(Checkpoint("ns", "hub", "$Default", "0", "40", 4)))
        >>> [c.sequence_number for c in asyncio.run(
        ...     with_table_positions(store, Table()).list_checkpoints("ns", "hub", "$Default"))]
        [100]
    """

    def __init__(self, store: CheckpointStore, table: TablePositions) -> None:
        self.store = store
        self.table = table

    async def list_ownership(
        self, fully_qualified_namespace: str, eventhub_name: str, consumer_group: str
    ) -> list[Ownership]:
        return await self.store.list_ownership(fully_qualified_namespace, eventhub_name, consumer_group)

    async def claim_ownership(self, ownerships: Iterable[Ownership]) -> list[Ownership]:
        return await self.store.claim_ownership(ownerships)

    async def update_checkpoint(self, checkpoint: Checkpoint) -> None:
        await self.store.update_checkpoint(checkpoint)

    async def list_checkpoints(
        self, fully_qualified_namespace: str, eventhub_name: str, consumer_group: str
    ) -> list[Checkpoint]:
        """The store's checkpoints, each replaced by the table's position where the table has one.

        Partitions the table knows come from the store's checkpoints and ownership records (a partition gained
        has an ownership record, even before its first checkpoint).
        """
        ns, hub, group = fully_qualified_namespace, eventhub_name, consumer_group
        stored = {c.partition_id: c for c in await self.store.list_checkpoints(ns, hub, group)}
        ids = set(stored) | {o.partition_id for o in await self.store.list_ownership(ns, hub, group)}
        contexts = [PartitionContext(ns, hub, group, pid) for pid in sorted(ids)]
        positions = await self.table.positions(contexts) if contexts else {}
        found = (_override(c, stored.get(c.partition_id), positions.get(c.partition_id)) for c in contexts)
        return [c for c in found if c is not None]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.store!r}, {type(self.table).__name__})"


class FencedTablePositionStore(TablePositionStore, FencedCheckpointStore):
    """:class:`TablePositionStore` over a fenced store: ``fence`` reports the table's position."""

    store: FencedCheckpointStore

    async def fence(self, ownership: Ownership) -> Checkpoint | None:
        checkpoint = await self.store.fence(ownership)
        context = PartitionContext(
            ownership.fully_qualified_namespace, ownership.eventhub_name, ownership.consumer_group,
            ownership.partition_id,
        )
        positions = await self.table.positions([context])
        return _override(context, checkpoint, positions.get(context.partition_id))

    async def update_checkpoint_fenced(self, checkpoint: Checkpoint, ownership: Ownership) -> None:
        await self.store.update_checkpoint_fenced(checkpoint, ownership)


def with_table_positions(store: CheckpointStore, table: TablePositions) -> CheckpointStore:
    """``store``, reporting ``table``'s positions as checkpoints; fenced if and only if ``store`` is.

    Raises:
        ConfigurationError: ``table`` has no async ``positions(partitions)``.
    """
    if not isinstance(table, TablePositions):
        raise ConfigurationError(
            f"positions must be a table with async positions(partitions) (a TransactionalSink), got"
            f" {type(table).__name__}"
        )
    if is_fenced(store):
        return FencedTablePositionStore(store, table)
    return TablePositionStore(store, table)
