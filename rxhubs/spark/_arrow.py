"""Event batches to a ``pyarrow.Table`` with the sink's schema, column by column (no per-row dicts).

Each column is gathered with one list comprehension per batch and handed to pyarrow once; the property
maps are built from flat key and value lists plus offsets (``MapArray.from_arrays``), and a properties
mapping shared by many events (one send, one set of properties) is converted once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from rxhubs._batch import EventBatch
from rxhubs.spark._schema import PUBLISHER_PROPERTY, arrow_schema, key_to_str, property_to_str

__all__ = ["to_arrow", "to_dataframe"]


class _MapColumn:
    """Flat keys, values and offsets of a ``map<string,string>`` column, converting a mapping met again only once.

    A mapping object seen before in the same call (one dict shared by the events of one send) is copied from
    its first rows. The cache holds ints (row numbers) and the mappings in a list, so it adds no object per event
    for the garbage collector to visit (each event's system properties are a mapping of their own).
    """

    __slots__ = ("first_row", "keys", "offsets", "seen", "values")

    def __init__(self) -> None:
        self.offsets: list[int] = [0]
        self.keys: list[str] = []
        self.values: list[str | None] = []
        self.first_row: dict[int, int] = {}  # id(mapping) -> the row it was first converted in
        self.seen: list[Mapping[Any, Any]] = []  # keeps each mapping, so that its id stays unique for the call

    def extend(self, mappings: Iterable[Mapping[Any, Any]]) -> None:
        offsets, keys, values, first_row, seen = self.offsets, self.keys, self.values, self.first_row, self.seen
        end = offsets[-1]
        for mapping in mappings:
            if mapping:
                row = first_row.get(id(mapping))
                if row is None:
                    first_row[id(mapping)] = len(offsets) - 1
                    seen.append(mapping)
                    keys.extend(map(key_to_str, mapping.keys()))
                    values.extend(map(property_to_str, mapping.values()))
                else:
                    start, stop = offsets[row], offsets[row + 1]
                    keys += keys[start:stop]
                    values += values[start:stop]
                end = len(keys)
            offsets.append(end)

    def array(self) -> Any:
        import pyarrow as pa

        return pa.MapArray.from_arrays(
            pa.array(self.offsets, pa.int32()),
            pa.array(self.keys, pa.string()),
            pa.array(self.values, pa.string()),
        )


def _publisher(system_properties: Mapping[str, Any]) -> str | None:
    return property_to_str(system_properties.get(PUBLISHER_PROPERTY))


def to_arrow(batches: Iterable[EventBatch] | EventBatch) -> Any:
    """The events of ``batches``, in order, as a ``pyarrow.Table`` with :func:`~rxhubs.spark.arrow_schema`.

    Empty batches add no rows. Enqueued times are stored as UTC microseconds (naive datetimes count as UTC).

    Args:
        batches: Event batches (one :class:`~rxhubs.EventBatch` is accepted too).

    Returns:
        A ``pyarrow.Table``.

    Example:
        >>> from rxhubs.testing import InMemoryEventHub
        >>> from rxhubs import EventBatch, PartitionContext
        >>> hub = InMemoryEventHub(partition_count=1)
        >>> events = hub.send([b"a", b"b"], partition_id="0", properties={"kind": "demo", "v": 2})
        >>> table = to_arrow([EventBatch(PartitionContext("ns", "telemetry", "$Default", "0"), tuple(events))])
        >>> table.num_rows, table.column("body").to_pylist(), table.column("properties").to_pylist()[0]
        (2, [b'a', b'b'], [('kind', 'demo'), ('v', '2')])
    """
    import pyarrow as pa

    if isinstance(batches, EventBatch):
        batches = (batches,)
    bodies: list[bytes] = []
    partitions: list[str] = []
    offsets: list[str] = []
    sequence_numbers: list[int] = []
    times: list[Any] = []
    publishers: list[str | None] = []
    partition_keys: list[str | None] = []
    groups: list[str] = []
    hubs: list[str] = []
    properties = _MapColumn()
    system_properties = _MapColumn()
    for batch in batches:
        events = batch.events
        n = len(events)
        if n == 0:
            continue
        context = batch.context
        bodies += [e.body for e in events]
        partitions += [context.partition_id] * n
        offsets += [e.offset for e in events]
        sequence_numbers += [e.sequence_number for e in events]
        times += [e.enqueued_time for e in events]
        systems = [e.system_properties for e in events]  # read once: each read of a lazy field costs
        publishers += [_publisher(s) if s else None for s in systems]
        partition_keys += [e.partition_key for e in events]
        properties.extend([e.properties for e in events])
        system_properties.extend(systems)
        groups += [context.consumer_group] * n
        hubs += [context.eventhub_name] * n
    schema = arrow_schema()
    columns = [
        pa.array(bodies, pa.binary()),
        pa.array(partitions, pa.string()),
        pa.array(offsets, pa.string()),
        pa.array(sequence_numbers, pa.int64()),
        pa.array(times, schema.field("enqueuedTime").type),
        pa.array(publishers, pa.string()),
        pa.array(partition_keys, pa.string()),
        properties.array(),
        system_properties.array(),
        pa.array(groups, pa.string()),
        pa.array(hubs, pa.string()),
    ]
    return pa.Table.from_arrays(columns, schema=schema)


def to_dataframe(spark: Any, batches: Iterable[EventBatch] | EventBatch) -> Any:
    """The events of ``batches`` as a Spark DataFrame with :data:`~rxhubs.spark.SCHEMA`, built through Arrow.

    ``enqueuedTime`` holds UTC instants (Spark ``timestamp``); they display in the session's time zone
    (:func:`~rxhubs.spark.local_session` sets UTC). Works with classic and Spark Connect sessions.

    Args:
        spark: A ``SparkSession``.
        batches: Event batches (one :class:`~rxhubs.EventBatch` is accepted too); empty ones add no rows.

    Returns:
        A ``pyspark.sql.DataFrame`` (built from local data: cheap to read more than once).

    Example:
        >>> df = to_dataframe(spark, batches)  # doctest: +SKIP
        >>> df.select("partition", "sequenceNumber").orderBy("sequenceNumber").first()  # doctest: +SKIP
        Row(partition='0', sequenceNumber=0)
    """
    return spark.createDataFrame(to_arrow(batches))
