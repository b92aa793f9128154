"""Capture, then the hub: one partition read from its Capture files up to what the hub retains, then live.

:class:`BackfillHub` wraps a hub; its receivers (:class:`BackfillReceiver`) decide at their first read where
their start lies. At or after the hub's first retained event: they are the hub's own receiver. Before it: they
read the Capture files from there, then open the hub's receiver right after the last event they returned, so
the sequence numbers run on without a gap or a repeat (Flink's HybridSource, with the switch position handed
from the bounded reader to the live one). A checkpoint written during the backfill names a captured event, so
a partition resumed from it is read from Capture again.

The switch, exactly:

* the files are read in order while they hold the next sequence number wanted (``expected``);
* files exhausted (Capture trails the hub by up to a window): if the hub retains ``expected``, its receiver
  opens at ``expected``; else the files are listed again every ``poll_interval`` for up to ``patience``
  seconds, then :class:`~rxhubs.errors.CaptureGapError` names ``expected`` to the hub's first retained event;
* a jump inside the files (a file missing): the hub is asked the same way; if it holds ``expected``, reading
  goes on there; else the gap is the error;
* the live receiver's first event must be ``expected``; a later one means the retention moved between the
  look and the open: the live receiver is closed and the files are tried again from ``expected``.

``earliest`` means the first captured event; a sequence number is taken as it is; an offset or an enqueued
time is looked up in the files (a captured time is known to the second: an enqueued-time start reads the
events of its second); ``latest`` is the hub's.
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import itertools
import time
from collections.abc import Sequence
from typing import Any

from rxhubs._models import Event, EventHubProperties, PartitionContext, PartitionProperties, Position
from rxhubs.errors import CaptureGapError
from rxhubs.sources._capture import Capture
from rxhubs.transport import Hub, PartitionReceiver
from rxhubs.transport._base import DEFAULT_CONSUMER_GROUP, ReceiverBase
from rxhubs.transport._seek import first_sequence_number

__all__ = ["BackfillHub", "BackfillReceiver"]


class BackfillHub:
    """A hub whose receivers read Capture files before the hub's retention (see the module).

    ``consume(hub, ..., backfill=capture)`` wraps ``hub`` so; wrap it yourself for :func:`partition_batches`.

    Example:
        >>> import asyncio
        >>> from rxhubs.testing import InMemoryEventHub
        >>> from rxhubs.sources import Capture
        >>> memory = InMemoryEventHub(partition_count=1)
        >>> _ = memory.send([b"a", b"b"], partition_id="0")
        >>> hub = BackfillHub(memory, Capture("no-capture-here"))
        >>> async def read() -> list[bytes]:
        ...     async with hub.receiver("0") as receiver:  # nothing captured: the hub's own events
        ...         return [e.body for e in await receiver.receive_batch(10, max_wait=0.1)]
        >>> asyncio.run(read())
        [b'a', b'b']
    """

    def __init__(self, hub: Hub, capture: Capture) -> None:
        self.hub = hub
        self.capture = capture

    def __repr__(self) -> str:
        return f"BackfillHub({self.hub!r}, {self.capture!r})"

    @property
    def fully_qualified_namespace(self) -> str:
        return self.hub.fully_qualified_namespace

    @property
    def eventhub_name(self) -> str:
        return self.hub.eventhub_name

    async def get_properties(self) -> EventHubProperties:
        return await self.hub.get_properties()

    async def get_partition_ids(self) -> Sequence[str]:
        return await self.hub.get_partition_ids()

    async def get_partition_properties(self, partition_id: str) -> PartitionProperties:
        """The hub's properties, with ``beginning_sequence_number`` the first captured event when it is earlier."""
        props = await self.hub.get_partition_properties(partition_id)
        first = await self.first_captured(partition_id)
        if first is None or props.is_empty or first >= props.beginning_sequence_number:
            return props
        return PartitionProperties(props.eventhub_name, props.partition_id, first, props.last_enqueued_sequence_number,
                                   props.last_enqueued_offset, props.last_enqueued_time_utc, props.is_empty)

    async def first_captured(self, partition_id: str) -> int | None:
        """The sequence number of the partition's first captured event (None: no events captured)."""
        for name in await self.capture.partition_files(self.eventhub_name, partition_id):
            first = await self.capture.first_sequence_number(name)  # remembered per file: one read each
            if first is not None:
                return first
        return None

    def receiver(
        self,
        partition_id: str,
        consumer_group: str = DEFAULT_CONSUMER_GROUP,
        start: Position | None = None,
        owner_level: int | None = None,
        prefetch: int = 300,
        track_last_enqueued_event_properties: bool | None = None,
    ) -> PartitionReceiver:
        context = PartitionContext(self.fully_qualified_namespace, self.eventhub_name, consumer_group, partition_id)
        options = {"owner_level": owner_level, "prefetch": prefetch}
        if track_last_enqueued_event_properties is not None:
            options["track_last_enqueued_event_properties"] = track_last_enqueued_event_properties
        return BackfillReceiver(self, context, start or Position.earliest(), options)

    async def close(self) -> None:
        await self.capture.close()
        await self.hub.close()


class BackfillReceiver(ReceiverBase):
    """One partition from Capture, then from the hub (see the module)."""

    def __init__(self, hub: BackfillHub, context: PartitionContext, start: Position, options: dict[str, Any]) -> None:
        super().__init__(context, start, options.get("owner_level"))
        self._hub = hub
        self._options = options
        self._live: PartitionReceiver | None = None
        self._decided = False
        self._expected = 0  # in the backfill: the next sequence number to return
        self._check_first_live = False
        self._files: list[str] = []
        self._done_files: set[str] = set()
        self._buffer: list[Event] = []
        self.backfilled = 0  # events returned from Capture
        self.switched_at: int | None = None  # the sequence number the hub was opened at

    # -- reading -------------------------------------------------------------------------------------------
    async def _receive(self, max_count: int, max_wait: float | None) -> list[Event]:
        if not self._decided:
            await self._decide()
        if self._live is None:
            events = self._take(max_count)
            if events:
                return events
            if await self._fill(max_wait):
                return self._take(max_count)
            if self._live is None:
                return []
        live = self._live
        assert live is not None
        events = await live.receive_batch(max_count, max_wait)
        if self._check_first_live and events:
            self._check_first_live = False
            if events[0].sequence_number != self._expected:  # the retention moved between the look and the open
                self._live = None
                await live.close()
                return []
        return events

    def _take_ready(self, max_count: int) -> list[Event]:
        if self._live is not None:
            # until the live receiver's first event is checked (in _receive), nothing is handed out here
            return [] if self._check_first_live else self._live.receive_nowait(max_count)
        return self._take(max_count)

    def _take(self, max_count: int) -> list[Event]:
        events, self._buffer = self._buffer[:max_count], self._buffer[max_count:]
        if events:
            self._expected = events[-1].sequence_number + 1
            self.backfilled += len(events)
        return events

    async def _decide(self) -> None:
        """Where the start lies: before the hub's retention (read Capture from there) or not (read the hub)."""
        self._decided = True
        hub, c = self._hub, self._context
        props = await hub.hub.get_partition_properties(c.partition_id)
        retained = first_sequence_number(props)
        wanted = await self._wanted(self._start)
        if wanted is None or wanted >= retained:
            await self._open_live(self._start)
            return
        self._expected = wanted

    async def _wanted(self, start: Position) -> int | None:
        """The first sequence number ``start`` names, looked up in Capture where needed (None: the hub's)."""
        kind, value = start.kind, start.value
        if kind == "latest":
            return None
        if kind == "sequence_number":
            assert isinstance(value, int)
            return value if start.inclusive else value + 1
        hub, pid = self._hub, self._context.partition_id
        files = await hub.capture.partition_files(hub.eventhub_name, pid)
        if kind == "enqueued_time":  # files whose window opened later than the start hold later events only
            files = files[hub.capture.skip_before_time(files, start.value):]
        for name in files:
            for e in await hub.capture.events(name):
                if kind == "earliest" or _at_or_after(e, start):
                    return e.sequence_number
        return None

    async def _fill(self, max_wait: float | None) -> bool:
        """Buffer the next captured events; or switch to the hub; or wait for Capture. True: events buffered."""
        hub, pid = self._hub, self._context.partition_id
        deadline = time.monotonic() + hub.capture.patience
        while True:
            if self._live is not None:
                return False
            self._files = await hub.capture.partition_files(hub.eventhub_name, pid)
            if not self._done_files and self._files:  # the first look: skip the files before the start
                self._done_files.update(self._files[: await hub.capture.skip_before(self._files, self._expected)])
            for name in self._files:
                if name in self._done_files:
                    continue
                kept = _from(await hub.capture.events(name), self._expected)
                if not kept:
                    self._done_files.add(name)
                    continue
                gap = kept[0].sequence_number > self._expected  # a file missing: the hub may still hold them
                if gap and await self._switch_if_retained(gap_to=kept[0].sequence_number - 1):
                    return False
                self._check_run(kept)
                self._done_files.add(name)
                self._buffer = kept
                return True
            if await self._switch_if_retained(gap_to=None):
                return False
            if time.monotonic() >= deadline:
                props = await hub.hub.get_partition_properties(pid)
                raise CaptureGapError(pid, self._expected, first_sequence_number(props) - 1,
                                      f"Capture ends before; waited {hub.capture.patience:g} s for more files")
            await asyncio.sleep(min(hub.capture.poll_interval, max(0.0, deadline - time.monotonic())))

    def _check_run(self, events: list[Event]) -> None:
        """Events of one file must follow each other; a hole inside a file is a gap too."""
        if events[-1].sequence_number - events[0].sequence_number == len(events) - 1:
            return  # increasing (as written) and as many as the span: no hole (the rest is checked only if not)
        for before, after in itertools.pairwise(events):
            if after.sequence_number != before.sequence_number + 1:
                raise CaptureGapError(self._context.partition_id, before.sequence_number + 1,
                                      after.sequence_number - 1, "inside one Capture file")

    async def _switch_if_retained(self, gap_to: int | None) -> bool:
        """Open the hub at ``expected`` if it still holds it; a known gap it does not hold is an error."""
        pid = self._context.partition_id
        props = await self._hub.hub.get_partition_properties(pid)
        if first_sequence_number(props) <= self._expected:
            await self._open_live(Position.from_sequence_number(self._expected, inclusive=True))
            self._check_first_live = True
            return True
        if gap_to is not None:
            raise CaptureGapError(pid, self._expected, gap_to, "a Capture file is missing")
        return False

    async def _open_live(self, position: Position) -> None:
        c = self._context
        receiver = self._hub.hub.receiver(c.partition_id, c.consumer_group, start=position, **self._options)
        await receiver.__aenter__()
        self._live = receiver
        if position.kind == "sequence_number":
            assert isinstance(position.value, int)
            self.switched_at = position.value + (0 if position.inclusive else 1)

    # -- the rest of the receiver --------------------------------------------------------------------------
    @property
    def last_enqueued_event_properties(self) -> Any:
        return self._live.last_enqueued_event_properties if self._live is not None else None

    async def get_partition_properties(self) -> PartitionProperties:
        return await self._hub.get_partition_properties(self._context.partition_id)

    async def _close(self) -> None:
        live, self._live = self._live, None
        if live is not None:
            await live.close()


def _from(events: list[Event], first: int) -> list[Event]:
    """The events of a file from sequence number ``first`` on (a file's events are in order, usually contiguous)."""
    if not events or events[0].sequence_number >= first:
        return events
    cut = first - events[0].sequence_number
    if cut < len(events) and events[cut].sequence_number == first and events[cut - 1].sequence_number < first:
        return events[cut:]
    return [e for e in events if e.sequence_number >= first]


def _at_or_after(event: Event, start: Position) -> bool:
    """Whether a captured event is at or after an offset or enqueued-time start (times compared to the second)."""
    if start.kind == "offset":
        offset, wanted = event.offset, str(start.value)
        if offset.isdigit() and wanted.isdigit():
            return int(offset) >= int(wanted) if start.inclusive else int(offset) > int(wanted)
        return offset >= wanted if start.inclusive else offset > wanted
    when = start.value
    assert isinstance(when, _dt.datetime)
    return event.enqueued_time >= when.replace(microsecond=0)
