"""rxhubs operators, RxPY style: plain functions ``Observable -> Observable`` to use in ``pipe(...)``.

Example:
    >>> import rxhubs
    >>> from rxhubs import operators as hops
    >>> callable(hops.checkpoint(rxhubs.stores.InMemoryCheckpointStore(), max_interval=5.0))
    True
"""

from __future__ import annotations

from rxhubs.operators._checkpoint import checkpoint

__all__ = ["checkpoint"]
