"""Spark finds ``format("rxhubs")`` here by itself: the rxhubs Event Hubs source, no registration call.

PySpark imports every top-level ``pyspark_*`` module and registers its ``DefaultSource`` the first time a
session needs a Python data source. The source itself is :class:`rxhubs.spark.RxHubsDataSource`
(``docs/spark.md``); this module only names it. It never raises: a failure here would make Spark skip the
Python data sources of every other package too, so it reports on stderr and defines nothing instead.
"""

from __future__ import annotations

import sys

try:
    from rxhubs.spark._datasource import RxHubsDataSource as DefaultSource
except Exception as exc:  # pragma: no cover - a broken install: keep Spark's lookup of the others working
    print(f"rxhubs: Spark data source 'rxhubs' unavailable: {type(exc).__name__}: {exc}", file=sys.stderr)
else:
    __all__ = ["DefaultSource"]
