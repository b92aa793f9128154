"""Sources: one partition as an Observable of event batches, pulled from a receiver with backpressure.

The balancing Observable of partition streams (:func:`rxhubs.partitions`, :func:`rxhubs.consume`) lives in
:mod:`rxhubs.balancing`, which builds on :func:`partition_batches`. :class:`Capture` reads a hub's Event Hubs
Capture files; ``consume(..., backfill=Capture(...))`` reads them before the hub's retention (``docs/history.md``).
"""

from __future__ import annotations

from rxhubs._retry import Backoff
from rxhubs.sources._backfill import BackfillHub
from rxhubs.sources._batches import partition_batches
from rxhubs.sources._capture import Capture
from rxhubs.sources._settings import DEFAULTS, ReadSettings

__all__ = ["DEFAULTS", "BackfillHub", "Backoff", "Capture", "ReadSettings", "partition_batches"]
