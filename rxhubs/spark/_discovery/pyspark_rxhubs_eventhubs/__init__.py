"""Spark finds ``format("eventhubs")`` here by itself: the rxhubs Event Hubs source, no registration call.

PySpark imports every top-level ``pyspark_*`` module and registers its ``DefaultSource`` the first time a
session needs a Python data source. The source itself is :class:`rxhubs.spark.EventHubsDataSource`
(``docs/spark.md``); this module only names it. The Scala connector (azure-event-hubs-spark) also calls itself
``eventhubs``; when its jar is on the classpath, Spark prefers it for that name, and ``format("rxhubs")``
still reaches this source.

It never raises: a failure here would make Spark skip the Python data sources of every other package too,
so it reports on stderr and defines nothing instead.
"""

from __future__ import annotations

import sys

try:
    from rxhubs.spark._datasource import EventHubsDataSource as DefaultSource
except Exception as exc:  # pragma: no cover - a broken install: keep Spark's lookup of the others working
    print(f"rxhubs: Spark data source 'eventhubs' unavailable: {type(exc).__name__}: {exc}", file=sys.stderr)
else:
    __all__ = ["DefaultSource"]
