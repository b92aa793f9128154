"""Operating a consumer group: reset its positions, and serve its lag over HTTP for Prometheus and KEDA.

* :func:`reset_positions`: Kafka's ``--reset-offsets`` for Event Hubs (``rxhubs checkpoints reset``);
* :class:`LagServer`: a group's lag per partition over HTTP, in Prometheus text format and as JSON for KEDA's
  ``metrics-api`` scaler (``rxhubs consume --lag-endpoint``, ``run_workers(..., lag=...)``);
* :func:`group_lag`: the same figures, as :class:`PartitionLag` rows.

See ``docs/operations.md``.

Example:
    >>> from rxhubs.operate import reset_positions
    >>> callable(reset_positions)
    True
"""

from __future__ import annotations

from rxhubs.operate._lag import PartitionLag, group_lag
from rxhubs.operate._lag_server import LagServer
from rxhubs.operate._reset import ResetPlan, ResetRow, reset_positions

__all__ = ["LagServer", "PartitionLag", "ResetPlan", "ResetRow", "group_lag", "reset_positions"]
