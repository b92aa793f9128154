"""Operating a consumer group: reset its positions, and serve its lag over HTTP for Prometheus and KEDA.

* :func:`reset_positions`: Kafka's ``--reset-offsets`` for Event Hubs (``rxhubs checkpoints reset``).

See ``docs/operations.md``.

Example:
    >>> from rxhubs.operate import reset_positions
    >>> callable(reset_positions)
    True
"""

from __future__ import annotations

from rxhubs.operate._reset import ResetPlan, ResetRow, reset_positions

__all__ = ["ResetPlan", "ResetRow", "reset_positions"]
