"""Reading one sequence-number range on an executor, shared by the streaming and the batch reader.

A range gives the same rows on every run. Events that retention removed before they were read (the range
starts below the partition's first retained event) fail the task with ``failOnDataLoss`` (the default), or
are skipped with a WARNING when it is false.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from typing import Any

from rxhubs.errors import RxHubsError
from rxhubs.spark._connection import close_hub, close_loop
from rxhubs.spark._ranges import SequenceRange
from rxhubs.spark._source_options import _Options

__all__ = ["DataLossError", "check_loss", "read_events", "read_range"]

_log = logging.getLogger("rxhubs.spark.source")

#: Events asked of a receiver per pull; rows gathered into one Arrow record batch handed to Spark.
_PULL = 10_000
_ROWS = 10_000
#: ... or fewer, once their bodies pass this many bytes: the bound of the frames path (``_arrow_read.BYTES``).
_BYTES = 4 << 20
#: Seconds a task's first pull may take on top of ``receiveTimeout``: it opens the connection and the link.
_CONNECT_GRACE = 30.0


class DataLossError(RxHubsError):
    """Events of a range were removed by retention before the query read them (``failOnDataLoss=true``).

    Example:
        >>> raise DataLossError("lost")
        Traceback (most recent call last):
        rxhubs.spark._read.DataLossError: lost
    """


def check_loss(opts: _Options, partition: SequenceRange, first: int) -> None:
    """Fail (``failOnDataLoss``) or warn when the first event received, ``first``, is past the range's start.

    Example:
        >>> opts = _Options({"connectionString": "Endpoint=sb://ns/;SharedAccessKeyName=k;SharedAccessKey=s;"
        ...                  "EntityPath=h", "failOnDataLoss": "false"})
        >>> check_loss(opts, SequenceRange("0", 10, 20), 10)  # nothing lost
    """
    if first <= partition.start:
        return
    what = (f"events {partition.start}..{min(first, partition.end) - 1} of partition {partition.partition!r} of "
            f"{opts.eventhub_name!r} were removed by retention before this query read them")
    if opts.fail_on_data_loss:
        raise DataLossError(f"{what}; set failOnDataLoss=false to skip them with a warning")
    _log.warning("%s; skipped (failOnDataLoss=false)", what)


def read_range(opts: _Options, partition: SequenceRange) -> Iterator[Any]:
    """Pull the events of ``partition`` and yield them as Arrow record batches (see the streaming reader).

    With the compiled Arrow builder, straight from the frames (:mod:`rxhubs.spark._arrow_read`); without it (no
    compiler at install, or ``RXHUBS_NO_EXTENSIONS=1``: said once in the log), as events (:func:`read_events`).
    With ``capturePath`` as events too: the range before retention comes from Capture files, not from frames. In
    Spark's reused workers the worker's long-lived objects are frozen for the task (:mod:`rxhubs.spark._worker_gc`).
    """
    from rxhubs.spark._arrow_batch import frame_columns
    from rxhubs.spark._worker_gc import freezing

    columns = frame_columns()
    if columns is None or opts.capture_path is not None:
        return freezing(read_events(opts, partition))
    from rxhubs.spark._arrow_read import read_frames

    return freezing(read_frames(opts, partition, columns))


def read_events(opts: _Options, partition: SequenceRange) -> Iterator[Any]:
    """The events of ``partition`` through a receiver, converted by :func:`~rxhubs.spark.to_arrow`."""
    from rxhubs._batch import EventBatch
    from rxhubs._models import PartitionContext, Position
    from rxhubs.spark._arrow import to_arrow

    loop = asyncio.new_event_loop()
    hub = opts.hub(partition_ids=(partition.partition,))  # planned from the hub's partitions: no need to ask
    context = PartitionContext(opts.namespace, opts.eventhub_name, opts.consumer_group, partition.partition)
    receiver = hub.receiver(
        partition.partition,
        opts.consumer_group,
        start=Position.from_sequence_number(partition.start, inclusive=True),
        prefetch=min(opts.prefetch or 1000, max(1, partition.end - partition.start)),
    )
    pending: list[Any] = []
    held = 0  # bytes of the bodies pending

    def cut() -> list[Any]:
        """The pending rows as record batches, and none pending."""
        nonlocal pending, held
        batches: list[Any] = to_arrow(EventBatch(context, tuple(pending))).to_batches()
        pending, held = [], 0
        return batches

    try:
        position = partition.start
        wait = opts.receive_timeout + _CONNECT_GRACE
        while position < partition.end:
            want = min(_PULL, partition.end - position)
            try:
                events = loop.run_until_complete(receiver.receive_batch(want, max_wait=wait))
            except Exception as exc:
                opts.check_secret(exc)
                raise
            if not events:
                if pending:  # the rows read so far go first, as the frames path hands them (the error names where
                    yield from cut()  # the hub stopped)
                raise RxHubsError(
                    f"partition {partition.partition!r} of {opts.eventhub_name!r}: no event for "
                    f"{wait:g} s at sequence number {position} (range {partition.start}.."
                    f"{partition.end - 1}); raise receiveTimeout if the hub is slow"
                )
            if position == partition.start:
                check_loss(opts, partition, events[0].sequence_number)
            wait = opts.receive_timeout
            kept = [e for e in events if position <= e.sequence_number < partition.end]
            position = max(position, events[-1].sequence_number + 1)
            for event in kept:
                pending.append(event)
                held += len(event.body)
                if len(pending) >= _ROWS or held >= _BYTES:
                    yield from cut()
            if pending and position >= partition.end:
                yield from cut()
    finally:
        try:
            loop.run_until_complete(close_hub(hub))  # closes the receiver too
        finally:
            close_loop(loop)
