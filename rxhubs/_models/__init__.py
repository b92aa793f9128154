"""Domain records: frozen dataclasses with the field names Azure uses.

Events and positions flow through pipelines (batches of events: :mod:`rxhubs._batch`): ``_events``;
checkpoints and ownership records live in stores: ``_records``.
"""

from __future__ import annotations

from rxhubs._models._events import (
    CloseReason,
    ErrorContext,
    Event,
    EventHubProperties,
    LastEnqueuedEventProperties,
    PartitionContext,
    PartitionProperties,
    Position,
    is_offset,
)
from rxhubs._models._records import Checkpoint, Ownership

__all__ = [
    "Checkpoint",
    "CloseReason",
    "ErrorContext",
    "Event",
    "EventHubProperties",
    "LastEnqueuedEventProperties",
    "Ownership",
    "PartitionContext",
    "PartitionProperties",
    "Position",
    "is_offset",
]
