"""Tables written exactly once: transactional sinks for :func:`rxhubs.operators.exactly_once`.

Each sink keeps, next to the rows, every partition's position (the sequence number of its last event in the
table) and changes both in one atomic commit; read with ``rxhubs.consume(..., positions=sink)`` to resume right
after the table's position. Rows have the Spark Event Hubs connector's columns (:data:`COLUMNS`).

* :class:`DeltaSink`: a Delta Lake table through the ``deltalake`` package (``pip install 'rxhubs[delta]'``;
  importing this package does not import deltalake);
* :class:`SqlSink`: any DB-API 2 connection; :class:`SqliteSink` / :func:`sqlite` on a file; :func:`postgresql`;
* :class:`InMemoryTable`: in memory, for tests;
* :func:`sink_for`: the table a command-line spec names (``sqlite:PATH``, ``postgresql://...``, ``delta:PATH``);
* :func:`read_delta`: a Delta table's rows as a ``pyarrow.Table``, without the abort at exit that
  ``DeltaTable.to_pyarrow_table()`` can cause.

See ``docs/exactly-once.md``.

Example:
    >>> from rxhubs import operators as hops
    >>> isinstance(InMemoryTable(), hops.TransactionalSink)
    True
"""

from __future__ import annotations

from rxhubs.tables._delta import DeltaSink
from rxhubs.tables._delta_read import read_delta
from rxhubs.tables._memory import InMemoryTable
from rxhubs.tables._postgres import postgresql
from rxhubs.tables._rows import COLUMNS
from rxhubs.tables._spec import sink_for
from rxhubs.tables._sql import SqlSink
from rxhubs.tables._sqlite import SqliteSink, sqlite

__all__ = ["COLUMNS", "DeltaSink", "InMemoryTable", "SqlSink", "SqliteSink", "postgresql", "read_delta", "sink_for",
           "sqlite"]
