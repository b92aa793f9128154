"""What one commit writes: per partition, the events above the table's position, and the new position.

Every transactional sink does the same filtering inside its transaction, against the positions it read there:
events at or below a partition's position are dropped (a batch 90..120 against a position of 100 writes
101..120), a partition no longer owned is dropped whole, and the new position is the last event read
(:func:`rxhubs.operators.read_position`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from rxhubs._batch import EventBatch
from rxhubs._models import Event, PartitionContext
from rxhubs.operators import CommitResult, read_position

__all__ = ["Key", "PartitionWrite", "key_of", "plan", "result_of"]

#: A partition's position key: namespace, hub, consumer group (lower case, as stores compare them), partition id.
Key = tuple[str, str, str, str]


def key_of(context: PartitionContext) -> Key:
    """The position key of a partition.

    Example:
        >>> key_of(PartitionContext("NS", "Hub", "$Default", "0"))
        ('ns', 'hub', '$default', '0')
    """
    return (context.fully_qualified_namespace.lower(), context.eventhub_name.lower(),
            context.consumer_group.lower(), context.partition_id)


@dataclass(eq=False, slots=True)
class PartitionWrite:
    """One partition's part of a commit."""

    context: PartitionContext
    before: int | None
    after: int | None = None
    events: list[tuple[EventBatch, Event]] = field(default_factory=list)
    skipped: int = 0
    owned: bool = True

    @property
    def moves(self) -> bool:
        """Whether the commit changes this partition's position."""
        return self.owned and self.after is not None and (self.before is None or self.after > self.before)


def contexts_of(batches: Sequence[EventBatch]) -> list[PartitionContext]:
    """The partitions ``batches`` carry, in order of first appearance."""
    return list(dict.fromkeys(b.context for b in batches))


def plan(
    batches: Sequence[EventBatch],
    positions: Mapping[PartitionContext, int | None],
    owned: Callable[[PartitionContext], bool],
) -> list[PartitionWrite]:
    """Per partition of ``batches``: the events to write and the new position, against ``positions``.

    Example:
        >>> import datetime as dt
        >>> from rxhubs import Event, EventBatch
        >>> t, ctx = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc), PartitionContext("ns", "hub", "$Default", "0")
        >>> b = EventBatch(ctx, tuple(Event(b"x", n, str(n), t) for n in range(90, 121)))
        >>> [w] = plan([b], {ctx: 100}, lambda _: True)
        >>> w.events[0][1].sequence_number, len(w.events), w.skipped, w.after
        (101, 20, 11, 120)
    """
    writes: dict[PartitionContext, PartitionWrite] = {}
    for batch in batches:
        context = batch.context
        write = writes.get(context)
        if write is None:
            write = writes[context] = PartitionWrite(context, positions.get(context), owned=owned(context))
        if not write.owned:
            write.skipped += len(batch.events)
            continue
        floor = write.before if write.after is None else max(write.after, write.before or -1)
        for event in batch.events:
            if floor is not None and event.sequence_number <= floor:
                write.skipped += 1
            else:
                write.events.append((batch, event))
                floor = event.sequence_number
        last = read_position(batch)
        if last is not None and (write.after is None or last > write.after):
            write.after = last
    return list(writes.values())


def result_of(writes: Sequence[PartitionWrite], version: int | None = None) -> CommitResult:
    """The :class:`~rxhubs.operators.CommitResult` of a commit that applied ``writes``."""
    positions: dict[str, int] = {}
    for w in writes:
        position = w.after if w.moves else w.before
        if position is not None:
            positions[w.context.partition_id] = position
    return CommitResult(
        positions,
        {w.context.partition_id: len(w.events) for w in writes},
        {w.context.partition_id: w.skipped for w in writes},
        version,
    )
