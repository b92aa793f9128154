"""Cooperative load balancing: partition streams that come and go as ownership moves between consumers.

Everything about ownership is here, in the order a partition meets it:

* :func:`plan` (``_planner``) decides, purely, what one consumer claims, renews, steals and hands over;
* :class:`BalancingLoop` (``_loop``) runs the plan every load-balancing interval through the checkpoint store:
  **this is where ownership is claimed, renewed and released**;
* :class:`PartitionSession` (``_session``) is one period of ownership of one partition, with its state
  diagram (claim -> read -> hand over -> release);
* :class:`PartitionStream` (``_stream``) reads a partition while its session lasts;
* :func:`partitions` and :func:`consume` (``_partitions``, ``_consumer``) are the public Observables, configured
  by one validated :class:`ConsumerSettings` (``_settings``).

See ``docs/balancing.md``.

Example:
    >>> from rxhubs.balancing import plan
    >>> [o.partition_id for o in plan([], ["0", "1"], "me", 0.0).claim]
    ['0', '1']
"""

from __future__ import annotations

from rxhubs.balancing._loop import BalancingLoop, LoopListener
from rxhubs.balancing._partitions import consume, partitions
from rxhubs.balancing._planner import PRESENCE_SUFFIX, Plan, plan, presence_group
from rxhubs.balancing._session import PartitionSession, SessionState
from rxhubs.balancing._settings import ConsumerOptions, ConsumerSettings
from rxhubs.balancing._stream import PartitionStream
from rxhubs.balancing._timing import DEFAULT_EXPIRATION, DEFAULT_INTERVAL, BalancingSettings, Strategy

__all__ = [
    "DEFAULT_EXPIRATION",
    "DEFAULT_INTERVAL",
    "PRESENCE_SUFFIX",
    "BalancingLoop",
    "BalancingSettings",
    "ConsumerOptions",
    "ConsumerSettings",
    "LoopListener",
    "PartitionSession",
    "PartitionStream",
    "Plan",
    "SessionState",
    "Strategy",
    "consume",
    "partitions",
    "plan",
    "presence_group",
]
