"""Reading one sequence-number range on an executor straight into Arrow record batches (the compiled path).

The link is opened as every rxhubs receiver opens it (:func:`~rxhubs.transport._direct.receive_direct`: the SDK
for connection, authentication and attach), and its frames go to a compiled
:class:`~rxhubs.spark._arrow_frames_py.FrameColumns`, which writes each event into the columns' buffers: no
pyamqp ``Message``, no :class:`~rxhubs.Event` and no Python object per field in between. Frames the builder
leaves to the SDK come back as messages and are added as rows in their place, so the order holds.

The rows gathered are handed to Spark as one record batch once the range is complete or :data:`ROWS` rows (or
:data:`BYTES` bytes of bodies) are held; rows outside the range (the link reads ahead, up to its credit) are cut
off, so a range gives the same rows on every run, as :func:`~rxhubs.spark._read.read_range` documents.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import time
from collections.abc import Iterator
from typing import Any

from rxhubs.errors import RxHubsError
from rxhubs.spark._arrow_batch import message_row, record_batch
from rxhubs.spark._connection import close_hub
from rxhubs.spark._ranges import SequenceRange
from rxhubs.spark._read import _CONNECT_GRACE, check_loss
from rxhubs.spark._source_options import _Options
from rxhubs.spark._trace import task_mark
from rxhubs.spark._worker_sessions import worker_sessions
from rxhubs.transport._direct import direct_supported, receive_direct
from rxhubs.transport._errors import translate_error

__all__ = ["BYTES", "ROWS", "Times", "read_frames"]

_log = logging.getLogger("rxhubs.spark.source")

#: Rows per record batch handed to Spark (Spark's own ``arrow.maxRecordsPerBatch`` default).
ROWS = 10_000
#: ... or fewer, once the bodies held pass this many bytes (about 4,000 events of 1 KB). The link stops being read while
#: either is held (its credit then runs out and the service pauses), so a batch holds at most one read chunk more: the
#: loop runs only while the task waits for rows, and a link read on to twice either filled the next batch in the same
#: waits, or this one when the wake-up was late (4.7 MiB batches on a loaded machine). Measured (docs/spark.md, Costs):
#: batches of 32 MiB cost the Python worker 1.5-2 us more per 1 KB event than 4 MiB ones (fresh pages for every batch,
#: caches missed) and the JVM turned a batch into rows only after the worker had read all of it; with 4 MiB the JVM's
#: rows of one batch overlap the worker's read of the next.
BYTES = 4 << 20


class _Sink:
    """The receive loop's :class:`~rxhubs.transport._direct.FrameSink`: the builder, and when to wake the reader."""

    def __init__(self, columns: Any) -> None:
        self.columns = columns
        self.parse = columns.parse
        self.arrived = asyncio.Event()
        self.space = asyncio.Event()

    def add_message(self, message: Any) -> None:
        self.columns.append_row(*message_row(message))
        self.arrived.set()

    def pushed(self, count: int) -> None:
        self.arrived.set()

    def has_room(self) -> bool:
        return bool(self.columns.rows < ROWS and self.columns.size() < BYTES)

    async def room(self) -> None:
        while not self.has_room():
            self.space.clear()
            await self.space.wait()


def read_frames(opts: _Options, partition: SequenceRange, columns: Any) -> Iterator[Any]:
    """Pull the events of ``partition`` into ``columns`` and yield them as Arrow record batches.

    Falls back to the events' path (:func:`~rxhubs.spark._read.read_events`) when the SDK's client does not allow
    the direct receive path. Raises as ``read_range`` does.
    """
    from rxhubs.spark._read import read_events

    times = Times(partition)
    sessions = worker_sessions()
    loop = sessions.loop()  # kept across this worker's tasks, with a session opened ahead for the next one
    key = sessions.key(opts)
    hub = opts.hub(partition_ids=(partition.partition,))  # planned from the hub's partitions: no need to ask
    task: asyncio.Task[None] | None = None
    warm: Any | None = None
    try:
        client = hub._new_consumer_client(opts.consumer_group)
        if not direct_supported(client):
            loop.run_until_complete(client.close())
            yield from read_events(opts, partition)
            return
        sink = _Sink(columns)
        warm = sessions.take(key)
        times.warm = warm is not None
        task = loop.create_task(receive_direct(
            client, opts.consumer_group, partition.partition, partition.start, True,
            prefetch=min(opts.prefetch or 1000, max(1, partition.end - partition.start)), owner_level=None,
            track_last_enqueued_event_properties=False, room=sink.room, deliver=_never, frames=sink, warm=warm,
        ))
        sessions.prepare(key, opts)
        for batch in _batches(loop, task, sink, opts, partition, hub._secrets, times):
            times.rows += batch.num_rows
            handed = time.perf_counter()
            yield batch
            times.spark += time.perf_counter() - handed
    finally:
        closing = time.perf_counter()
        try:
            if task is not None and not task.done():
                task.cancel()
                loop.run_until_complete(asyncio.wait({task}))
            sessions.used(warm)
            loop.run_until_complete(close_hub(hub))
        finally:
            times.done(closing)


class Times:
    """Where one task's time went, logged at DEBUG on ``rxhubs.spark.source`` when it ends (docs/spark.md, Costs).

    ``first``: from the start to the first rows (the connection, authentication and attach, and the service's
    first frames); ``spark``: while Spark held the generator (it consumes each batch before asking for the next);
    the rest of the time until the range is complete is the read itself (socket, frames, Arrow buffers).
    """

    def __init__(self, partition: SequenceRange) -> None:
        self.partition = partition
        self.start, self.cpu = time.perf_counter(), time.process_time()
        self.start_wall = time.time()
        self.first: float | None = None
        self.spark = 0.0
        self.rows = 0
        self.warm = False

    def arrived(self) -> None:
        if self.first is None:
            self.first = time.perf_counter() - self.start

    def done(self, closing: float) -> None:
        now = time.perf_counter()
        total, first = now - self.start, self.first or 0.0
        cpu = time.process_time() - self.cpu
        task_mark(self.partition, self.start_wall, rows=self.rows, s=total, first=first, spark=self.spark,
                  close=now - closing, cpu=cpu, warm=self.warm)
        _log.debug(
            "range %s %d..%d: %d events in %.1f ms: first rows after %.1f ms (connect, attach), read %.1f ms, "
            "Spark between batches %.1f ms, close %.1f ms; this worker's CPU %.2f us/event; session opened ahead: %s",
            self.partition.partition, self.partition.start, self.partition.end - 1, self.rows, total * 1e3,
            first * 1e3, (closing - self.start - first - self.spark) * 1e3, self.spark * 1e3, (now - closing) * 1e3,
            cpu / max(1, self.rows) * 1e6, self.warm,
        )


def _never(messages: list[Any]) -> None:  # the sink keeps the events: the loop hands nothing over
    raise AssertionError("unreachable")


def _batches(
    loop: asyncio.AbstractEventLoop, task: asyncio.Task[None], sink: _Sink, opts: _Options, partition: SequenceRange,
    secrets: tuple[str, ...], times: Times,
) -> Iterator[Any]:
    columns = sink.columns
    position = partition.start
    wait = opts.receive_timeout + _CONNECT_GRACE
    what = f"receive from {opts.eventhub_name}/{opts.consumer_group}/{partition.partition}"
    while position < partition.end:
        want = min(ROWS, partition.end - position)
        if columns.rows < want and columns.size() < BYTES:
            arrived = loop.run_until_complete(_arrival(task, sink, wait))
            if task.done():
                _raise(task, opts, what, secrets)
            if arrived:
                times.arrived()
                wait = opts.receive_timeout
                continue
            if not columns.rows:
                raise RxHubsError(
                    f"partition {partition.partition!r} of {opts.eventhub_name!r}: no event for {wait:g} s at "
                    f"sequence number {position} (range {partition.start}..{partition.end - 1}); raise "
                    "receiveTimeout if the hub is slow"
                )  # (rows held when the wait ran out go first: the error then names where the hub stopped)
        batch = record_batch(columns.take(), partition.partition, opts.consumer_group, opts.eventhub_name)
        sink.space.set()
        if position == partition.start and batch.num_rows:
            check_loss(opts, partition, batch.column(3)[0].as_py())
        batch, position = _within(batch, position, partition.end)
        if batch.num_rows:
            yield batch


async def _arrival(task: asyncio.Task[None], sink: _Sink, wait: float) -> bool:
    """Wait for rows (True), the receive's end (True) or ``wait`` seconds without either (False)."""
    if sink.arrived.is_set() or task.done():
        sink.arrived.clear()
        return True
    arrived = asyncio.ensure_future(sink.arrived.wait())
    try:
        done, _ = await asyncio.wait({arrived, task}, timeout=wait, return_when=asyncio.FIRST_COMPLETED)
    finally:
        arrived.cancel()
    sink.arrived.clear()
    return bool(done)


def _raise(task: asyncio.Task[None], opts: _Options, what: str, secrets: tuple[str, ...]) -> None:
    error = task.exception() if not task.cancelled() else None
    if error is None:
        raise RxHubsError(f"{what}: the receive ended")
    opts.check_secret(error)
    if isinstance(error, RxHubsError):
        raise error
    raise translate_error(error, what, secrets) from error


def _within(batch: Any, position: int, end: int) -> tuple[Any, int]:
    """``batch``'s rows with ``position <= sequenceNumber < end``, and the next position to read.

    Sequence numbers increase along a partition; rows below ``position`` are a replay, rows from ``end`` on
    belong to the next range. The column is read in place (int64, no nulls): pyarrow's ``to_numpy`` would import
    pandas, about 0.5 s of a new Python worker's first task (1-2 s on a loaded machine).
    """
    numbers = batch.column(3)
    rows = len(numbers)
    if not rows:
        return batch, position
    values = memoryview(numbers.buffers()[1]).cast("q")[numbers.offset:numbers.offset + rows]
    following = max(position, values[-1] + 1)
    if values[0] >= position and values[-1] < end:
        return batch, following
    low, high = bisect.bisect_left(values, position), bisect.bisect_left(values, end)
    return batch.slice(low, high - low), following
