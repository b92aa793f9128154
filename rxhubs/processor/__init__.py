"""The seeds' processor form: :class:`EventProcessor` with a :class:`PartitionProcessor` per owned partition.

For users of the Azure SDKs' event processors (``EventHubConsumerClient.receive_batch`` with callbacks, the
.NET ``EventProcessor<T>``): start / stop / is_running and per-partition callbacks, over the same engine as
:func:`rxhubs.consume`. See ``docs/migration.md``.
"""

from __future__ import annotations

from rxhubs.processor._event_processor import EventProcessor
from rxhubs.processor._partition_processor import PartitionProcessor

__all__ = ["EventProcessor", "PartitionProcessor"]
