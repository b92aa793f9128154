"""rxhubs: consume Azure Event Hubs with reactive pipelines.

Each owned partition is an Observable of :class:`EventBatch` pulled from a :class:`PartitionReceiver`;
:func:`partitions` adds and removes partition streams as ownership moves between consumers; the
:func:`rxhubs.operators.checkpoint` operator records progress after the work that must succeed first.

Example:
    >>> import rxhubs
    >>> from rxhubs import operators as hops
    >>> hub = rxhubs.testing.InMemoryEventHub(partition_count=2)
    >>> store = rxhubs.stores.InMemoryCheckpointStore()
    >>> pipeline = rxhubs.consume(hub, "$Default", store).pipe(hops.checkpoint(store))  # doctest: +SKIP
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from rxhubs import errors
from rxhubs.errors import RxHubsError

if TYPE_CHECKING:
    from rxhubs import emulator, operators, spark, stores, tables, testing, windows
    from rxhubs._batch import Ack, EventBatch
    from rxhubs._models import (
        Checkpoint,
        CloseReason,
        ErrorContext,
        Event,
        EventHubProperties,
        LastEnqueuedEventProperties,
        Ownership,
        PartitionContext,
        PartitionProperties,
        Position,
    )
    from rxhubs._retry import Backoff
    from rxhubs._run import arun, run
    from rxhubs._shutdown import Shutdown
    from rxhubs._workers import WorkerContext, WorkerReport, WorkersSummary, run_workers
    from rxhubs.balancing import PartitionStream, consume, partitions
    from rxhubs.processor import EventProcessor, PartitionProcessor
    from rxhubs.sources import partition_batches
    from rxhubs.transport import EventHub, Hub, PartitionReceiver

__version__ = "0.1.0"

__all__ = [
    "Ack",
    "Backoff",
    "Checkpoint",
    "CloseReason",
    "ErrorContext",
    "Event",
    "EventBatch",
    "EventHub",
    "EventHubProperties",
    "EventProcessor",
    "Hub",
    "LastEnqueuedEventProperties",
    "Ownership",
    "PartitionContext",
    "PartitionProcessor",
    "PartitionProperties",
    "PartitionReceiver",
    "PartitionStream",
    "Position",
    "RxHubsError",
    "Shutdown",
    "WorkerContext",
    "WorkerReport",
    "WorkersSummary",
    "__version__",
    "arun",
    "consume",
    "emulator",
    "errors",
    "operators",
    "partition_batches",
    "partitions",
    "run",
    "run_workers",
    "spark",
    "stores",
    "tables",
    "testing",
    "windows",
]

# Every public name loads on first use: a process that needs one corner of rxhubs (a Spark Python worker runs the
# data source, which needs neither reactivex nor the streams) imports only that corner, and `import rxhubs` is
# cheap. `from rxhubs import Event` and `rxhubs.Event` both go through __getattr__ below.
_LAZY_MODULES = {"emulator", "operators", "spark", "stores", "tables", "testing", "windows"}
_LAZY_ATTRS = {
    "Ack": "rxhubs._batch",
    "EventBatch": "rxhubs._batch",
    "Checkpoint": "rxhubs._models",
    "CloseReason": "rxhubs._models",
    "ErrorContext": "rxhubs._models",
    "Event": "rxhubs._models",
    "EventHubProperties": "rxhubs._models",
    "LastEnqueuedEventProperties": "rxhubs._models",
    "Ownership": "rxhubs._models",
    "PartitionContext": "rxhubs._models",
    "PartitionProperties": "rxhubs._models",
    "Position": "rxhubs._models",
    "Backoff": "rxhubs._retry",
    "arun": "rxhubs._run",
    "run": "rxhubs._run",
    "Shutdown": "rxhubs._shutdown",
    "partition_batches": "rxhubs.sources",
    "EventHub": "rxhubs.transport",
    "Hub": "rxhubs.transport",
    "PartitionReceiver": "rxhubs.transport",
    "EventProcessor": "rxhubs.processor",
    "PartitionProcessor": "rxhubs.processor",
    "PartitionStream": "rxhubs.balancing",
    "consume": "rxhubs.balancing",
    "partitions": "rxhubs.balancing",
    "WorkerContext": "rxhubs._workers",
    "WorkerReport": "rxhubs._workers",
    "WorkersSummary": "rxhubs._workers",
    "run_workers": "rxhubs._workers",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY_MODULES:
        return importlib.import_module(f"rxhubs.{name}")  # (the import binds it here itself)
    if name in _LAZY_ATTRS:
        value = globals()[name] = getattr(importlib.import_module(_LAZY_ATTRS[name]), name)  # kept: looked up once
        return value
    raise AttributeError(f"module 'rxhubs' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
