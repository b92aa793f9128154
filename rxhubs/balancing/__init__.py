"""Cooperative load balancing: the pure planner, and the loop that applies it through a checkpoint store.

:func:`plan` decides, from the ownership records, what one consumer claims, renews, steals and hands over;
:class:`BalancingLoop` runs it every load-balancing interval; :func:`rxhubs.partitions` turns the outcome
into partition streams. See ``docs/balancing.md``.

Example:
    >>> from rxhubs.balancing import plan
    >>> [o.partition_id for o in plan([], ["0", "1"], "me", 0.0).claim]
    ['0', '1']
"""

from __future__ import annotations

from rxhubs.balancing._loop import BalancingLoop, LoopListener
from rxhubs.balancing._planner import (
    DEFAULT_EXPIRATION,
    DEFAULT_INTERVAL,
    PRESENCE_SUFFIX,
    BalancingSettings,
    Plan,
    Strategy,
    plan,
    presence_group,
)
from rxhubs.balancing._session import PartitionSession

__all__ = [
    "DEFAULT_EXPIRATION",
    "DEFAULT_INTERVAL",
    "PRESENCE_SUFFIX",
    "BalancingLoop",
    "BalancingSettings",
    "LoopListener",
    "PartitionSession",
    "Plan",
    "Strategy",
    "plan",
    "presence_group",
]
