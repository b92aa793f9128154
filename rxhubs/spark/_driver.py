"""The driver side shared by the streaming and the batch reader: one loop, one hub, partition properties, positions.

Where a read starts or ends is planned in sequence numbers. An offset or an enqueued time (the Scala connector's
positions) is translated on the driver into the sequence number of the first event there, by reading one
event, as the connector does.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

from rxhubs._models import PartitionProperties, Position
from rxhubs.spark._connection import close_hub, close_loop
from rxhubs.spark._ranges import Offset, first_sequence_number, next_sequence_number
from rxhubs.spark._source_options import Start, _Options
from rxhubs.spark._trace import process_started, span
from rxhubs.transport._seek import sequence_at

if TYPE_CHECKING:
    from rxhubs.transport._hub import EventHub

__all__ = ["DriverSide"]

_log = logging.getLogger("rxhubs.spark.source")

#: Seconds the driver reuses the hub's partition ids before asking again (partitions are rarely added).
_IDS_TTL = 60.0
#: Seconds the driver waits for the first event at an offset or enqueued time before taking the partition's end.
_TRANSLATE_WAIT = 10.0
#: Seconds the start of a query reuses the partitions' properties just read: Spark asks for an availableNow
#: query's target and for its initial offset back to back (a management call costs about 0.4 s of waiting).
_START_REUSE = 2.0


class DriverSide:
    """The driver's loop and hub (opened on first use, never pickled) and what they answer."""

    _options: _Options

    def _reset(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._hub: EventHub | None = None
        self._ids: tuple[list[str], float] | None = None
        self._recent: tuple[dict[str, PartitionProperties], float] | None = None

    def _run(self, coro: Any) -> Any:
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
        try:
            return self._loop.run_until_complete(coro)
        except Exception as exc:
            self._options.check_secret(exc)
            raise

    def _driver_hub(self) -> EventHub:
        if self._hub is None:
            self._hub = self._options.hub(management_link=True)  # one link for the query's management calls
        return self._hub

    async def _properties(self) -> dict[str, PartitionProperties]:
        hub = self._driver_hub()
        now = time.monotonic()
        if self._ids is None or now - self._ids[1] > _IDS_TTL:
            with span("management", call="partition ids", driver_started=process_started()):
                self._ids = (list(await hub.get_partition_ids()), now)
        ids = self._ids[0]
        with span("management", call="partition properties", partitions=len(ids)):
            answers = await asyncio.gather(*(hub.get_partition_properties(p) for p in ids), return_exceptions=True)
        failed = [a for a in answers if isinstance(a, BaseException)]  # every call has ended: none left running
        if failed:
            raise failed[0]
        props = [a for a in answers if not isinstance(a, BaseException)]
        read = {p.partition_id: p for p in props}
        self._recent = (read, time.monotonic())
        return read

    def _start_properties(self) -> dict[str, PartitionProperties]:
        """The partitions' properties for the start of a query: those read up to ``_START_REUSE`` s ago, or new."""
        recent = self._recent
        if recent is not None and time.monotonic() - recent[1] <= _START_REUSE:
            return recent[0]
        result: dict[str, PartitionProperties] = self._run(self._properties())
        return result

    def _latest(self) -> Offset:
        return {pid: next_sequence_number(p) for pid, p in self._run(self._properties()).items()}

    def _resolve(self, pid: str, choice: Start, props: PartitionProperties) -> int:
        """The sequence number a start ``choice`` means now: the first event at or after it, within retention."""
        if isinstance(choice, Position):
            choice = self._run(self._translate(pid, choice, props))
        if choice == "earliest":
            return first_sequence_number(props)
        if choice == "latest":
            return next_sequence_number(props)
        assert isinstance(choice, int)
        return min(max(choice, first_sequence_number(props)), next_sequence_number(props))

    async def _translate(self, partition_id: str, position: Position, props: PartitionProperties) -> int:
        """The sequence number of the first event at ``position`` (an offset or enqueued time), else the end.

        Read with a receiver, as the Scala connector does; a position past the last event (known from the
        partition's properties, or no event within a few seconds) means the partition's end.
        """
        wait = min(self._options.receive_timeout, _TRANSLATE_WAIT)
        return await sequence_at(self._driver_hub(), partition_id, self._options.consumer_group, position, props, wait)

    def _close_driver(self, closing: Any = None) -> None:
        """Close the driver's hub, ``closing`` (an async close function) and the loop; never raises."""
        loop, hub = self._loop, self._hub
        self._loop = self._hub = None
        if loop is None:
            return
        try:
            if hub is not None:
                loop.run_until_complete(close_hub(hub))
            if closing is not None:
                loop.run_until_complete(closing())
        except Exception as exc:  # stopping must not fail the query's shutdown
            _log.debug("closing the eventhubs source failed: %s", self._options.redact(str(exc)))
        finally:
            close_loop(loop)
