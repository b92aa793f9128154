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

- ``connectionString`` (required): an Event Hubs connection string (``EntityPath`` or ``eventHubName``).
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

Spark finds the source by itself under ``eventhubs`` and ``rxhubs`` (the ``pyspark_*`` modules of the wheel);
:func:`register_source` does it by hand where that cannot work.

Example:
    >>> df = (spark.readStream.format("eventhubs")  # doctest: +SKIP
    ...       .option("connectionString", conn_str).option("startingPosition", "earliest").load())
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, ReadMinRows

from rxhubs._batch import EventBatch
from rxhubs._models import PartitionContext, PartitionProperties, Position
from rxhubs.errors import RxHubsError
from rxhubs.spark._arrow import to_arrow
from rxhubs.spark._ranges import (
    Offset,
    SequenceRange,
    first_sequence_number,
    next_sequence_number,
    split,
    spread,
)
from rxhubs.spark._schema import SCHEMA
from rxhubs.spark._source_options import _Options
from rxhubs.transport._seek import sequence_at

if TYPE_CHECKING:
    from rxhubs.stores import CheckpointStore
    from rxhubs.transport._azure import EventHub

try:  # Spark >= 4.2: availableNow honours maxEventsPerTrigger through this mixin
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow as _AvailableNow
except ImportError:  # pragma: no cover - older Spark: availableNow reads everything in one batch
    _AvailableNow = object  # type: ignore[assignment,misc]

__all__ = [
    "EventHubsDataSource",
    "EventHubsStreamReader",
    "RxHubsDataSource",
    "SequenceRange",
    "register_source",
    "split",
    "spread",
]

_log = logging.getLogger("rxhubs.spark.source")

#: Events asked of a receiver per pull; rows gathered into one Arrow record batch handed to Spark.
_PULL = 10_000
_ROWS = 10_000
#: Seconds the driver reuses the hub's partition ids before asking again (partitions are rarely added).
_IDS_TTL = 60.0
#: Seconds a task's first pull may take on top of ``receiveTimeout``: it opens the connection and the link.
_CONNECT_GRACE = 30.0
#: Seconds the driver waits for the first event at an offset or enqueued time before taking the partition's end.
_TRANSLATE_WAIT = 10.0


class EventHubsStreamReader(DataSourceStreamReader, _AvailableNow):
    """Plans micro-batches as sequence-number ranges per partition and reads them on executors.

    Spark creates it through :meth:`EventHubsDataSource.streamReader`; you do not build one yourself. The
    driver side (offsets, planning, commit) keeps one event loop and one hub connection, opened on first
    use; :meth:`read` runs in executor workers, each with its own loop, hub and receiver.

    Example:
        >>> reader = EventHubsDataSource({"connectionString": conn_str}).streamReader(None)  # doctest: +SKIP
        >>> reader.initialOffset()  # doctest: +SKIP
        {'0': 120, '1': 118}
    """

    def __init__(self, options: Mapping[str, str]) -> None:
        self._options = _Options(options)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._hub: EventHub | None = None
        self._store: CheckpointStore | None = None
        self._target: Offset | None = None
        self._committed: Offset = {}
        self._ids: tuple[list[str], float] | None = None

    def __repr__(self) -> str:
        return f"EventHubsStreamReader({self._options.namespace!r}, {self._options.eventhub_name!r})"

    def __getstate__(self) -> dict[str, Any]:
        # Shipped to executors for read(): options only, never the driver's loop, connections or store.
        return {"_options": self._options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._options = state["_options"]
        self._loop = None
        self._hub = None
        self._store = None
        self._target = None
        self._committed = {}
        self._ids = None

    # -- driver side -----------------------------------------------------------------------------------------

    def _run(self, coro: Any) -> Any:
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
        try:
            return self._loop.run_until_complete(coro)
        except Exception as exc:
            self._options.check_secret(exc)
            raise

    def _driver_hub(self) -> EventHub:
        if self._hub is None:
            self._hub = self._options.hub()
        return self._hub

    async def _properties(self) -> dict[str, PartitionProperties]:
        hub = self._driver_hub()
        now = time.monotonic()
        if self._ids is None or now - self._ids[1] > _IDS_TTL:
            self._ids = (list(await hub.get_partition_ids()), now)
        ids = self._ids[0]
        props = await asyncio.gather(*(hub.get_partition_properties(p) for p in ids))
        return {p.partition_id: p for p in props}

    def _checkpoint_store(self) -> CheckpointStore | None:
        if self._store is None and self._options.checkpoint_store:
            from rxhubs.stores import from_url

            self._store = from_url(self._options.checkpoint_store)
        return self._store

    def initialOffset(self) -> dict[str, int]:  # noqa: N802 - Spark's name
        """Where a new query starts: stored checkpoints, else ``startingPosition``; see the module docs."""
        props = self._run(self._properties())
        opts = self._options
        offset: Offset = {}
        for pid, p in props.items():
            choice = opts.start_of(pid)
            if isinstance(choice, Position):
                choice = self._run(self._translate(pid, choice, p))
            if choice == "earliest":
                offset[pid] = first_sequence_number(p)
            elif choice == "latest":
                offset[pid] = next_sequence_number(p)
            else:
                assert isinstance(choice, int)
                offset[pid] = min(max(choice, first_sequence_number(p)), next_sequence_number(p))
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

    async def _translate(self, partition_id: str, position: Position, props: PartitionProperties) -> int:
        """The sequence number of the first event at ``position`` (an offset or enqueued time), else the end.

        Read with a receiver, as the Scala connector does; a position past the last event (known from the
        partition's properties, or no event within a few seconds) means the partition's end.
        """
        wait = min(self._options.receive_timeout, _TRANSLATE_WAIT)
        return await sequence_at(self._driver_hub(), partition_id, self._options.consumer_group, position, props, wait)

    def _latest(self) -> Offset:
        return {pid: next_sequence_number(p) for pid, p in self._run(self._properties()).items()}

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802 - Spark's name
        """Fix the end of an availableNow query: the partitions' ends now; later events are left for later."""
        self._target = self._latest()

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
        latest = self._latest()
        if self._target is not None:
            latest = {p: min(v, self._target.get(p, v)) for p, v in latest.items()}
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
        loop, hub, store = self._loop, self._hub, self._store
        self._loop = self._hub = self._store = None
        if loop is None:
            return
        try:
            if hub is not None:
                loop.run_until_complete(hub.close())
            close = getattr(store, "close", None)
            if close is not None:
                loop.run_until_complete(close())
        except Exception as exc:  # stopping must not fail the query's shutdown
            _log.debug("closing the eventhubs source failed: %s", self._options.redact(str(exc)))
        finally:
            loop.close()

    # -- executor side ---------------------------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[Any]:
        """Pull the events of one :class:`SequenceRange` and yield them as Arrow record batches.

        Starts a receiver at ``Position.from_sequence_number(start, inclusive=True)`` and stops once an event
        at or beyond ``end - 1`` arrived (events from ``end`` on are dropped), so a range gives the same rows
        on every run. A gap (events already removed by retention) is skipped.

        Raises:
            RxHubsError: No event arrived for ``receiveTimeout`` seconds (30 s more for the first, which
                connects) before the range was complete.
        """
        assert isinstance(partition, SequenceRange)
        opts = self._options
        loop = asyncio.new_event_loop()
        hub = opts.hub()
        context = PartitionContext(opts.namespace, opts.eventhub_name, opts.consumer_group, partition.partition)
        receiver = hub.receiver(
            partition.partition,
            opts.consumer_group,
            start=Position.from_sequence_number(partition.start, inclusive=True),
            prefetch=min(opts.prefetch or 1000, max(1, partition.end - partition.start)),
        )
        pending: list[Any] = []
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
                    raise RxHubsError(
                        f"partition {partition.partition!r} of {opts.eventhub_name!r}: no event for "
                        f"{wait:g} s at sequence number {position} (range {partition.start}.."
                        f"{partition.end - 1}); raise receiveTimeout if the hub is slow"
                    )
                wait = opts.receive_timeout
                kept = [e for e in events if position <= e.sequence_number < partition.end]
                position = max(position, events[-1].sequence_number + 1)
                pending += kept
                if len(pending) >= _ROWS or (pending and position >= partition.end):
                    yield from to_arrow(EventBatch(context, tuple(pending))).to_batches()
                    pending = []
        finally:
            try:
                loop.run_until_complete(hub.close())  # closes the receiver too
            finally:
                loop.close()


class EventHubsDataSource(DataSource):
    """The ``eventhubs`` streaming data source: ``spark.readStream.format("eventhubs")``.

    Rows have :data:`~rxhubs.spark.SCHEMA`, the same columns as :func:`rxhubs.spark.write` produces; the
    options are in the module documentation. With ``rxhubs[spark]`` installed, Spark (>= 4.0) finds it by
    itself through the ``pyspark_rxhubs_eventhubs`` module: no registration call. :func:`register_source`
    registers it by hand where that discovery cannot work (an editable install, a notebook that imported a
    copy of rxhubs from a path). :class:`RxHubsDataSource` is the same source under the name ``rxhubs``.

    Example:
        >>> query = (spark.readStream.format("eventhubs")  # doctest: +SKIP
        ...     .option("connectionString", conn_str).option("startingPosition", "earliest").load()
        ...     .writeStream.format("parquet").option("checkpointLocation", "chk/")
        ...     .trigger(availableNow=True).start("out/"))
    """

    @classmethod
    def name(cls) -> str:
        """``"eventhubs"``."""
        return "eventhubs"

    def schema(self) -> str:
        """:data:`~rxhubs.spark.SCHEMA`, as a DDL string."""
        return SCHEMA

    def streamReader(self, schema: Any) -> EventHubsStreamReader:  # noqa: N802 - Spark's name
        """An :class:`EventHubsStreamReader` over this source's options (checked here, cheaply: no I/O)."""
        return EventHubsStreamReader(self.options)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class RxHubsDataSource(EventHubsDataSource):
    """:class:`EventHubsDataSource` under the name ``rxhubs``: ``spark.readStream.format("rxhubs")``.

    The same source, options and rows. Use this name when the Scala connector (azure-event-hubs-spark), which
    also calls itself ``eventhubs``, is on the same session's classpath: Spark then gives ``eventhubs`` to the
    Scala connector. Found by Spark by itself through the ``pyspark_rxhubs`` module.

    Example:
        >>> df = spark.readStream.format("rxhubs").option("connectionString", conn_str).load()  # doctest: +SKIP
    """

    @classmethod
    def name(cls) -> str:
        """``"rxhubs"``."""
        return "rxhubs"


def register_source(spark: Any) -> None:
    """Register the source with ``spark`` under both names, ``eventhubs`` and ``rxhubs``.

    Not needed with ``rxhubs[spark]`` installed normally: Spark (>= 4.0) discovers both names by itself. Kept
    for setups where that discovery cannot work: an editable install (``pip install -e``), rxhubs put on
    ``sys.path`` by hand, a Spark Connect client. Calling it where Spark already discovered the names is
    harmless: Spark 4.3 accepts the registration, and a Spark that refuses to replace a discovered source
    (``DATA_SOURCE_ALREADY_EXISTS``) gets it left as it is.

    Args:
        spark: A ``SparkSession`` (Spark >= 4.2 for ``maxEventsPerTrigger``).

    Raises:
        Exception: What Spark raises for any failure other than "already registered".

    Example:
        >>> import rxhubs.spark
        >>> rxhubs.spark.register_source(spark)  # doctest: +SKIP
        >>> spark.readStream.format("eventhubs").option("connectionString", conn_str).load()  # doctest: +SKIP
        DataFrame[body: binary, partition: string, ...]
    """
    for source in (EventHubsDataSource, RxHubsDataSource):
        try:
            spark.dataSource.register(source)
        except Exception as exc:
            if "DATA_SOURCE_ALREADY_EXISTS" not in str(exc) and _condition(exc) != "DATA_SOURCE_ALREADY_EXISTS":
                raise
            _log.debug("Spark data source %r already registered (discovered): kept", source.name())


def _condition(exc: BaseException) -> str | None:
    get = getattr(exc, "getCondition", None) or getattr(exc, "getErrorClass", None)
    try:
        return str(get()) if get is not None else None
    except Exception:
        return None
