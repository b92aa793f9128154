"""Where a position lands in a partition: the one translation of offsets and enqueued times to sequence numbers.

Event Hubs has no "offset for a time" call (Kafka's ``offsetsForTimes``): the first event at or after an enqueued
time (or an offset) is found by reading it, with a receiver that starts there. The Spark source's starting
positions (:mod:`rxhubs.spark`) and ``rxhubs checkpoints reset --to-datetime`` both use :func:`sequence_at`.
"""

from __future__ import annotations

import datetime as _dt
from typing import Any

from rxhubs._models import Checkpoint, Event, PartitionContext, PartitionProperties, Position
from rxhubs.errors import NotFoundError

__all__ = ["checkpoint_before", "first_sequence_number", "next_sequence_number", "read_one", "sequence_at"]

#: How long :func:`sequence_at` waits for the one event it reads, at most.
SEEK_WAIT = 10.0


def first_sequence_number(props: PartitionProperties) -> int:
    """The first sequence number still retained (the next one to be enqueued when the partition is empty).

    Example:
        >>> first_sequence_number(PartitionProperties("hub", "0", 5, 9, "900", None, False))
        5
    """
    return props.last_enqueued_sequence_number + 1 if props.is_empty else props.beginning_sequence_number


def next_sequence_number(props: PartitionProperties) -> int:
    """The sequence number the next enqueued event will get.

    Example:
        >>> next_sequence_number(PartitionProperties("hub", "0", 5, 9, "900", None, False))
        10
    """
    return props.last_enqueued_sequence_number + 1


async def read_one(
    hub: Any, partition_id: str, consumer_group: str, position: Position, max_wait: float = SEEK_WAIT
) -> Event | None:
    """The first event at ``position`` (None if none arrives within ``max_wait`` seconds), read by a receiver."""
    receiver = hub.receiver(partition_id, consumer_group, start=position, prefetch=1)
    async with receiver:
        events = await receiver.receive_batch(1, max_wait=max_wait)
    return events[0] if events else None


async def sequence_at(
    hub: Any,
    partition_id: str,
    consumer_group: str,
    position: Position,
    props: PartitionProperties,
    max_wait: float = SEEK_WAIT,
) -> int:
    """The sequence number of the first event at ``position`` (an offset or enqueued time), else the end.

    Read with a receiver, as the Scala connector does; a position past the last event (known from the
    partition's properties, or no event within ``max_wait``) means the partition's end
    (:func:`next_sequence_number`).

    Example:
        >>> import asyncio, datetime as dt
        >>> from rxhubs.testing import InMemoryEventHub
        >>> hub = InMemoryEventHub(partition_count=1)
        >>> _ = hub.send([b"a", b"b"], partition_id="0")
        >>> props = hub.partition_properties("0")
        >>> asyncio.run(sequence_at(hub, "0", "$Default", Position.from_sequence_number(0), props))
        1
        >>> later = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
        >>> asyncio.run(sequence_at(hub, "0", "$Default", Position.from_enqueued_time(later), props))
        2
    """
    if props.is_empty:
        return next_sequence_number(props)
    last_time = props.last_enqueued_time_utc
    if isinstance(position.value, _dt.datetime) and last_time is not None:
        when, last = position.value, last_time if last_time.tzinfo else last_time.replace(tzinfo=_dt.UTC)
        if when > last or (when == last and not position.inclusive):
            return next_sequence_number(props)
    # numbers compare on a Standard namespace; a geo-replicated namespace's offsets are opaque: read to know
    if position.kind == "offset" and props.last_enqueued_offset.isdigit() and str(position.value).isdigit():
        offset, last_offset = int(str(position.value)), int(props.last_enqueued_offset)
        if offset > last_offset or (offset == last_offset and not position.inclusive):
            return next_sequence_number(props)
    event = await read_one(hub, partition_id, consumer_group, position, max_wait)
    return event.sequence_number if event is not None else next_sequence_number(props)


async def checkpoint_before(
    hub: Any, context: PartitionContext, resume: int, props: PartitionProperties
) -> Checkpoint:
    """The checkpoint that makes every reader resume at sequence number ``resume``: event ``resume - 1``.

    Its offset is the event's own (the official processor resumes from the offset), read from the partition
    when it is not the last one. Resuming at the first retained event (or before) gives ``(first - 1, "-1")``:
    offset -1 is the start of the stream for the official processor; KEDA then counts the whole backlog.

    Raises:
        NotFoundError: The event before ``resume`` could not be read.

    Example:
        >>> import asyncio
        >>> from rxhubs.testing import InMemoryEventHub
        >>> hub = InMemoryEventHub(partition_count=1)
        >>> _ = hub.send([b"a", b"b", b"c"], partition_id="0")
        >>> where = PartitionContext(hub.fully_qualified_namespace, "telemetry", "$Default", "0")
        >>> cp = asyncio.run(checkpoint_before(hub, where, 0, hub.partition_properties("0")))
        >>> cp.sequence_number, cp.offset
        (-1, '-1')
    """
    c = context
    key = (c.fully_qualified_namespace, c.eventhub_name, c.consumer_group, c.partition_id)
    if resume <= first_sequence_number(props):
        return Checkpoint(*key, "-1", first_sequence_number(props) - 1)
    if resume >= next_sequence_number(props):
        return Checkpoint(*key, props.last_enqueued_offset, props.last_enqueued_sequence_number)
    before = Position.from_sequence_number(resume - 1, inclusive=True)
    event = await read_one(hub, c.partition_id, c.consumer_group, before)
    if event is None or event.sequence_number != resume - 1:
        raise NotFoundError(f"partition {c.partition_id}: event {resume - 1} could not be read to find its offset")
    return Checkpoint(*key, event.offset, resume - 1)
