"""What one commit writes: per partition, the events above the table's position, and the new position.

Every transactional sink does the same filtering inside its transaction, against the positions it read there:
events at or below a partition's position are dropped (a batch 90..120 against a position of 100 writes
101..120), a partition no longer owned is dropped whole, and the new position is the last event read
(:func:`rxhubs.operators.read_position`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
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
    """One partition's part of a commit.

    ``batches`` holds the kept events, batch by batch: a batch kept whole is the batch itself, one kept in part is
    a copy with the kept events (:meth:`~rxhubs.EventBatch.with_events`). No object is made per event.
    """

    context: PartitionContext
    before: int | None
    after: int | None = None
    batches: list[EventBatch] = field(default_factory=list)
    written: int = 0
    skipped: int = 0
    owned: bool = True

    @property
    def moves(self) -> bool:
        """Whether the commit changes this partition's position."""
        return self.owned and self.after is not None and (self.before is None or self.after > self.before)

    @property
    def events(self) -> Iterator[tuple[EventBatch, Event]]:
        """The kept events, in order, each with its batch (for sinks that write row by row)."""
        return ((batch, event) for batch in self.batches for event in batch.events)


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
        >>> w.batches[0].events[0].sequence_number, w.written, w.skipped, w.after
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
        events = batch.events
        kept: list[Event] | None = None  # None while every event so far is kept
        for index, event in enumerate(events):
            number = event.sequence_number
            if floor is not None and number <= floor:
                if kept is None:
                    kept = list(events[:index])
            else:
                if kept is not None:
                    kept.append(event)
                floor = number
        if kept is None:
            if events:
                write.batches.append(batch)
                write.written += len(events)
        else:
            write.skipped += len(events) - len(kept)
            if kept:
                write.batches.append(batch.with_events(kept))
                write.written += len(kept)
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
        {w.context.partition_id: w.written for w in writes},
        {w.context.partition_id: w.skipped for w in writes},
        version,
    )
