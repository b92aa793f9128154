"""Sending through azure-eventhub's aio producer: events into as few batches as fit, and a producer as a target."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from azure.eventhub import EventData
from azure.eventhub.aio import EventHubProducerClient

from rxhubs.errors import ConfigurationError
from rxhubs.transport._errors import translate_error
from rxhubs.transport._publisher import EventColumns, OutgoingEvent, check_routing

__all__ = ["OversizedEventError", "ProducerPublisher", "send_batches"]


class OversizedEventError(ConfigurationError):
    """An event larger than the hub's maximum message size; ``event`` is that event (nothing of it was sent).

    Example:
        >>> OversizedEventError("too large", OutgoingEvent(b"x")).event.body
        b'x'
    """

    def __init__(self, message: str, event: OutgoingEvent) -> None:
        super().__init__(message)
        self.event = event


async def send_batches(
    client: EventHubProducerClient,
    pending: list[OutgoingEvent] | EventColumns,
    partition_id: str | None,
    partition_key: str | None,
) -> None:
    """Send ``pending`` in order, in as few batches as fit the link's maximum message size.

    Each acknowledged batch's events are removed from ``pending`` at once, so a caller that retries after a
    failure resends only what was not acknowledged.

    Raises:
        ConfigurationError: An event larger than the hub's maximum message size (nothing of it was sent).
        Exception: Whatever the SDK raised (untranslated: the caller translates).
    """
    while pending:
        batch = await client.create_batch(partition_id=partition_id, partition_key=partition_key)
        count = 0
        for event in pending:
            data = EventData(event.body)
            if event.properties:
                data.properties = dict(event.properties)  # type: ignore[assignment]
            try:
                batch.add(data)
            except ValueError:
                if count == 0:
                    raise OversizedEventError(
                        f"an event of {len(event.body)} bytes is larger than the hub's maximum message size"
                        f" ({batch.max_size_in_bytes} bytes per batch)",
                        event,
                    ) from None
                break
            count += 1
        await client.send_batch(batch)
        del pending[:count]


class ProducerPublisher:
    """An azure-eventhub aio ``EventHubProducerClient`` as a :class:`~rxhubs.transport._publisher.Publisher`.

    The client's own retry settings (``retry_total`` ...) apply; its errors are translated to the rxhubs tree.
    The client stays the caller's: closing it is theirs.

    Example:
        >>> from azure.eventhub.aio import EventHubProducerClient
        >>> client = EventHubProducerClient.from_connection_string(  # doctest: +SKIP
        ...     "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=k;SharedAccessKey=s", eventhub_name="out")
        >>> ProducerPublisher(client).eventhub_name  # doctest: +SKIP
        'out'
    """

    def __init__(self, client: Any) -> None:
        self.client = client

    @property
    def eventhub_name(self) -> str:
        return str(getattr(self.client, "eventhub_name", "") or type(self.client).__name__)

    async def publish(
        self,
        events: Sequence[OutgoingEvent],
        *,
        partition_id: str | None = None,
        partition_key: str | None = None,
    ) -> None:
        check_routing(partition_id, partition_key)
        try:
            await send_batches(self.client, list(events), partition_id, partition_key)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            raise translate_error(exc, f"send to {self.eventhub_name!r}") from exc

    def __repr__(self) -> str:
        return f"ProducerPublisher({self.eventhub_name!r})"
