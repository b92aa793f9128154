"""What the Azure receiver takes from the SDK's terms and state: positions and the link's delivery tags (private).

``sdk_position`` and ``high_water_of`` put a :class:`~rxhubs.Position` in the SDK's terms for
:class:`~rxhubs.transport._receiver.AzurePartitionReceiver`; ``sdk_delivery_tags`` and ``forget_delivery_tags``
reach into the SDK link's set of delivery tags, a workaround for its growth; ``stop_sdk_task`` stops the SDK's receive
task without waiting for its once-a-second poll of the partitions it stopped.
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import logging
from collections.abc import Callable
from typing import Any

from rxhubs._models import Position

__all__ = [
    "CLOSE_STEP_TIMEOUT", "forget_delivery_tags", "high_water_of", "sdk_delivery_tags", "sdk_position", "stop_sdk_task"
]

_log = logging.getLogger("rxhubs.transport.azure")

#: Upper bound on each step of closing a receiver (normally milliseconds).
CLOSE_STEP_TIMEOUT = 5.0


def sdk_position(start: Position) -> tuple[str | int | _dt.datetime, bool]:
    """The SDK's ``starting_position`` and ``starting_position_inclusive`` for a :class:`Position`."""
    if start.kind == "earliest":
        return "-1", False
    if start.kind == "latest":
        return "@latest", False
    assert isinstance(start.value, str | int | _dt.datetime)  # checked by Position
    return start.value, start.inclusive


def high_water_of(start: Position) -> int:
    """Events at or below this sequence number are never handed out (-1: none filtered)."""
    if start.kind == "sequence_number":
        assert isinstance(start.value, int)
        return start.value - 1 if start.inclusive else start.value
    return -1


def sdk_delivery_tags(client: Any, consumer_group: str, partition_id: str) -> set[Any] | None:
    """The SDK receiver link's set of delivery tags awaiting a disposition, or None if it cannot be found.

    A workaround's only way in: azure-eventhub 5.15's ``ReceiverLink`` adds every delivery's tag to this set
    and removes it only when it sends a disposition, which an Event Hubs receiver never does, so the set
    grows by about 60 bytes per event, forever (+97% RSS in a 10-minute soak, for the raw SDK too).
    """
    try:
        processor = client._event_processors[(consumer_group, partition_id)]
        link = processor._consumers[partition_id]._handler._link
        tags = link._received_delivery_tags
    except (AttributeError, KeyError, TypeError):
        return None
    return tags if isinstance(tags, set) else None


def forget_delivery_tags(client: Any, consumer_group: str, partition_id: str) -> None:
    """Empty the SDK's delivery-tag set (safe: no disposition is ever sent for these deliveries)."""
    tags = sdk_delivery_tags(client, consumer_group, partition_id)
    if tags:
        tags.clear()


async def stop_sdk_task(
    task: asyncio.Task[None] | None,
    link_closed: asyncio.Event,
    close_task: Callable[[], asyncio.Task[Any] | None],
    what: str,
) -> None:
    """Cancel the SDK's receive ``task`` and wait until its consumer (the AMQP link) is closed.

    Cancelling makes the SDK cancel its partition task, close the partition's consumer (then
    ``on_partition_close`` runs: ``link_closed`` is set, and ``close_task()`` is the task that ran it) and poll once
    a second until that partition is gone. Once the consumer is closed, a second cancel ends that poll at once; the
    client's ``close()`` then has nothing left to wait for. Each step is bounded (:data:`CLOSE_STEP_TIMEOUT`), so a
    misbehaving SDK cannot hang ``close()``.
    """
    if task is None or task.done():
        return
    task.cancel()
    closed = asyncio.ensure_future(link_closed.wait())
    try:
        await asyncio.wait({task, closed}, timeout=CLOSE_STEP_TIMEOUT, return_when=asyncio.FIRST_COMPLETED)
    finally:
        closed.cancel()
    closing = close_task()
    if closing is not None and closing is not asyncio.current_task() and not closing.done():
        await asyncio.wait({closing}, timeout=CLOSE_STEP_TIMEOUT)
    if not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=CLOSE_STEP_TIMEOUT)
    if task.done() and not task.cancelled() and task.exception() is not None:
        _log.debug("%s: SDK task ended with %r", what, task.exception())
