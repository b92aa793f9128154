"""A Spark Structured Streaming source for Event Hubs on Spark's Python Data Source API (Spark >= 4.2).

Spark drives: the driver plans micro-batches as ranges of sequence numbers per partition and keeps them in
its checkpoint location (offsets log, then commits log); executors pull exactly those ranges with a
:class:`~rxhubs.transport.PartitionReceiver`. A range read twice gives the same rows, so a query replayed
after a crash writes the same data again, and file sinks stay exactly-once.

**Offsets** are JSON objects mapping each partition id to the *next sequence number to read* in it, e.g.
``{"0": 1200, "1": 1187}``: the micro-batch ``(start, end]`` holds, for every partition ``p``, the events
with ``start[p] <= sequenceNumber < end[p]``.

Options (case-insensitive; the azure-event-hubs-spark connector's names are accepted where they mean the
same, see :data:`SCALA_ALIASES` and ``docs/spark.md``):

- ``connectionString``: an Event Hubs connection string (``EntityPath`` or ``eventHubName``); or Entra ID:
  ``fullyQualifiedNamespace`` + ``eventHubName`` + ``credential`` or ``credentialFactory`` (see
  :mod:`rxhubs.spark._connection`).
- ``eventHubName``: the hub, when the connection string has no ``EntityPath``.
- ``consumerGroup`` (default ``$Default``): the group to receive with, and whose checkpoints are used.
- ``startingPosition`` (default ``latest``): ``earliest``, ``latest``, or a JSON object mapping partition ids
  to the next sequence number to read (or to ``"earliest"``/``"latest"``); partitions it leaves out start
  at ``earliest``. Used only when a query starts without a Spark checkpoint. Or the connector's
  ``eventhubs.startingPosition`` / ``eventhubs.startingPositions`` (EventPosition JSON: start, end, sequence
  number, offset or enqueued time; the driver translates the last two into sequence numbers at start).
- ``checkpointStore``: an rxhubs checkpoint store URL (``sqlite:///path``, ``blob://container``); a new query
  starts just after the group's checkpoints there (``startingPosition`` for partitions without one), and
  :meth:`EventHubsStreamReader.commit` writes each committed range end back. Spark calls ``commit`` when it
  plans the *next* micro-batch, so these checkpoints lag Spark's own by one batch.
- ``maxEventsPerTrigger``: at most this many events per micro-batch, spread over the partitions.
- ``minPartitions``: split the ranges of a micro-batch into about this many Spark tasks (as in Spark's Kafka
  source), at most 4 per partition, so that more executor cores than Event Hubs partitions read at once.
- ``prefetch`` (default 1000): the receivers' prefetch (AMQP credit) on executors.
- ``receiveTimeout`` (default 60): seconds an executor waits for the next event of its range before failing
  (the first pull of a task gets 30 s more: it connects).
- ``failOnDataLoss`` (default ``true``): events removed by retention before they were read fail the task;
  ``false`` skips them with a WARNING.

The same source reads in batch (``spark.read``, :mod:`rxhubs.spark._batch`) and writes
(``df.write`` / ``df.writeStream``, :mod:`rxhubs.spark._write`).

Spark finds the source by itself under ``eventhubs`` and ``rxhubs`` (the ``pyspark_*`` modules of the wheel);
:func:`register_source` does it by hand where that cannot work.

Example:
    >>> df = (spark.readStream.format("eventhubs")  # doctest: +SKIP
    ...       .option("connectionString", conn_str).option("startingPosition", "earliest").load())
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, ReadMinRows

from rxhubs.spark._driver import _IDS_TTL, DriverSide
from rxhubs.spark._ranges import (
    Offset,
    SequenceRange,
    first_sequence_number,
    next_sequence_number,
    split,
    spread,
)
from rxhubs.spark._read import read_range
from rxhubs.spark._source_options import _Options
from rxhubs.spark._trace import mark, span

if TYPE_CHECKING:
    from rxhubs.stores import CheckpointStore

try:  # Spark >= 4.2: availableNow honours maxEventsPerTrigger through this mixin
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow as _AvailableNow
except ImportError:  # pragma: no cover - older Spark: availableNow reads everything in one batch
    _AvailableNow = object  # type: ignore[assignment,misc]

__all__ = ["EventHubsStreamReader", "SequenceRange", "split", "spread"]

_log = logging.getLogger("rxhubs.spark.source")


class EventHubsStreamReader(DriverSide, DataSourceStreamReader, _AvailableNow):
    """Plans micro-batches as sequence-number ranges per partition and reads them on executors.

    Spark creates it through `EventHubsDataSource.streamReader`; you do not build one yourself. The
    driver side (offsets, planning, commit) keeps one event loop and one hub connection, opened on first
    use; :meth:`read` runs in executor workers, each with its own loop, hub and receiver.

    Example:
        >>> from rxhubs.spark._datasource import EventHubsDataSource
        >>> reader = EventHubsDataSource({"connectionString": conn_str}).streamReader(None)  # doctest: +SKIP
        >>> reader.initialOffset()  # doctest: +SKIP
        {'0': 120, '1': 118}
    """

    def __init__(self, options: Mapping[str, str]) -> None:
        self._options = _Options(options)
        self._reset()
        self._store: CheckpointStore | None = None
        self._target: Offset | None = None
        self._initial: Offset | None = None
        self._committed: Offset = {}

    def __repr__(self) -> str:
        return f"EventHubsStreamReader({self._options.namespace!r}, {self._options.eventhub_name!r})"

    def __getstate__(self) -> dict[str, Any]:
        # Shipped to executors for read(): options only, never the driver's loop, connections or store.
        return {"_options": self._options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._options = state["_options"]
        self._reset()
        self._store = None
        self._target = None
        self._initial = None
        self._committed = {}

    # -- driver side -----------------------------------------------------------------------------------------

    def _checkpoint_store(self) -> CheckpointStore | None:
        if self._store is None and self._options.checkpoint_store:
            from rxhubs.stores import from_url

            self._store = from_url(self._options.checkpoint_store)
        return self._store

    def initialOffset(self) -> dict[str, int]:  # noqa: N802 - Spark's name
        """Where a new query starts: stored checkpoints, else ``startingPosition``; see the module docs.

        Worked out once per reader: Spark asks again when it plans the first micro-batch, and the answer must
        not move (with ``latest``, events sent in between would fall between the two answers).
        """
        if self._initial is None:
            with span("initialOffset"):
                self._initial = self._initial_offset()
        return dict(self._initial)

    def _initial_offset(self) -> Offset:
        props = self._start_properties()
        opts = self._options
        offset: Offset = {}
        for pid, p in props.items():
            offset[pid] = self._resolve(pid, opts.start_of(pid), p)
        store = self._checkpoint_store()
        if store is not None:
            checkpoints = self._run(store.list_checkpoints(opts.namespace, opts.eventhub_name, opts.consumer_group))
            for cp in checkpoints:
                if cp.partition_id in props:
                    p = props[cp.partition_id]
                    resume = max(cp.sequence_number + 1, first_sequence_number(p))
                    offset[cp.partition_id] = min(resume, next_sequence_number(p))
                    self._committed[cp.partition_id] = cp.sequence_number + 1
        _log.info("eventhubs source %r starts at %s", opts.eventhub_name, offset)
        return offset

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802 - Spark's name
        """Fix the end of an availableNow query: the partitions' ends now; later events are left for later."""
        with span("prepareForTriggerAvailableNow"):
            self._target = {pid: next_sequence_number(p) for pid, p in self._start_properties().items()}

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802 - Spark's name
        """``ReadMaxRows(maxEventsPerTrigger)`` when that option is set, else ``ReadAllAvailable()``."""
        if self._options.max_events is not None:
            return ReadMaxRows(self._options.max_events)
        return ReadAllAvailable()

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:  # noqa: N802
        """The end of the next micro-batch: the partitions' ends, capped by availableNow and ``limit``.

        A partition that appeared since ``start`` enters at its first retained event (with no events in this
        batch), so the next batch reads it from there.
        """
        with span("latestOffset"):
            return self._latest_offset(start, limit)

    def _latest_offset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        latest = self._ends()
        starts = {p: int(start[p]) if p in start else v for p, v in latest.items()}
        latest = {p: max(v, starts[p]) for p, v in latest.items()}  # never move back (retention, a new hub)
        for p in start:  # a partition that disappeared keeps its offset
            latest.setdefault(p, int(start[p]))
            starts.setdefault(p, int(start[p]))
        new = [p for p in latest if p not in start]
        if new:
            props = self._run(self._properties())
            for p in new:
                starts[p] = latest[p] = first_sequence_number(props[p]) if p in props else latest[p]
        waiting = sum(latest[p] - starts[p] for p in latest)
        if isinstance(limit, ReadMaxRows):
            return spread(starts, latest, limit.max_rows)
        if isinstance(limit, ReadMinRows) and waiting < limit.min_rows:
            return starts
        return latest

    def _ends(self) -> Offset:
        """The partitions' ends now, capped by an availableNow query's target.

        While the hub's partition ids are the ones the target was fixed with (they are reread every minute),
        the capped ends are the target itself (ends only grow): no management call, which costs about 0.4 s
        of waiting with the SDK, twice per availableNow query.
        """
        target, ids = self._target, self._ids
        fresh = ids is not None and time.monotonic() - ids[1] <= _IDS_TTL
        if target is not None and fresh and ids is not None and set(ids[0]) == set(target):
            return dict(target)
        latest = self._latest()
        if target is not None:
            latest = {p: min(v, target.get(p, v)) for p, v in latest.items()}
        return latest

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[SequenceRange]:
        """One :class:`SequenceRange` per Event Hubs partition with events between ``start`` and ``end``.

        With ``minPartitions``, the ranges are cut into about that many pieces (see :func:`split`).
        """
        ranges = []
        for pid in sorted(end, key=lambda p: (len(p), p)):
            first = int(start.get(pid, end[pid]))
            if int(end[pid]) > first:
                ranges.append(SequenceRange(pid, first, int(end[pid])))
        return split(ranges, self._options.min_partitions)

    def commit(self, end: dict[str, int]) -> None:
        """Write ``end`` (minus one: the last event done) to ``checkpointStore`` for the partitions it moved.

        Spark calls it when it plans the next micro-batch, so these checkpoints lag Spark's by one batch:
        other consumers reading them may re-read at most that batch.
        """
        mark("commit")
        store = self._checkpoint_store()
        if store is None:
            return
        from rxhubs._models import Checkpoint

        opts = self._options
        for pid, nxt in sorted(end.items()):
            nxt = int(nxt)
            if nxt > 0 and self._committed.get(pid) != nxt:
                checkpoint = Checkpoint(opts.namespace, opts.eventhub_name, opts.consumer_group, pid, None, nxt - 1)
                self._run(store.update_checkpoint(checkpoint))
                self._committed[pid] = nxt

    def stop(self) -> None:
        """Close the driver's hub connection, checkpoint store and event loop."""
        store, self._store = self._store, None
        with span("stop"):
            self._close_driver(getattr(store, "close", None))

    # -- executor side ---------------------------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[Any]:
        """Pull the events of one :class:`SequenceRange` and yield them as Arrow record batches.

        Starts a receiver at ``Position.from_sequence_number(start, inclusive=True)`` and stops once an event
        at or beyond ``end - 1`` arrived (events from ``end`` on are dropped), so a range gives the same rows
        on every run. Events removed by retention before they were read fail the task (``failOnDataLoss``,
        the default) or are skipped with a WARNING (``failOnDataLoss=false``).

        Raises:
            RxHubsError: No event arrived for ``receiveTimeout`` seconds (30 s more for the first, which
                connects) before the range was complete.
            DataLossError: Events of the range were removed by retention, with ``failOnDataLoss``.
        """
        assert isinstance(partition, SequenceRange)
        return read_range(self._options, partition)
