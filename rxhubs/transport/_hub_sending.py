"""The hub's sends: :meth:`~rxhubs.EventHub.send` and :meth:`~rxhubs.EventHub.publish` (private).

Events go in as few batches as fit, natively encoded and written (``rxhubs/transport/_native_send.py``; else
azure-eventhub's ``send_batch``, ``_producer.py``), through the management calls' retry loop, resending only what
was not acknowledged.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from rxhubs.transport._hub_management import _ManagementCalls
from rxhubs.transport._native_send import Senders
from rxhubs.transport._publisher import EventColumns, OutgoingEvent, check_routing, outgoing_events

__all__: list[str] = []


class _Sends(_ManagementCalls):
    """Sending events, for :class:`~rxhubs.EventHub`."""

    _senders: Senders  # the native send path's links (set by EventHub)

    async def send(
        self,
        bodies: Iterable[bytes | str],
        partition_id: str | None = None,
        partition_key: str | None = None,
        properties: Mapping[str, Any] | None = None,
    ) -> None:
        """Send events (a convenience for demos and tests; in a pipeline, ``hops.publish`` sends with :meth:`publish`).

        Events go in as few batches as fit, in order. Without ``partition_id`` or ``partition_key`` the
        service picks partitions round robin.

        Args:
            bodies: Event bodies (str is sent as UTF-8).
            partition_id: Send to this partition.
            partition_key: Or let the service hash this key to a partition.
            properties: Application properties set on every event.

        Raises:
            ConfigurationError: Bad arguments, or an event too large for the hub.
            NotFoundError: Unknown hub or partition.

        Example:
            >>> async def seed(hub):  # doctest: +SKIP
            ...     await hub.send([b'{"t": 21.5}', b'{"t": 21.7}'], partition_id="0")
        """
        events = outgoing_events(bodies, properties)
        check_routing(partition_id, partition_key)
        if partition_id is not None:
            await self._check_partition(partition_id)
        await self._send(events, partition_id, partition_key)

    async def publish(
        self,
        events: Sequence[OutgoingEvent],
        *,
        partition_id: str | None = None,
        partition_key: str | None = None,
    ) -> None:
        """Send events, each with its own properties, in order (what :func:`rxhubs.operators.publish` calls).

        ``events`` may be an :class:`~rxhubs.transport._publisher.EventColumns` (bodies and properties as columns:
        the native send path encodes them without an object per event).

        Events go in as few batches as fit the hub's maximum message size, to ``partition_id``, or with
        ``partition_key``, or (neither) where the service puts them; retriable failures are retried with the
        hub's retry settings, resending only what was not acknowledged. Raises ``ConfigurationError`` (bad
        routing, an event over the maximum size), ``NotFoundError`` or ``TransportError`` (after the retries).

        Example:
            >>> from rxhubs.transport._publisher import OutgoingEvent
            >>> async def forward(hub):  # doctest: +SKIP
            ...     await hub.publish([OutgoingEvent(b"x", {"source": "a"})], partition_key="device-7")
        """
        check_routing(partition_id, partition_key)
        if partition_id is not None:
            await self._check_partition(partition_id)
        await self._send(events.copy() if isinstance(events, EventColumns) else list(events), partition_id,
                         partition_key)

    async def _send(
        self, pending: list[OutgoingEvent] | EventColumns, partition_id: str | None, partition_key: str | None
    ) -> None:
        where = f"partition {partition_id!r}" if partition_id is not None else f"{self._eventhub_name!r}"
        if pending:  # acknowledged batches leave `pending`: a retry resends only the rest
            await self._retrying(
                f"send to {where}", lambda client: self._senders.send(client, pending, partition_id, partition_key)
            )
