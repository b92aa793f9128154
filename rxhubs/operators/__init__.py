"""rxhubs operators, RxPY style: plain functions ``Observable -> Observable`` to use in ``pipe(...)``.

* :func:`process`: work per batch (sync or async), in order per partition, failures kept to their partition;
* :func:`publish`: events to another hub, each batch passed on once the target acknowledged what it made;
* :func:`dead_letter`: an ``on_poison`` handler that publishes a failed batch with its error and position;
* :func:`checkpoint`: record, per partition, what passed through (put it after the work that must succeed);
* :func:`exactly_once`: write into a :class:`TransactionalSink` (a table that commits each partition's position
  with its rows), each event once.
* :func:`window` and :func:`scan_state`: event-time windows and keyed state, committed with the checkpoint.

Example:
    >>> import rxhubs
    >>> from rxhubs import operators as hops
    >>> callable(hops.checkpoint(rxhubs.stores.InMemoryCheckpointStore(), max_interval=5.0))
    True
"""

from __future__ import annotations

from rxhubs.operators._checkpoint import checkpoint
from rxhubs.operators._dead_letter import dead_letter
from rxhubs.operators._exactly_once import exactly_once
from rxhubs.operators._process import process
from rxhubs.operators._publish import OutgoingEvent, Publisher, publish
from rxhubs.operators._transactional import CommitResult, TransactionalSink, read_position
from rxhubs.state._scan_state import scan_state
from rxhubs.state._window import window

__all__ = [
    "CommitResult",
    "OutgoingEvent",
    "Publisher",
    "TransactionalSink",
    "checkpoint",
    "dead_letter",
    "exactly_once",
    "process",
    "publish",
    "read_position",
    "scan_state",
    "window",
]
