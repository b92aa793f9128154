"""Batch reads: ``spark.read.format("eventhubs")`` between a start and an end fixed when the query is planned.

The options are the streaming source's (connection, ``consumerGroup``, ``startingPosition``, ``minPartitions``,
``prefetch``, ``receiveTimeout``, ``failOnDataLoss``) plus where the read ends:

- ``endingPosition`` (default ``latest``): ``latest``, ``earliest``, or a JSON object mapping partition ids to
  the first sequence number *not* read (or ``"latest"``); partitions it leaves out end at ``latest``.
- Or the Scala connector's ``eventhubs.endingPosition`` (all partitions) / ``eventhubs.endingPositions``
  (per partition, ``{"ehName", "partitionId"}`` keys): its ``EventPosition`` JSON (``offset``, ``seqNo``,
  ``enqueuedTime``, ``isInclusive``), read as the connector reads it: the end is where a read *starting* at that
  position would begin, and the range is ``[start, end)``. ``{"seqNo": N}`` ends before N, whatever
  ``isInclusive`` says (``EventHubsClient.translate`` takes ``position.seqNo`` as the ``until`` of the range), so
  a backfill that starts where the last one ended reads no event twice.

A batch read starts at ``earliest`` by default (the connector's default is the end of the stream, so a bare
read there returns no rows). Each partition's start and end become sequence numbers once, in
:meth:`EventHubsBatchReader.partitions`, when Spark plans the query: events enqueued after that are not read,
and every action (``count()``, ``write``) plans again; ``persist()`` the DataFrame to read the hub once.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from pyspark.sql.datasource import DataSourceReader, InputPartition

from rxhubs._models import PartitionProperties, Position
from rxhubs.errors import ConfigurationError
from rxhubs.spark._driver import DriverSide
from rxhubs.spark._ranges import SequenceRange, first_sequence_number, next_sequence_number, split
from rxhubs.spark._read import read_range
from rxhubs.spark._source_options import Start, _event_position, _json, _Options, _partition_key, sequence_map
from rxhubs.spark._trace import span

__all__ = ["EventHubsBatchReader", "parse_ending"]


def parse_ending(ending: Mapping[str, str], eventhub_name: str) -> tuple[Start, dict[str, Start]]:
    """The end for every partition and per partition, as *start-like* values: the first sequence number not read.

    Example:
        >>> parse_ending({"endingposition": '{"0": 120}'}, "h")
        ('latest', {'0': 120})
        >>> parse_ending({"eventhubs.endingposition": '{"seqNo": 99, "isInclusive": true}'}, "h")
        (99, {})
    """
    own = ending.get("endingposition")
    scala = {k: v for k, v in ending.items() if k != "endingposition"}
    if own is not None and scala:
        raise ConfigurationError("give endingPosition or the Scala connector's eventhubs.endingPosition(s), not both")
    if own is not None:
        return _own_ending(own.strip())
    default: Start = "latest"
    if "eventhubs.endingposition" in scala:
        default = _end_position(_json(scala["eventhubs.endingposition"], "eventhubs.endingPosition"),
                                "eventhubs.endingPosition")
    per: dict[str, Start] = {}
    if "eventhubs.endingpositions" in scala:
        given = _json(scala["eventhubs.endingpositions"], "eventhubs.endingPositions")
        if not isinstance(given, dict):
            raise ConfigurationError("eventhubs.endingPositions must be a JSON object of partition -> EventPosition")
        for key, position in given.items():
            pid = _partition_key(key, eventhub_name)
            per[pid] = _end_position(position, f"eventhubs.endingPositions[{pid!r}]")
    return default, per


def _end_position(position: Any, name: str) -> Start:
    # The connector's rule (EventHubsClient.translate, EventHubsRelation): an ending position is translated exactly
    # as a starting one, and that event is the range's exclusive `until`: the first event *not* read.
    return _event_position(position, name)


def _own_ending(text: str) -> tuple[Start, dict[str, Start]]:
    return sequence_map(text, "endingPosition", "first sequence number not read", "latest")


class EventHubsBatchReader(DriverSide, DataSourceReader):
    """Reads each partition's events between the planned start and end, ranges split across Spark tasks.

    Spark creates it through :meth:`EventHubsDataSource.reader`; :meth:`partitions` runs once per query on
    the driver, :meth:`read` on executors.

    Example:
        >>> df = (spark.read.format("eventhubs").option("connectionString", conn_str)  # doctest: +SKIP
        ...       .option("endingPosition", '{"0": 5000}').load())
    """

    def __init__(self, options: Mapping[str, str]) -> None:
        self._options = _Options(options, batch=True)
        self._end_default, self._end_map = parse_ending(self._options.ending, self._options.eventhub_name)
        for pid, end in self._end_map.items():
            start = self._options.start_of(pid)
            if isinstance(end, int) and isinstance(start, int) and end < start:
                raise ConfigurationError(
                    f"partition {pid!r}: the ending position ({end}) is before the starting position ({start})"
                )
        self._reset()

    def __repr__(self) -> str:
        return f"EventHubsBatchReader({self._options.namespace!r}, {self._options.eventhub_name!r})"

    def __getstate__(self) -> dict[str, Any]:
        return {"_options": self._options, "_end_default": self._end_default, "_end_map": self._end_map}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset()

    def _end(self, pid: str, props: PartitionProperties) -> int:
        choice = self._end_map.get(pid, self._end_default)
        if isinstance(choice, Position):
            return int(self._run(self._translate(pid, choice, props)))
        if choice == "earliest":
            return first_sequence_number(props)
        if choice == "latest":
            return next_sequence_number(props)
        assert isinstance(choice, int)
        return min(max(choice, first_sequence_number(props)), next_sequence_number(props))

    def plan(self) -> list[SequenceRange]:
        """Each partition's ``[start, end)`` in sequence numbers now, one range per partition with events.

        Raises:
            ConfigurationError: A partition's end lies before its start.
        """
        try:
            props = self._run(self._properties())
            ranges = []
            for pid in sorted(props, key=lambda p: (len(p), p)):
                start = self._resolve(pid, self._options.start_of(pid), props[pid])
                end = self._end(pid, props[pid])
                if end < start:
                    raise ConfigurationError(
                        f"partition {pid!r} of {self._options.eventhub_name!r}: the ending position (sequence "
                        f"number {end}) is before the starting position ({start})"
                    )
                if end > start:
                    ranges.append(SequenceRange(pid, start, end))
            return ranges
        finally:
            self._close_driver()

    def partitions(self) -> list[InputPartition]:
        """:meth:`plan`'s ranges cut into about ``minPartitions`` pieces (see :func:`~rxhubs.spark._ranges.split`)."""
        with span("plan"):
            return list(split(self.plan(), self._options.min_partitions))

    def read(self, partition: InputPartition) -> Iterator[Any]:
        """The events of one range as Arrow record batches (nothing for Spark's placeholder of no ranges)."""
        if not isinstance(partition, SequenceRange):
            return iter(())
        return read_range(self._options, partition)
