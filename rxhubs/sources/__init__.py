"""Sources: one partition as an Observable of batches, and the balancing Observable of partition streams."""

from __future__ import annotations

from rxhubs.sources._partition import DEFAULTS, partition_batches
from rxhubs.sources._partitions import PartitionStream, consume, partitions
from rxhubs.sources._retry import Backoff

__all__ = ["DEFAULTS", "Backoff", "PartitionStream", "consume", "partition_batches", "partitions"]
