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

Spark turns the table into its rows either in the driver at ``createDataFrame`` (a local relation, below
``spark.sql.execution.arrow.localRelationThreshold``: ``ArrowConverters.toDataFrame`` reads that conf at each
call) or in the tasks of the jobs that read the DataFrame (an RDD of the Arrow batches); ``local=False`` takes
the second by setting the threshold to 0 around the call.
"""

from __future__ import annotations

import threading
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
#: Spark builds a local relation from an Arrow table at most this many bytes large, else an RDD of its batches.
_THRESHOLD = "spark.sql.execution.arrow.localRelationThreshold"
#: At most this many rows per Arrow batch, so per RDD partition (pyspark cuts the table at ``createDataFrame``).
_BATCH_ROWS = "spark.sql.execution.arrow.maxRecordsPerBatch"
#: rxhubs' own conversions take turns around the session conf they set and restore.
_conf_lock = threading.Lock()


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


def to_dataframe(spark: Any, batches: Iterable[EventBatch] | EventBatch, *, local: bool = True) -> Any:
    """The events of ``batches`` as a Spark DataFrame with :data:`~rxhubs.spark.SCHEMA`, built through Arrow.

    ``enqueuedTime`` holds UTC instants (Spark ``timestamp``); they display in the session's time zone
    (:func:`~rxhubs.spark.local_session` sets UTC). Works with classic and Spark Connect sessions.

    ``local`` chooses where Spark turns the Arrow columns into its rows (classic sessions; the rows are the same
    either way, only the plan differs):

    - ``True`` (default): Spark's own choice. Below ``spark.sql.execution.arrow.localRelationThreshold``
      (48 MiB by default) Spark decodes the table in the driver, at this call, single-threaded, into a local
      relation: reading the DataFrame many times costs no decoding again.
    - ``False``: always an RDD of the table's Arrow batches, one partition per batch of at most
      ``spark.sql.execution.arrow.maxRecordsPerBatch`` rows (10,000 by default; the batches are cut evenly,
      so 10,200 events make two tasks of 5,100), decoded in the tasks of each job that reads the DataFrame,
      in parallel. This call returns sooner; every read decodes again. For a DataFrame written once, as
      :func:`~rxhubs.spark.write` does. A write then makes one file per batch.

    ``False`` sets the session's ``localRelationThreshold`` to 0 around Spark's ``createDataFrame`` and then
    restores it exactly (unset again if it was unset), even if ``createDataFrame`` fails; rxhubs' own calls
    take turns, but a ``createDataFrame`` of another thread in the same session meanwhile may take the RDD
    plan too (same rows, another plan). An empty table is always a local relation. On a Spark Connect session
    ``local`` is ignored: the server decides.

    Args:
        spark: A ``SparkSession``.
        batches: Event batches (one :class:`~rxhubs.EventBatch` is accepted too); empty ones add no rows.
        local: ``True``: Spark's local relation (decoded here, cheap to read again); ``False``: decoded in
            the tasks of the jobs that read the DataFrame (for a DataFrame read once).

    Returns:
        A ``pyspark.sql.DataFrame``.

    Example:
        >>> df = to_dataframe(spark, batches)  # doctest: +SKIP
        >>> df.select("partition", "sequenceNumber").orderBy("sequenceNumber").first()  # doctest: +SKIP
        Row(partition='0', sequenceNumber=0)
        >>> once = to_dataframe(spark, batches, local=False)  # doctest: +SKIP
        >>> once.write.mode("append").parquet("out/")  # decoded in the write's tasks  # doctest: +SKIP
    """
    table = to_arrow(batches)
    if not _name_arrow_utils(spark):  # Spark Connect: the server decides
        return spark.createDataFrame(table)
    with _conf_lock:
        if local:
            return spark.createDataFrame(table)
        return _in_tasks(spark, table)


def _in_tasks(spark: Any, table: Any) -> Any:
    """``createDataFrame(table)`` as an RDD of evenly cut Arrow batches; the threshold restored as found."""
    import pyarrow as pa

    rows = table.num_rows
    most = int(spark.conf.get(_BATCH_ROWS))
    if most > 0 and rows > most:  # pyspark would cut 10,200 rows into 10,000 and 200: cut 5,100 and 5,100
        pieces = -(-rows // most)
        table = pa.Table.from_batches(table.to_batches(max_chunksize=-(-rows // pieces)))
    before = spark.conf.get(_THRESHOLD, None)
    spark.conf.set(_THRESHOLD, "0")
    try:
        return spark.createDataFrame(table)
    finally:
        if before is None:
            spark.conf.unset(_THRESHOLD)
        else:
            spark.conf.set(_THRESHOLD, before)


def _name_arrow_utils(spark: Any) -> bool:
    """Import :data:`_ARROW_UTILS` by its short name in a classic session's Py4J view, once per view.

    Returns whether ``spark`` is a classic session (False for Spark Connect).
    """
    try:
        jvm = spark._jvm  # a classic session's view; Spark Connect sessions have none and raise
    except Exception:
        return False
    if jvm is None:
        return False
    if jvm in _named:
        return True
    from py4j.java_gateway import java_import  # type: ignore[import-untyped]

    java_import(jvm, _ARROW_UTILS)
    _named.add(jvm)
    return True
