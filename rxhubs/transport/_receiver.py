"""The Azure pull receiver: one partition over the SDK's ``receive_batch``, pulled batch by batch.

How it works (see ``docs/transport.md`` for the measurements behind it):

- Each receiver owns one ``EventHubConsumerClient`` and, from its first pull, one task running the SDK's
  ``receive_batch`` for its partition. The SDK's callback wraps each batch's events as :class:`~rxhubs.Event`
  that decode on first read (:mod:`rxhubs.transport._convert`) and puts them in a bounded buffer (under
  ``2 x prefetch`` events); when it is full the callback waits, the SDK stops reading the socket once its
  own buffer passes one batch, and the service stops sending: a receiver holds at most about
  ``4 x prefetch`` events however slowly it is pulled.
- ``receive_nowait(max_count)`` hands out what is buffered; ``receive_batch(max_count, max_wait)`` waits for
  the first buffered event or ``max_wait``, then returns what is buffered, up to ``max_count``.
- The SDK's traps are closed off. After a steal or any error that exhausted its retries, the SDK would
  re-attach on its own every load-balancing interval **from the original starting position**, replaying
  everything. So the receiver's SDK client gets a load-balancing interval of days, the SDK task is
  cancelled on the first error, and the error is raised from the next pull (an
  :class:`~rxhubs.errors.OwnershipLostError` at once, discarding what was buffered, so two owners do not
  process the same events; other errors after the buffered events were handed out). A reopened receiver
  starts after the last event handed out, and every receiver drops any event at or below the highest
  sequence number it has buffered (the SDK's internal link retries may replay some).
- ``close()`` stops the SDK task without waiting for the SDK's once-a-second poll of its stopped
  partitions, then closes the client, so the link is released when ``close()`` returns.

What it needs from the SDK's terms and state (positions, the link's delivery-tag set, how its task stops) is in
``_receiver_sdk``.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, Protocol

from azure.eventhub import EventData
from azure.eventhub.aio import EventHubConsumerClient

from rxhubs._models import Event, LastEnqueuedEventProperties, PartitionContext, PartitionProperties, Position
from rxhubs.errors import OwnershipLostError, RxHubsError, TransportError
from rxhubs.transport._base import ReceiverBase
from rxhubs.transport._convert import last_enqueued_from_sdk, received_events
from rxhubs.transport._convert_messages import (
    last_enqueued_from_annotations,
    last_enqueued_from_message,
    received_messages,
)
from rxhubs.transport._direct import delivery_tags, direct_supported, receive_direct, record_public
from rxhubs.transport._errors import first_line, translate_error
from rxhubs.transport._liveness import LinkWatch, Liveness, Watchdog, sdk_link, stall_error, watched
from rxhubs.transport._receiver_sdk import (
    CLOSE_STEP_TIMEOUT,
    forget_delivery_tags,
    high_water_of,
    sdk_delivery_tags,
    sdk_position,
    stop_sdk_task,
)
from rxhubs.transport._warm import WarmSessions

if TYPE_CHECKING:
    from types import TracebackType

__all__ = ["AzurePartitionReceiver", "ReceiverHost", "forget_delivery_tags", "sdk_delivery_tags"]

_log = logging.getLogger("rxhubs.transport.azure")


class ReceiverHost(Protocol):
    """What a receiver needs from the hub that made it (:class:`~rxhubs.EventHub`)."""

    _secrets: tuple[str, ...]
    _liveness: Liveness
    _warm: WarmSessions

    async def _check_partition(self, partition_id: str) -> None: ...

    def _new_consumer_client(self, consumer_group: str) -> EventHubConsumerClient: ...

    def _forget(self, receiver: AzurePartitionReceiver) -> None: ...

    async def get_partition_properties(self, partition_id: str) -> PartitionProperties: ...


class AzurePartitionReceiver(ReceiverBase):
    """A pull receiver of one partition over the SDK's ``receive_batch``; made by :meth:`EventHub.receiver`.

    Example:
        >>> async def drain(hub):  # doctest: +SKIP
        ...     async with hub.receiver("0") as receiver:
        ...         while batch := await receiver.receive_batch(500, max_wait=1.0):
        ...             print(batch[-1].sequence_number, receiver.last_enqueued_event_properties)
    """

    def __init__(
        self,
        hub: ReceiverHost,
        context: PartitionContext,
        start: Position,
        owner_level: int | None,
        prefetch: int,
        track_last_enqueued_event_properties: bool = True,
    ) -> None:
        super().__init__(context, start, owner_level)
        self._track = track_last_enqueued_event_properties
        self._hub = hub
        self._start = start
        self._prefetch = prefetch
        self.high_water = high_water_of(start)
        self._chunks: deque[tuple[list[Event], LastEnqueuedEventProperties | None]] = deque()
        self._buffered = 0  # events in _chunks; the SDK callback waits while it is >= prefetch
        self._error: RxHubsError | None = None
        self._data = asyncio.Event()  # set when a chunk, an error or close arrives
        self._space = asyncio.Event()  # set when the buffer has room (or we are stopping)
        self._space.set()
        self._link_closed = asyncio.Event()
        self._close_task: asyncio.Task[Any] | None = None
        self._pull_lock = asyncio.Lock()
        self._client: EventHubConsumerClient | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self._dropped = 0
        self._direct_handler: Any = None  # the SDK's AMQP receive client, on the direct path
        self._native_link: Any = None  # its natively read link (rxhubs.transport._native), when there is one

    # -- pulling ---------------------------------------------------------------------------------------------

    async def _receive(self, max_count: int, max_wait: float | None) -> list[Event]:
        async with self._pull_lock:
            if self._task is None and self._error is None:
                await self._open()
            events = self._take(max_count)
            if events:
                return events
            if self._error is not None:
                raise self._error
            if max_wait == 0:
                return []
            try:
                async with asyncio.timeout(max_wait):
                    while True:
                        self._data.clear()
                        await self._data.wait()
                        self._check_open()
                        events = self._take(max_count)
                        if events:
                            return events
                        if self._error is not None:
                            raise self._error
            except TimeoutError:
                return []

    def _take_ready(self, max_count: int) -> list[Event]:
        events = self._take(max_count)
        if not events and self._error is not None:
            raise self._error
        return events

    def _take(self, max_count: int) -> list[Event]:
        chunks = self._chunks
        if not chunks:
            return []
        out: list[Event] = []
        while chunks and len(out) < max_count:
            events, last_enqueued = chunks[0]
            need = max_count - len(out)
            if len(events) <= need:
                chunks.popleft()
                if out:
                    out.extend(events)
                else:
                    out = events
            else:
                out.extend(events[:need])
                chunks[0] = (events[need:], last_enqueued)
            if last_enqueued is not None:
                self._last_enqueued = last_enqueued
        self._buffered -= len(out)
        self._space.set()
        return out

    async def _open(self) -> None:
        """Start the SDK task after the partition's id is checked (cached per hub: an unknown one fails this pull).

        Of the positions, only :meth:`Position.latest` makes the first pull wait for the service.

        "Latest" must mean "after the events present when the receiver opened", but the SDK attaches its link
        (and so evaluates ``@latest``) about a second later, after a first pull may have returned and more
        events arrived. So the first pull fixes it as the partition's last enqueued sequence number.
        """
        c = self._context
        try:
            # An unknown partition fails the first pull itself, however long the service takes to say so
            # (the hub caches the ids: one management call per hub, shared by receivers opening together).
            await self._hub._check_partition(c.partition_id)
            if self._start.kind == "latest":
                props = await self._hub.get_partition_properties(c.partition_id)
                self._start = Position.from_sequence_number(props.last_enqueued_sequence_number)
                self._position = self._start
                self.high_water = high_water_of(self._start)
        except RxHubsError as exc:
            self._error = exc  # sticky, like every receive error: open a new receiver
            raise
        self._check_open()  # closed while the service answered: no SDK task to start
        self._task = asyncio.create_task(self._run(), name=f"rxhubs-receive-{c.eventhub_name}-{c.partition_id}")

    async def _run(self) -> None:
        try:
            # Unknown partitions failed the first pull (_open); unknown consumer groups fail when the link
            # attaches, waking the waiting pull through _fail.
            client = self._client = self._hub._new_consumer_client(self._context.consumer_group)
            position, inclusive = sdk_position(self._start)
            c, liveness = self._context, self._hub._liveness
            if direct_supported(client):
                link = LinkWatch()
                try:
                    await self._watched(receive_direct(
                        client, c.consumer_group, c.partition_id, position, inclusive,
                        prefetch=self._prefetch, owner_level=self._owner_level,
                        track_last_enqueued_event_properties=self._track,
                        room=self._room, deliver=self._on_messages, opened=self._on_direct_open,
                        watch=link, open_timeout=liveness.open_timeout, warm=self._hub._warm.take(c.consumer_group),
                        on_native=self._on_native, has_room=self._has_room, deliver_events=self._on_events,
                    ), link.probe)
                    return
                except NotImplementedError as exc:  # the SDK's private parts changed: the public path
                    _log.info("%s: direct receive unavailable (%s); using receive_batch", self._what(), exc)
                    record_public(c.partition_id, str(exc))
                finally:
                    self._link_closed.set()
            else:
                record_public(c.partition_id)
            await self._watched(client.receive_batch(
                self._on_batch,
                partition_id=c.partition_id,
                starting_position=position,
                starting_position_inclusive=inclusive,
                max_batch_size=self._prefetch,
                max_wait_time=None,
                prefetch=self._prefetch,
                owner_level=self._owner_level,
                track_last_enqueued_event_properties=self._track,
                on_error=self._on_error,
                on_partition_close=self._on_partition_close,
            ), lambda: sdk_link(client, c.consumer_group, c.partition_id, self._prefetch))
        except asyncio.CancelledError:
            raise
        except RxHubsError as exc:
            self._fail(exc, None)
        except Exception as exc:
            self._fail(translate_error(exc, self._what(), self._hub._secrets), exc)
        else:
            if not self._stopping:
                self._fail(TransportError(f"{self._what()}: the SDK receive loop ended"), None)

    async def _watched(self, work: Coroutine[Any, Any, None], probe: Callable[[], tuple[Any, bool]]) -> None:
        """Run the receive under a watchdog: a path silent past the idle timeout raises a retriable error."""
        idle = self._hub._liveness.idle_timeout
        if idle is None:
            await work
            return
        await watched(work, Watchdog(idle, probe), lambda silent: stall_error(self._context, silent, idle))

    def _what(self) -> str:
        c = self._context
        return f"receive from {c.eventhub_name}/{c.consumer_group}/{c.partition_id}"

    # -- SDK callbacks ---------------------------------------------------------------------------------------

    def _on_direct_open(self, handler: Any) -> None:
        self._direct_handler = handler

    def _on_native(self, native: Any) -> None:
        self._native_link = native

    def _delivery_tags(self) -> set[Any] | None:
        """The link's delivery tags awaiting a disposition (for the leak test), on either receive path."""
        if self._direct_handler is not None:
            return delivery_tags(self._direct_handler)
        return sdk_delivery_tags(self._client, self._context.consumer_group, self._context.partition_id)

    def _has_room(self) -> bool:
        return self._buffered < self._prefetch

    async def _room(self) -> None:
        """Return when the buffer has room (or the receiver is stopping)."""
        while self._buffered >= self._prefetch and not self._stopping:
            self._space.clear()
            await self._space.wait()

    async def _on_batch(self, partition_context: Any, batch: list[EventData]) -> None:
        if not batch:
            return
        forget_delivery_tags(self._client, self._context.consumer_group, self._context.partition_id)
        await self._room()
        # nothing decoded yet: fields decode on first read
        self._buffer(received_events(batch), last_enqueued_from_sdk(partition_context.last_enqueued_event_properties))

    def _on_messages(self, messages: list[Any]) -> None:
        """The direct path's hand-over: AMQP messages as read from the link."""
        last = last_enqueued_from_message(messages[-1]) if self._track else None
        self._buffer(received_messages(messages), last)

    def _on_events(self, events: list[Event], delivery_annotations: Any) -> None:
        """The native path's hand-over: the events the compiled reader made, the last one's delivery annotations."""
        if events:
            self._buffer(events, last_enqueued_from_annotations(delivery_annotations) if self._track else None)

    def _buffer(self, events: list[Event], last_enqueued: LastEnqueuedEventProperties | None) -> None:
        if self._stopping or self._error is not None:
            return
        high = self.high_water
        if events[0].sequence_number <= high:  # a replay (sequence numbers increase within a read)
            received = len(events)
            events = [event for event in events if event.sequence_number > high]
            self._dropped += received - len(events)
            _log.debug("%s: dropped %d replayed event(s)", self._what(), received - len(events))
            if not events:
                return
        self.high_water = events[-1].sequence_number
        self._chunks.append((events, last_enqueued))
        self._buffered += len(events)
        self._data.set()

    async def _on_error(self, partition_context: Any, error: Exception) -> None:
        if self._stopping:
            return
        self._fail(translate_error(error, self._what(), self._hub._secrets), error)

    async def _on_partition_close(self, partition_context: Any, reason: Any) -> None:
        # Runs in the SDK task that closes the partition's consumer; once it finishes, the SDK's bookkeeping
        # of the partition is gone too (see _stop_sdk).
        self._close_task = asyncio.current_task()
        self._link_closed.set()

    def _fail(self, error: RxHubsError, cause: BaseException | None) -> None:
        """Record the first error, stop the SDK from re-attaching on its own, and wake a waiting pull."""
        if self._error is not None or self._stopping:
            return
        if cause is not None and error.__cause__ is None and error is not cause:
            error.__cause__ = cause
        self._error = error
        if isinstance(error, OwnershipLostError):
            self._chunks.clear()  # the new owner reads these; handing them out would process them twice
            self._buffered = 0
        _log.info("%s", error)
        task = self._task
        if task is not None and not task.done() and task is not asyncio.current_task():
            task.cancel()  # the SDK would otherwise re-attach later from the original start position
        self._data.set()

    # -- properties and closing ------------------------------------------------------------------------------

    async def get_partition_properties(self) -> PartitionProperties:
        """The partition's current properties (from the hub's management link).

        Example:
            >>> async def lag(receiver):  # doctest: +SKIP
            ...     p = await receiver.get_partition_properties()
            ...     return p.last_enqueued_sequence_number - receiver.position.value
        """
        self._check_open()
        return await self._hub.get_partition_properties(self._context.partition_id)

    async def _close(self) -> None:
        self._stopping = True
        self._space.set()
        self._data.set()
        self._chunks.clear()
        self._buffered = 0
        try:
            await self._stop_sdk()
        finally:
            client, self._client = self._client, None
            self._hub._forget(self)
            if client is not None:
                try:
                    await asyncio.wait_for(client.close(), CLOSE_STEP_TIMEOUT)
                except Exception as exc:
                    _log.debug("%s: closing the client failed: %s", self._what(), first_line(exc, self._hub._secrets))

    async def _stop_sdk(self) -> None:
        """Cancel the SDK task and wait until its consumer (the AMQP link) is closed (:func:`stop_sdk_task`)."""
        await stop_sdk_task(self._task, self._link_closed, lambda: self._close_task, self._what())

    async def __aenter__(self) -> AzurePartitionReceiver:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()
