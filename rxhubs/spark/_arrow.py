"""Event batches to a ``pyarrow.Table`` with the sink's schema, column by column (no per-row dicts).

Each column is gathered as one Python list (:mod:`rxhubs.spark._columns`: received messages straight from their
AMQP sections) and handed to pyarrow once; the property maps are built from flat key and value lists plus
offsets (``MapArray.from_arrays``), and a properties mapping shared by many events (one send, one set of
properties) is converted once.

On a classic session, :func:`to_dataframe` first names pyspark's Arrow entry point in the session's Py4J view
(one ``java_import`` of ``PythonSQLUtils`` per gateway). ``createDataFrame(pyarrow.Table)`` looks that class up
twice by its short name; through pyspark's package imports alone, each look-up missed in several packages, and
each miss searched every jar on the driver's class path: about a sixth of ``createDataFrame``'s time for a
10k-event micro-batch. The single import resolves the same class at once.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable
from typing import Any

from rxhubs._batch import EventBatch
from rxhubs.spark._columns import Columns
from rxhubs.spark._schema import arrow_schema

__all__ = ["to_arrow", "to_dataframe"]

#: The class pyspark's ``createDataFrame(pyarrow.Table)`` calls by its short name (``_jvm.PythonSQLUtils``).
_ARROW_UTILS = "org.apache.spark.sql.api.python.PythonSQLUtils"
#: The Py4J views (one per gateway) that already import it by that name.
_named: weakref.WeakSet[Any] = weakref.WeakSet()


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
    c = Columns()
    for batch in batches:
        c.add(batch)
    schema = arrow_schema()
    columns = [
        pa.array(c.bodies, pa.binary()),
        pa.array(c.partitions, pa.string()),
        pa.array(c.offsets, pa.string()),
        pa.array(c.sequence_numbers, pa.int64()),
        pa.array(c.micros, schema.field("enqueuedTime").type),
        pa.array(c.publishers, pa.string()),
        pa.array(c.partition_keys, pa.string()),
        c.properties.array(),
        c.system_properties.array(),
        pa.array(c.groups, pa.string()),
        pa.array(c.hubs, pa.string()),
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
    table = to_arrow(batches)
    _name_arrow_utils(spark)
    return spark.createDataFrame(table)


def _name_arrow_utils(spark: Any) -> None:
    """Import :data:`_ARROW_UTILS` by its short name in a classic session's Py4J view, once per view."""
    try:
        jvm = spark._jvm  # a classic session's view; Spark Connect sessions have none and raise
    except Exception:
        return
    if jvm is None or jvm in _named:
        return
    from py4j.java_gateway import java_import  # type: ignore[import-untyped]

    java_import(jvm, _ARROW_UTILS)
    _named.add(jvm)
