"""What one Delta commit writes: per partition, the events after the table's position, while still owned.

Pure logic (no I/O), so the rules read in one place: a partition's key is its app id (:func:`app_id`); its
events at or below the table's position are dropped (a batch 90..120 against a position of 100 writes 101..120);
its new position is the last event its batches were *read* with (:func:`~rxhubs.operators.read_position`), so
events a pipeline filtered out still move it; a partition no longer owned is dropped whole.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from rxhubs._batch import EventBatch
from rxhubs._models import PartitionContext
from rxhubs.operators._transactional import read_position

__all__ = ["Plan", "app_id", "plan"]

#: The first part of every app id rxhubs writes into a Delta table's log.
APP_ID_PREFIX = "rxhubs"


def app_id(context: PartitionContext) -> str:
    """The Delta app id (``txn.appId``) that holds one partition's position in the table.

    ``rxhubs/{namespace}/{hub}/{consumer group}/{partition}``, names in lower case (Event Hubs names are
    case-insensitive, and the checkpoint stores key them the same way).

    Example:
        >>> app_id(PartitionContext("NS.servicebus.windows.net", "Telemetry", "$Default", "3"))
        'rxhubs/ns.servicebus.windows.net/telemetry/$default/3'
    """
    parts = (context.fully_qualified_namespace, context.eventhub_name, context.consumer_group)
    return "/".join((APP_ID_PREFIX, *(p.lower() for p in parts), context.partition_id))


@dataclass(slots=True)
class Plan:
    """One attempt's decision, for the partitions of a commit (all keyed by app id).

    Attributes:
        batches: The batches to write, their events filtered (only batches with events left).
        moves: App id -> the new position, for each partition whose position advances.
        contexts: App id -> the partition.
        written: App id -> events to write.
        skipped: App id -> events dropped (at or below the position, or the partition is no longer owned).
    """

    batches: list[EventBatch] = field(default_factory=list)
    moves: dict[str, int] = field(default_factory=dict)
    contexts: dict[str, PartitionContext] = field(default_factory=dict)
    written: dict[str, int] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)


def group(batches: Iterable[EventBatch]) -> dict[str, list[EventBatch]]:
    """The batches by app id, in order within each."""
    groups: dict[str, list[EventBatch]] = {}
    for batch in batches:
        groups.setdefault(app_id(batch.context), []).append(batch)
    return groups


def plan(
    groups: Mapping[str, Sequence[EventBatch]],
    positions: Mapping[str, int | None],
    owned: Callable[[PartitionContext], bool],
) -> Plan:
    """Filter ``groups`` against the table's ``positions`` (by app id) and the current ownership.

    Batches of one partition may overlap or repeat (a re-delivery): each event is kept only if it is after
    everything before it, the table's position included.

    Example:
        >>> import datetime as dt
        >>> from rxhubs import Event
        >>> t = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
        >>> ctx = PartitionContext("ns", "hub", "$Default", "0")
        >>> batch = EventBatch(ctx, tuple(Event(b"", n, str(n), t) for n in range(98, 103)))
        >>> p = plan(group([batch]), {app_id(ctx): 100}, lambda ctx: True)
        >>> [e.sequence_number for e in p.batches[0]], p.moves, p.skipped
        ([101, 102], {'rxhubs/ns/hub/$default/0': 102}, {'rxhubs/ns/hub/$default/0': 3})
    """
    result = Plan()
    for key, batches in groups.items():
        context = batches[0].context
        result.contexts[key] = context
        total = sum(len(b.events) for b in batches)
        if not owned(context):
            result.written[key], result.skipped[key] = 0, total
            continue
        start = positions.get(key)
        high = start
        kept_total = 0
        for batch in batches:
            kept = [e for e in batch.events if high is None or e.sequence_number > high]
            if kept:
                high = kept[-1].sequence_number
                kept_total += len(kept)
                result.batches.append(batch if len(kept) == len(batch.events) else batch.with_events(kept))
            read = read_position(batch)
            if read is not None and (high is None or read > high):
                high = read  # events read and filtered out by the pipeline: the position passes them too
        result.written[key], result.skipped[key] = kept_total, total - kept_total
        if high is not None and (start is None or high > start):
            result.moves[key] = high
    return result
