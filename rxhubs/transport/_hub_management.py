"""The hub's management calls: properties of the hub and its partitions, with the hub's retries (private).

:class:`_ManagementCalls` is the part of :class:`~rxhubs.EventHub` that asks the service about the hub over the
producer client's management link: :meth:`get_properties`, :meth:`get_partition_ids`,
:meth:`get_partition_properties`, the partition check that receivers and sends make first, and the retry loop
that management calls and sends share (each attempt bounded by ``management_timeout``; a call whose caller gave
up is left to :class:`~rxhubs.transport._orphans.Orphans`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from azure.eventhub.aio import EventHubProducerClient

from rxhubs._models import EventHubProperties, PartitionProperties
from rxhubs.errors import ConfigurationError, NotFoundError, TransportError
from rxhubs.transport._errors import translate_error
from rxhubs.transport._liveness import bounded
from rxhubs.transport._management_link import ManagementLink, eventhub_properties, partition_properties

if TYPE_CHECKING:
    from rxhubs.transport._clients import SdkClients
    from rxhubs.transport._liveness import Liveness
    from rxhubs.transport._orphans import Orphans

__all__: list[str] = []

_log = logging.getLogger("rxhubs.transport.azure")
_T = TypeVar("_T")


class _ManagementCalls:
    """Management calls and the retry loop of :class:`~rxhubs.EventHub` (its state is set by ``EventHub._setup``)."""

    _eventhub_name: str
    _closed: bool
    _clients: SdkClients
    _liveness: Liveness
    _secrets: tuple[str, ...]
    _retry_total: int
    _backoff_factor: float
    _backoff_max: float
    _fixed_backoff: bool
    _producer: EventHubProducerClient | None
    _retired: list[EventHubProducerClient]
    _partition_ids: tuple[str, ...] | None
    _ids_lock: asyncio.Lock
    _orphans: Orphans
    #: A management link kept open across calls (the Spark driver sets one: ``_management_link.py``); None: each
    #: call is the SDK's own, on a connection of its own.
    _management_link: ManagementLink | None

    def _producer_client(self) -> EventHubProducerClient:
        if self._closed:
            raise TransportError(f"{self!r} is closed", retriable=False)
        if self._producer is None:
            self._producer = self._clients.producer()
        return self._producer

    async def _retrying(
        self,
        what: str,
        operation: Callable[[EventHubProducerClient], Coroutine[Any, Any, _T]],
        timeout: float | None = None,
    ) -> _T:
        """Run ``operation`` with the hub's retries; each attempt bounded by ``timeout`` seconds (None: not)."""
        attempt = 0
        while True:
            client = self._producer_client()
            try:  # a management call opens its own connection: a retry does not reuse a silent one
                return await (operation(client) if timeout is None else bounded(operation(client), timeout, what))
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                error = translate_error(exc, what, self._secrets)
                if not error.retriable or attempt >= self._retry_total:
                    raise error from exc
                delay = self._backoff_factor if self._fixed_backoff else self._backoff_factor * 2**attempt
                _log.info("%s failed (%s); retrying in %.2f s", what, error, min(delay, self._backoff_max))
                await asyncio.sleep(min(delay, self._backoff_max))
                attempt += 1

    async def _eventhub_properties(self, client: EventHubProducerClient) -> dict[str, Any]:
        link = self._management_link
        raw = await eventhub_properties(link, client) if link is not None else None
        return raw if raw is not None else await client.get_eventhub_properties()

    async def _partition_properties(self, client: EventHubProducerClient, partition_id: str) -> dict[str, Any]:
        link = self._management_link
        raw = await partition_properties(link, client, partition_id) if link is not None else None
        return raw if raw is not None else await client.get_partition_properties(partition_id)

    async def get_properties(self) -> EventHubProperties:
        """The hub's name, creation time and partition ids.

        Raises:
            NotFoundError: The hub does not exist.
            AuthenticationError: The credentials were refused.
            TransportError: The service could not be reached (after the retries).

        Example:
            >>> async def show(hub):  # doctest: +SKIP
            ...     props = await hub.get_properties()
            ...     return props.partition_ids
        """
        what = f"get properties of event hub {self._eventhub_name!r}"
        raw = await self._retrying(
            what, lambda c: self._orphans.run(self._eventhub_properties(c)), self._liveness.management_timeout
        )
        if not raw:
            raise NotFoundError(f"event hub {self._eventhub_name!r} returned no properties")
        ids = tuple(str(p) for p in raw["partition_ids"])
        if self._producer is not None and self._partition_ids is not None and set(ids) - set(self._partition_ids):
            # the SDK's producer refuses partition ids it did not read when it opened: partitions were added
            self._retired.append(self._producer)
            self._producer = None
        self._partition_ids = ids
        created = raw.get("created_at")
        return EventHubProperties(name=str(raw["eventhub_name"]), created_at=created, partition_ids=ids)

    async def get_partition_ids(self) -> Sequence[str]:
        """The partition ids, in the service's order.

        Example:
            >>> async def ids(hub):  # doctest: +SKIP
            ...     return await hub.get_partition_ids()  # ['0', '1', '2', '3']
        """
        return list((await self.get_properties()).partition_ids)

    async def _check_partition(self, partition_id: str) -> None:
        if self._partition_ids is not None and partition_id in self._partition_ids:
            return
        async with self._ids_lock:  # receivers opening together share one management call
            if self._partition_ids is None or partition_id not in self._partition_ids:
                await self.get_properties()  # (re)load: partitions can be added to a hub
            assert self._partition_ids is not None
            if partition_id not in self._partition_ids:
                raise NotFoundError(
                    f"event hub {self._eventhub_name!r} has no partition {partition_id!r} "
                    f"(partitions: {', '.join(self._partition_ids)})"
                )

    async def get_partition_properties(self, partition_id: str) -> PartitionProperties:
        """One partition's properties.

        Raises:
            NotFoundError: Unknown hub or partition.
            ConfigurationError: ``partition_id`` is not a non-empty str.

        Example:
            >>> async def lag(hub):  # doctest: +SKIP
            ...     p = await hub.get_partition_properties("0")
            ...     return p.last_enqueued_sequence_number
        """
        if not isinstance(partition_id, str) or not partition_id:
            raise ConfigurationError(f"partition_id must be a non-empty str, got {partition_id!r}")
        await self._check_partition(partition_id)
        raw = await self._retrying(
            f"get properties of partition {partition_id!r} of {self._eventhub_name!r}",
            lambda c: self._orphans.run(self._partition_properties(c, partition_id)),
            self._liveness.management_timeout,
        )
        if not raw:
            raise NotFoundError(f"event hub {self._eventhub_name!r} has no partition {partition_id!r}")
        return PartitionProperties(
            eventhub_name=str(raw["eventhub_name"]),
            partition_id=str(raw["id"]),
            beginning_sequence_number=int(raw["beginning_sequence_number"]),
            last_enqueued_sequence_number=int(raw["last_enqueued_sequence_number"]),
            last_enqueued_offset=str(raw["last_enqueued_offset"]),
            last_enqueued_time_utc=raw.get("last_enqueued_time_utc"),
            is_empty=bool(raw["is_empty"]),
        )
