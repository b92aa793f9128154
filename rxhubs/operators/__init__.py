"""rxhubs operators, RxPY style: plain functions ``Observable -> Observable`` to use in ``pipe(...)``.

* :func:`process`: work per batch (sync or async), in order per partition, failures kept to their partition;
* :func:`checkpoint`: record, per partition, what passed through (put it after the work that must succeed).

Example:
    >>> import rxhubs
    >>> from rxhubs import operators as hops
    >>> callable(hops.checkpoint(rxhubs.stores.InMemoryCheckpointStore(), max_interval=5.0))
    True
"""

from __future__ import annotations

from rxhubs.operators._checkpoint import checkpoint
from rxhubs.operators._process import process

__all__ = ["checkpoint", "process"]
