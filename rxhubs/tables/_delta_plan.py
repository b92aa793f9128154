"""How a commit's plan (:mod:`rxhubs.tables._plan`, shared by every table) maps onto a Delta table.

A partition's position is a Delta app transaction: app id :func:`app_id`, version = the sequence number.
The rows are the kept events in their batches, so the Arrow conversion sees each batch's context.
"""

from __future__ import annotations

from collections.abc import Sequence

from rxhubs._batch import EventBatch
from rxhubs._models import PartitionContext
from rxhubs.tables._plan import PartitionWrite, key_of

__all__ = ["APP_ID_PREFIX", "app_id", "kept_batches"]

#: The first part of every app id rxhubs writes into a Delta table's log.
APP_ID_PREFIX = "rxhubs"


def app_id(context: PartitionContext) -> str:
    """The Delta app id (``txn.appId``) that holds one partition's position in the table.

    ``rxhubs/{namespace}/{hub}/{consumer group}/{partition}``, names in lower case (Event Hubs names are
    case-insensitive; the checkpoint stores and the SQL positions table key them the same way).

    Example:
        >>> app_id(PartitionContext("NS.servicebus.windows.net", "Telemetry", "$Default", "3"))
        'rxhubs/ns.servicebus.windows.net/telemetry/$default/3'
    """
    return "/".join((APP_ID_PREFIX, *key_of(context)))


def kept_batches(writes: Sequence[PartitionWrite]) -> list[EventBatch]:
    """The events the plan keeps, as batches (each keeps its context), in order.

    Example:
        >>> import datetime as dt
        >>> from rxhubs import Event
        >>> from rxhubs.tables._plan import plan
        >>> t, ctx = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc), PartitionContext("ns", "hub", "$Default", "0")
        >>> b = EventBatch(ctx, tuple(Event(b"x", n, str(n), t) for n in range(98, 103)))
        >>> [[e.sequence_number for e in k] for k in kept_batches(plan([b, b], {ctx: 100}, lambda _: True))]
        [[101, 102]]
    """
    return [batch for write in writes for batch in write.batches]
