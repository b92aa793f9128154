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
import datetime as _dt
import itertools
import json
import logging
import re
import time
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, ReadMinRows

from rxhubs._batch import EventBatch
from rxhubs._models import PartitionContext, PartitionProperties, Position
from rxhubs.errors import ConfigurationError, RxHubsError
from rxhubs.spark._arrow import to_arrow
from rxhubs.spark._schema import SCHEMA
from rxhubs.transport._connection_string import parse_connection_string, redact

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
#: The most pieces ``minPartitions`` cuts one partition's range into: Event Hubs allows 5 readers per partition
#: and consumer group, and one is left for other readers.
_MAX_PIECES = 4
#: Seconds a task's first pull may take on top of ``receiveTimeout``: it opens the connection and the link.
_CONNECT_GRACE = 30.0
_DEFAULTS = {"consumergroup": "$Default", "startingposition": "latest", "prefetch": "1000", "receivetimeout": "60"}
_KNOWN = {
    "connectionstring",
    "eventhubname",
    "consumergroup",
    "startingposition",
    "checkpointstore",
    "maxeventspertrigger",
    "minpartitions",
    "prefetch",
    "receivetimeout",
    "path",
}
#: Option names of the Scala connector (azure-event-hubs-spark) that mean the same here -> this source's own.
#: ``eventhubs.startingPosition(s)`` are read separately: their values are the connector's JSON positions.
SCALA_ALIASES = {
    "eventhubs.connectionstring": "connectionstring",
    "eventhubs.consumergroup": "consumergroup",
    "eventhubs.prefetchcount": "prefetch",
    "eventhubs.receivertimeout": "receivetimeout",
}
_SCALA_POSITIONS = ("eventhubs.startingposition", "eventhubs.startingpositions")
_BATCH_ONLY = ("eventhubs.endingposition", "eventhubs.endingpositions")
_ISO_DURATION = re.compile(r"PT(?:(\d+(?:\.\d+)?)H)?(?:(\d+(?:\.\d+)?)M)?(?:(\d+(?:\.\d+)?)S)?", re.IGNORECASE)

Offset = dict[str, int]
#: Where a partition starts when the query has no Spark checkpoint: ``"earliest"``, ``"latest"``, the next
#: sequence number to read, or a Position (an offset or an enqueued time, from the Scala connector's options)
#: that the driver translates into a sequence number when the query starts.
Start = int | str | Position
#: Seconds the driver waits for the first event at an offset or enqueued time before taking the partition's end.
_TRANSLATE_WAIT = 10.0


class SequenceRange(InputPartition):
    """One Spark input partition: the events of one Event Hubs partition with ``start <= seq < end``.

    Example:
        >>> SequenceRange("0", 10, 20)
        SequenceRange(partition='0', start=10, end=20)
    """

    def __init__(self, partition: str, start: int, end: int) -> None:
        super().__init__((partition, start, end))
        self.partition = partition
        self.start = start
        self.end = end

    def __repr__(self) -> str:
        return f"SequenceRange(partition={self.partition!r}, start={self.start}, end={self.end})"


class _Options:
    """The source's options, validated; ``repr`` never shows the connection string."""

    def __init__(self, raw: Mapping[str, str]) -> None:
        opts = _canonical({str(k).lower(): str(v) for k, v in raw.items()})
        scala = {k: opts.pop(k) for k in _SCALA_POSITIONS if k in opts}
        unknown = sorted(set(opts) - _KNOWN)
        if unknown:
            raise ConfigurationError(
                f"unknown eventhubs source option(s) {', '.join(map(repr, unknown))}; known: connectionString, "
                "eventHubName, consumerGroup, startingPosition, checkpointStore, maxEventsPerTrigger, minPartitions, "
                "prefetch, receiveTimeout (and the Scala connector's eventhubs.connectionString, "
                "eventhubs.consumerGroup, eventhubs.startingPosition(s), eventhubs.prefetchCount, "
                "eventhubs.receiverTimeout)"
            )
        if scala and "startingposition" in opts:
            raise ConfigurationError(
                "give startingPosition or the Scala connector's eventhubs.startingPosition(s), not both"
            )
        opts = {**_DEFAULTS, **opts}
        conn = opts.get("connectionstring")
        if not conn:
            raise ConfigurationError("the eventhubs source needs option('connectionString', ...)")
        self.connection_string = conn
        parsed = parse_connection_string(conn, opts.get("eventhubname") or None)
        if parsed.eventhub_name is None:
            raise ConfigurationError(
                "no event hub name: add EntityPath=<hub> to the connection string or option('eventHubName', ...)"
            )
        self.namespace = parsed.fully_qualified_namespace
        self.eventhub_name = parsed.eventhub_name
        self.consumer_group = opts["consumergroup"]
        self.checkpoint_store = opts.get("checkpointstore") or None
        self.max_events = _positive_int(opts, "maxeventspertrigger", "maxEventsPerTrigger", None)
        self.min_partitions = _positive_int(opts, "minpartitions", "minPartitions", None)
        self.prefetch = _positive_int(opts, "prefetch", "prefetch", 1000)
        self.receive_timeout = _seconds(opts["receivetimeout"])
        self.default_start: Start
        self.starting_map: dict[str, Start]
        if scala:
            self.default_start, self.starting_map = _scala_starts(scala, self.eventhub_name)
        else:
            self.default_start, self.starting_map = _starts(opts["startingposition"].strip())

    def __repr__(self) -> str:
        return f"_Options(namespace={self.namespace!r}, eventhub_name={self.eventhub_name!r})"

    def start_of(self, partition_id: str) -> Start:
        """Where ``partition_id`` starts without a Spark checkpoint or a stored checkpoint."""
        return self.starting_map.get(partition_id, self.default_start)

    def hub(self) -> EventHub:
        from rxhubs.transport._azure import EventHub

        return EventHub.from_connection_string(
            self.connection_string, self.eventhub_name, track_last_enqueued_event_properties=False
        )

    def redact(self, text: str) -> str:
        return redact(text, self.connection_string)

    def check_secret(self, exc: BaseException) -> None:
        """Raise a redacted :class:`RxHubsError` instead of ``exc`` if its text shows a secret.

        rxhubs' own errors never do; a third-party error might.
        """
        text = str(exc)
        if self.redact(text) != text:
            raise RxHubsError(f"{type(exc).__name__}: {self.redact(text)}") from None


def _canonical(opts: dict[str, str]) -> dict[str, str]:
    """The Scala connector's names replaced by this source's (same meaning); the same setting twice is an error."""
    for name in _BATCH_ONLY:
        if name in opts:
            raise ConfigurationError(
                f"{name} ends a batch query of the Scala connector; this source is streaming only: use "
                "trigger(availableNow=True) to read what is in the hub now and stop"
            )
    out = {k: v for k, v in opts.items() if k not in SCALA_ALIASES}
    for scala, own in SCALA_ALIASES.items():
        if scala in opts:
            if own in out and out[own] != opts[scala]:
                raise ConfigurationError(f"option {own!r} is given twice, also as the Scala connector's {scala!r}")
            out[own] = opts[scala]
    return out


def _seconds(text: str) -> float:
    """``receiveTimeout`` in seconds: a number, or an ISO 8601 duration as the Scala connector takes (``PT60S``)."""
    value: float | None
    try:
        value = float(text)
    except ValueError:
        match = _ISO_DURATION.fullmatch(text.strip())
        value = None
        if match and any(match.groups()):
            hours, minutes, seconds = (float(g) if g else 0.0 for g in match.groups())
            value = hours * 3600 + minutes * 60 + seconds
    if value is None or not value > 0:
        raise ConfigurationError(f"receiveTimeout must be seconds (> 0) or a duration like PT60S, got {text!r}")
    return value


def _positive_int(opts: Mapping[str, str], key: str, name: str, default: int | None) -> int | None:
    if key not in opts:
        return default
    try:
        value = int(opts[key])
    except ValueError:
        value = 0
    if value < 1:
        raise ConfigurationError(f"{name} must be an integer >= 1, got {opts[key]!r}")
    return value


def _starts(text: str) -> tuple[Start, dict[str, Start]]:
    """``startingPosition``: earliest or latest for all, or a JSON map (partitions it leaves out: earliest)."""
    if text.lower() in ("earliest", "latest"):
        return text.lower(), {}
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise ConfigurationError(
            "startingPosition must be earliest, latest or a JSON object of partition id -> next sequence number"
        )
    out: dict[str, Start] = {}
    for key, seq in value.items():
        if isinstance(seq, str) and seq.lower() in ("earliest", "latest"):
            out[str(key)] = seq.lower()
        elif isinstance(seq, int) and not isinstance(seq, bool) and seq >= 0:
            out[str(key)] = seq
        else:
            raise ConfigurationError(
                f"startingPosition for partition {key!r} must be a sequence number >= 0, earliest or latest"
            )
    return "earliest", out


def _scala_starts(options: Mapping[str, str], eventhub_name: str) -> tuple[Start, dict[str, Start]]:
    """The Scala connector's ``eventhubs.startingPosition`` (all partitions) and ``...Positions`` (per partition).

    Values are its JSON ``EventPosition``s; keys of ``startingPositions`` its JSON ``NameAndPartition``
    (``{"ehName": "hub", "partitionId": 0}``) or a plain partition id. As in the connector (whose default
    position is the end of the stream), a partition in neither starts at ``latest``.
    """
    default: Start = "latest"
    if "eventhubs.startingposition" in options:
        default = _event_position(_json(options["eventhubs.startingposition"], "eventhubs.startingPosition"),
                                  "eventhubs.startingPosition")
    starts: dict[str, Start] = {}
    if "eventhubs.startingpositions" in options:
        per = _json(options["eventhubs.startingpositions"], "eventhubs.startingPositions")
        if not isinstance(per, dict):
            raise ConfigurationError("eventhubs.startingPositions must be a JSON object of partition -> EventPosition")
        for key, position in per.items():
            partition = _partition_key(key, eventhub_name)
            starts[partition] = _event_position(position, f"eventhubs.startingPositions[{partition!r}]")
    return default, starts


def _json(text: str, name: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        raise ConfigurationError(f"{name} must be JSON, as the Scala connector's EventPosition") from None


def _partition_key(key: str, eventhub_name: str) -> str:
    """A ``NameAndPartition`` JSON key (``{"ehName": "hub", "partitionId": 0}``) or a plain partition id."""
    try:
        value = json.loads(key)
    except ValueError:
        value = key
    if isinstance(value, dict):
        name, partition = value.get("ehName"), value.get("partitionId")
        if name is not None and str(name).lower() != eventhub_name.lower():
            raise ConfigurationError(
                f"eventhubs.startingPositions names event hub {name!r}, but this query reads {eventhub_name!r}"
            )
        value = partition
    if isinstance(value, bool) or not isinstance(value, int | str) or str(value).strip() == "":
        raise ConfigurationError(f"eventhubs.startingPositions: {key!r} names no partition")
    return str(value)


def _event_position(position: Any, name: str) -> Start:
    """A Scala connector ``EventPosition`` (``offset``, ``seqNo``, ``enqueuedTime``, ``isInclusive``) as a start.

    The start of the stream (``offset`` ``"-1"``), its end (``"@latest"``) and a sequence number (``seqNo``,
    one later when ``isInclusive`` is false) are used as they are. A numeric ``offset`` or an ``enqueuedTime``
    (``"2026-03-01T12:00:00.000Z"``; naive means UTC) becomes a :class:`~rxhubs.Position` that the driver
    translates into the sequence number of the first event there when the query starts, as the connector does.
    """
    if not isinstance(position, dict):
        raise ConfigurationError(f"{name} must be an EventPosition JSON object (offset, seqNo, enqueuedTime)")
    offset, seq, enqueued = position.get("offset"), position.get("seqNo", -1), position.get("enqueuedTime")
    inclusive = position.get("isInclusive", True) is not False
    given = [k for k, v in (("offset", offset), ("seqNo", None if seq in (None, -1) else seq),
                            ("enqueuedTime", enqueued)) if v is not None]
    if len(given) > 1:
        raise ConfigurationError(f"{name}: give one of offset, seqNo and enqueuedTime, not {' and '.join(given)}")
    if enqueued is not None:
        try:
            when = _dt.datetime.fromisoformat(str(enqueued))
        except ValueError:
            raise ConfigurationError(
                f"{name}: enqueuedTime must be an ISO 8601 time like 2026-03-01T12:00:00.000Z, got {enqueued!r}"
            ) from None
        when = when if when.tzinfo is not None else when.replace(tzinfo=_dt.UTC)
        return Position.from_enqueued_time(when, inclusive=inclusive)
    if offset is not None:
        if str(offset) == "-1":
            return "earliest"
        if str(offset) == "@latest":
            return "latest"
        if not str(offset).isdigit():
            raise ConfigurationError(f'{name}: offset must be "-1", "@latest" or a number, got {offset!r}')
        return Position.from_offset(str(offset), inclusive=inclusive)
    if isinstance(seq, int) and not isinstance(seq, bool) and seq >= 0:
        return seq if inclusive else seq + 1
    raise ConfigurationError(f"{name}: seqNo must be a sequence number >= 0, got {seq!r}")


def _first(props: PartitionProperties) -> int:
    """The first sequence number still retained (the next one to be enqueued when the partition is empty)."""
    return props.last_enqueued_sequence_number + 1 if props.is_empty else props.beginning_sequence_number


def _next(props: PartitionProperties) -> int:
    """The sequence number the next enqueued event will get."""
    return props.last_enqueued_sequence_number + 1


def spread(start: Mapping[str, int], latest: Mapping[str, int], max_rows: int) -> Offset:
    """``latest`` capped so that at most ``max_rows`` events lie between ``start`` and it, shared fairly.

    Each partition gets an equal share; what a partition with less data leaves over goes to the others
    (water filling); leftover single events go to the partitions with the most data waiting.

    Example:
        >>> spread({"0": 0, "1": 0}, {"0": 100, "1": 3}, 10)
        {'0': 7, '1': 3}
    """
    waiting = {p: max(0, latest[p] - start.get(p, latest[p])) for p in latest}
    take = dict.fromkeys(latest, 0)
    budget = max_rows
    open_ = sorted((p for p in waiting if waiting[p] > 0), key=lambda p: (waiting[p], p))
    while open_ and budget > 0:
        share = budget // len(open_)
        if share == 0:
            for p in sorted(open_, key=lambda p: (-(waiting[p] - take[p]), p))[:budget]:
                take[p] += 1
            budget = 0
            break
        remaining = []
        for p in open_:
            step = min(share, waiting[p] - take[p])
            take[p] += step
            budget -= step
            if take[p] < waiting[p]:
                remaining.append(p)
        open_ = remaining
    return {p: start.get(p, latest[p]) + take[p] for p in latest}


def split(ranges: list[SequenceRange], min_partitions: int | None) -> list[SequenceRange]:
    """``ranges`` cut into about ``min_partitions`` contiguous pieces, each range in proportion to its size.

    Nothing is cut when there are already that many ranges; every piece keeps at least one event, and one
    partition's range becomes at most 4 pieces (Event Hubs allows 5 readers per partition and consumer group).

    Example:
        >>> for piece in split([SequenceRange("0", 0, 60), SequenceRange("1", 100, 120)], 4):
        ...     print(piece)
        SequenceRange(partition='0', start=0, end=20)
        SequenceRange(partition='0', start=20, end=40)
        SequenceRange(partition='0', start=40, end=60)
        SequenceRange(partition='1', start=100, end=120)
    """
    if not min_partitions or len(ranges) >= min_partitions:
        return ranges
    total = sum(r.end - r.start for r in ranges)
    out = []
    for r in ranges:
        size = r.end - r.start
        parts = max(1, min(size, _MAX_PIECES, round(size * min_partitions / total)))
        bounds = [r.start + size * i // parts for i in range(parts + 1)]
        out += [SequenceRange(r.partition, a, b) for a, b in itertools.pairwise(bounds)]
    return out


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
                offset[pid] = _first(p)
            elif choice == "latest":
                offset[pid] = _next(p)
            else:
                assert isinstance(choice, int)
                offset[pid] = min(max(choice, _first(p)), _next(p))
        store = self._checkpoint_store()
        if store is not None:
            checkpoints = self._run(store.list_checkpoints(opts.namespace, opts.eventhub_name, opts.consumer_group))
            for cp in checkpoints:
                if cp.partition_id in props:
                    p = props[cp.partition_id]
                    offset[cp.partition_id] = min(max(cp.sequence_number + 1, _first(p)), _next(p))
                    self._committed[cp.partition_id] = cp.sequence_number + 1
        _log.info("eventhubs source %r starts at %s", opts.eventhub_name, offset)
        return offset

    async def _translate(self, partition_id: str, position: Position, props: PartitionProperties) -> int:
        """The sequence number of the first event at ``position`` (an offset or enqueued time), else the end.

        Read with a receiver, as the Scala connector does; a position past the last event (known from the
        partition's properties, or no event within a few seconds) means the partition's end.
        """
        if props.is_empty:
            return _next(props)
        last_time = props.last_enqueued_time_utc
        if isinstance(position.value, _dt.datetime) and last_time is not None:
            when, last = position.value, last_time if last_time.tzinfo else last_time.replace(tzinfo=_dt.UTC)
            if when > last or (when == last and not position.inclusive):
                return _next(props)
        if position.kind == "offset" and props.last_enqueued_offset.isdigit():
            offset, last_offset = int(str(position.value)), int(props.last_enqueued_offset)
            if offset > last_offset or (offset == last_offset and not position.inclusive):
                return _next(props)
        opts = self._options
        receiver = self._driver_hub().receiver(partition_id, opts.consumer_group, start=position, prefetch=1)
        async with receiver:
            events = await receiver.receive_batch(1, max_wait=min(opts.receive_timeout, _TRANSLATE_WAIT))
        return events[0].sequence_number if events else _next(props)

    def _latest(self) -> Offset:
        return {pid: _next(p) for pid, p in self._run(self._properties()).items()}

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
                starts[p] = latest[p] = _first(props[p]) if p in props else latest[p]
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
