"""The ``eventhubs`` data source: what Spark finds by name, for reads and writes, batch and streaming.

- ``spark.read.format("eventhubs")``: :class:`~rxhubs.spark._batch.EventHubsBatchReader`;
- ``spark.readStream.format("eventhubs")``: :class:`~rxhubs.spark._source.EventHubsStreamReader`;
- ``df.write.format("eventhubs")``: :class:`~rxhubs.spark._write.EventHubsWriter`;
- ``df.writeStream.format("eventhubs")``: :class:`~rxhubs.spark._write.EventHubsStreamWriter`.

The readers and writers are imported when Spark asks for one, so this module stays light.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource

from rxhubs.spark._schema import SCHEMA

if TYPE_CHECKING:
    from rxhubs.spark._batch import EventHubsBatchReader
    from rxhubs.spark._source import EventHubsStreamReader
    from rxhubs.spark._write import EventHubsStreamWriter, EventHubsWriter

__all__ = ["EventHubsDataSource", "RxHubsDataSource", "register_source"]

_log = logging.getLogger("rxhubs.spark.source")


class EventHubsDataSource(DataSource):
    """The ``eventhubs`` data source: ``spark.read``, ``spark.readStream``, ``df.write``, ``df.writeStream``.

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

    def reader(self, schema: Any) -> EventHubsBatchReader:
        """A batch reader over this source's options, start and end (checked here, cheaply: no I/O)."""
        from rxhubs.spark._batch import EventHubsBatchReader

        return EventHubsBatchReader(self.options)

    def streamReader(self, schema: Any) -> EventHubsStreamReader:  # noqa: N802 - Spark's name
        """An :class:`EventHubsStreamReader` over this source's options (checked here, cheaply: no I/O)."""
        from rxhubs.spark._source import EventHubsStreamReader

        return EventHubsStreamReader(self.options)

    def writer(self, schema: Any, overwrite: bool) -> EventHubsWriter:
        """A batch writer of ``schema``'s rows (columns and options checked here; ``overwrite`` refused)."""
        from rxhubs.spark._write import EventHubsWriter

        return EventHubsWriter(self.options, schema, overwrite)

    def streamWriter(self, schema: Any, overwrite: bool) -> EventHubsStreamWriter:  # noqa: N802 - Spark's name
        """A streaming writer of ``schema``'s rows (columns and options checked here; ``overwrite`` refused)."""
        from rxhubs.spark._write import EventHubsStreamWriter

        return EventHubsStreamWriter(self.options, schema, overwrite)

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
