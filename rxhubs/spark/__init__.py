"""Spark: write event batches through Spark writers in micro-batches, emitting them only after the write.

Importing this package does not import pyspark or pyarrow: they load on first use, so ``import rxhubs``
stays fast and works without the ``spark`` extra (``pip install rxhubs[spark]``).

- :func:`write`: the sink operator (micro-batch -> DataFrame -> ``writer(df)`` -> emit downstream).
- :func:`to_dataframe`, :func:`to_arrow`: event batches as a DataFrame / ``pyarrow.Table`` with :data:`SCHEMA`.
- :data:`SCHEMA`: the Spark Event Hubs connector's columns plus ``consumerGroup`` and ``eventHubName``
  (``body binary, partition string, offset string, sequenceNumber long, enqueuedTime timestamp, publisher
  string, partitionKey string, properties map<string,string>, systemProperties map<string,string>,
  consumerGroup string, eventHubName string``); :func:`property_to_str` says how property values become text.
- :class:`EventHubsDataSource`, :class:`RxHubsDataSource`: the Structured Streaming source,
  ``spark.readStream.format("eventhubs")`` or ``format("rxhubs")``. Spark (>= 4.0) finds both names by
  itself once ``rxhubs[spark]`` is installed; :func:`register_source` registers them by hand where that
  discovery cannot work (an editable install). Importing them imports pyspark.
- :func:`local_session`, :func:`get_or_create_session`: a local session that works out of the box, or yours;
  :func:`worker_python`: the Python to give a session you build yourself, so that a streaming query starts on
  a loaded machine.

Example:
    >>> import rxhubs.spark
    >>> rxhubs.spark.SCHEMA.split(", ")[:2]
    ['body binary', 'partition string']
    >>> sink = rxhubs.spark.write(lambda df: df.write.mode("append").parquet("out/"))
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from rxhubs.spark._schema import COLUMNS, SCHEMA, arrow_schema, property_to_str

if TYPE_CHECKING:
    from rxhubs.spark._arrow import to_arrow, to_dataframe
    from rxhubs.spark._datasource import EventHubsDataSource, RxHubsDataSource, register_source
    from rxhubs.spark._session import LOCAL_CONF, get_or_create_session, local_session, worker_python
    from rxhubs.spark._sink import write

__all__ = [
    "COLUMNS",
    "EventHubsDataSource",
    "LOCAL_CONF",
    "RxHubsDataSource",
    "SCHEMA",
    "arrow_schema",
    "get_or_create_session",
    "local_session",
    "property_to_str",
    "register_source",
    "to_arrow",
    "to_dataframe",
    "worker_python",
    "write",
]


# Loaded on first use: a Spark Python worker running the data source (rxhubs.spark._source, ._arrow_read) imports
# this package first, and needs neither the Rx sink (reactivex) nor the conversions of events to Arrow.
_LAZY = {
    "EventHubsDataSource": "rxhubs.spark._datasource",  # subclasses pyspark's classes: imports pyspark
    "RxHubsDataSource": "rxhubs.spark._datasource",
    "register_source": "rxhubs.spark._datasource",
    "to_arrow": "rxhubs.spark._arrow",
    "to_dataframe": "rxhubs.spark._arrow",
    "LOCAL_CONF": "rxhubs.spark._session",
    "get_or_create_session": "rxhubs.spark._session",
    "local_session": "rxhubs.spark._session",
    "worker_python": "rxhubs.spark._session",
    "write": "rxhubs.spark._sink",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = globals()[name] = getattr(importlib.import_module(_LAZY[name]), name)  # kept: looked up once
        return value
    raise AttributeError(f"module 'rxhubs.spark' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(__all__) | set(globals()))
