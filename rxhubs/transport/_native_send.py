"""The native send path: batches encoded by the compiled encoder and written to the producer link's socket at once.

azure-eventhub's ``send_batch`` costs about 70 us per event in Python before a byte leaves (an ``EventData``,
an ``AmqpAnnotatedMessage`` and a pyamqp ``Message`` per event, each event encoded twice, the batch encoded again,
one send at a time per producer). Here the SDK keeps what it does well and rarely, as on the receive side
(:mod:`rxhubs.transport._native`): the connection, TLS, SASL and CBS authentication and token refresh, the
attach of the producer link, dispositions and errors. rxhubs encodes a whole run of events into the transfer
frames of as many batch messages as they need (:func:`rxhubs.transport._encode_py.batch_frames`, compiled), with
the link's delivery ids, tags, maximum message size and the peer's maximum frame size, and writes them in one
socket write; the session's and link's bookkeeping (ids, windows, delivery count, credit) is done once per write.
Each delivery is registered with the SDK's link like one of its own, so the SDK's reading of the connection
settles it (Accepted, or the service's error) and times it out as it would.

Several sends may be in flight on one link (up to the link credit and :data:`MAX_IN_FLIGHT` deliveries per send):
a send returns once every delivery it wrote was settled. Acknowledged deliveries leave ``pending`` in order, so a
retry after a failure resends only what was not acknowledged.

It uses private parts of azure-eventhub, so each is checked before the first write; when one is missing, the
encoder is not compiled, or the connection is not a plain socket (WebSocket), sends keep ``send_batch``
(:func:`rxhubs.transport._producer.send_batches`) and one INFO line says why.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from rxhubs.transport import _paths
from rxhubs.transport._direct import _open, sdk_version_supported
from rxhubs.transport._encode import compiled_encoder, log_send_path
from rxhubs.transport._errors import first_line
from rxhubs.transport._frame_errors import Unsupported
from rxhubs.transport._frames import extensions_disabled
from rxhubs.transport._producer import OversizedEventError, send_batches
from rxhubs.transport._publisher import EventColumns, OutgoingEvent

__all__ = ["MAX_IN_FLIGHT", "NativeSender", "Pending", "Senders"]

_log = logging.getLogger("rxhubs.transport")

#: Most deliveries (batch messages, each up to the link's maximum message size) one send has written and not
#: yet seen settled.
MAX_IN_FLIGHT = 16

#: What a send takes: events, or events as columns (a bulk send); the acknowledged prefix leaves it.
Pending = list[OutgoingEvent] | EventColumns

_PRODUCER_PARTS = ("_open", "_handler", "_handle_exception", "close", "_create_handler", "_timeout", "running")
_HANDLER_PARTS = ("_link", "_connection", "do_work_async", "_on_send_complete_async")
_LINK_PARTS = ("handle", "delivery_count", "current_link_credit", "_pending_deliveries", "_session")
_SESSION_PARTS = ("channel", "next_outgoing_id", "remote_incoming_window", "outgoing_window")
_CONNECTION_PARTS = ("_transport", "_remote_max_frame_size")


def _missing(thing: Any, names: tuple[str, ...], what: str) -> list[str]:
    return [f"{what}.{name}" for name in names if not hasattr(thing, name)]


def _sdk_delivery_types() -> tuple[Any, Any, Any]:
    from azure.eventhub._pyamqp.aio._sender_async import PendingDelivery
    from azure.eventhub._pyamqp.constants import MessageDeliveryState
    from azure.eventhub._pyamqp.message import _MessageDelivery

    return PendingDelivery, _MessageDelivery, MessageDeliveryState


class NativeSender:
    """One producer link (a partition, or the hub: the service routes) sent on natively; see the module docstring.

    ``producer``: an azure-eventhub aio ``EventHubProducer`` (``client._create_producer(...)``), opened here.
    """

    def __init__(
        self, producer: Any, batch_frames: Callable[..., tuple[bytes, list[int]]],
        batch_frames_columns: Callable[..., tuple[bytes, list[int]]] | None = None,
    ) -> None:
        missing = _missing(producer, _PRODUCER_PARTS, "producer")
        if missing:
            raise NotImplementedError(f"azure-eventhub has no {', '.join(missing)}")
        self._producer = producer
        self._batch_frames = batch_frames
        self._batch_frames_columns = batch_frames_columns
        self._write_lock = asyncio.Lock()
        self._outstanding: set[asyncio.Future[None]] = set()
        self._pump: asyncio.Task[None] | None = None
        self._checked: Any = None  # the handler whose private parts were checked
        self.deliveries = 0  # written natively (for tests and the bench)
        self.writes = 0

    async def _link(self) -> tuple[Any, Any, Any, Any]:
        """The open link's (handler, link, session, connection), opening it when needed."""
        producer = self._producer
        if not producer.running or producer._handler is None:
            await _open(producer)
        handler = producer._handler
        if handler is not self._checked:
            link = getattr(handler, "_link", None)
            session = getattr(link, "_session", None)
            connection = getattr(handler, "_connection", None)
            transport = getattr(connection, "_transport", None)
            missing = [
                *_missing(handler, _HANDLER_PARTS, "client"), *_missing(link, _LINK_PARTS, "link"),
                *_missing(session, _SESSION_PARTS, "session"), *_missing(connection, _CONNECTION_PARTS, "connection"),
            ]
            if missing:
                raise NotImplementedError(f"pyamqp has no {', '.join(missing)}")
            if not isinstance(getattr(transport, "writer", None), asyncio.StreamWriter):
                raise NotImplementedError("the connection is not a plain socket (WebSocket keeps send_batch)")
            self._checked = handler
        return handler, handler._link, handler._link._session, handler._connection

    async def send(self, pending: Pending, partition_key: str | None) -> None:
        """Send ``pending`` in order; acknowledged events leave it from the front as their deliveries settle.

        Raises:
            OversizedEventError: An event larger than the link's maximum message size (nothing of it was sent).
            Unsupported: A property the encoder does not take (before anything of this call was sent).
            Exception: azure-eventhub's own error for a failed delivery or link (the caller translates it).
        """
        try:
            await self._send(pending, partition_key)
        except (asyncio.CancelledError, OversizedEventError, Unsupported, NotImplementedError):
            raise
        except Exception as exc:  # the SDK's mapping: closes a broken link or connection so the next send reopens
            try:
                error = await self._producer._handle_exception(exc)
            except asyncio.CancelledError:
                raise
            except Exception as mapped:
                error = mapped
            raise error from exc

    async def _send(self, pending: Pending, partition_key: str | None) -> None:
        deliveries: list[tuple[asyncio.Future[None], Any, int]] = []  # (settled, the SDK's delivery record, end)
        start = 0
        try:
            while start < len(pending):
                in_flight = sum(1 for future, _, _ in deliveries if not future.done())
                if in_flight >= MAX_IN_FLIGHT:
                    await asyncio.wait([f for f, _, _ in deliveries if not f.done()],
                                       return_when=asyncio.FIRST_COMPLETED)
                    self._raise_failed(deliveries)
                    continue
                written = await self._write(pending, start, partition_key, MAX_IN_FLIGHT - in_flight)
                if not written:
                    await self._await_credit()
                    continue
                deliveries.extend(written)
                start = written[-1][2]
            if deliveries:
                await asyncio.wait([f for f, _, _ in deliveries])
        except (Unsupported, OversizedEventError):  # settle what was written before the event refused
            if deliveries:
                await asyncio.wait([f for f, _, _ in deliveries])
            raise
        finally:
            acknowledged = 0
            for future, record, end in deliveries:  # the settled prefix leaves `pending`, even on a failure
                if not future.done() or future.cancelled() or not self._accepted(record):
                    break
                acknowledged = end
            del pending[:acknowledged]
        self._raise_failed(deliveries)

    def _raise_failed(self, deliveries: list[tuple[asyncio.Future[None], Any, int]]) -> None:
        for future, record, _ in deliveries:
            if future.done() and not future.cancelled() and future.exception() is not None:
                raise future.exception()  # type: ignore[misc]
            if future.done() and not self._accepted(record):
                error = getattr(record, "error", None)
                raise error if isinstance(error, BaseException) else RuntimeError("the send was not accepted")

    @staticmethod
    def _accepted(record: Any) -> bool:
        _, _, states = _sdk_delivery_types()
        return bool(record.state == states.Ok)

    async def _write(
        self, pending: Pending, start: int, key: str | None, most: int
    ) -> list[tuple[asyncio.Future[None], Any, int]]:
        """Encode and write up to ``most`` deliveries from ``pending[start:]`` within the credit; [] when none."""
        async with self._write_lock:
            handler, link, session, connection = await self._link()
            room = min(most, int(link.current_link_credit), int(session.remote_incoming_window))
            if room <= 0:
                return []
            max_message = self._producer._max_message_size_on_link or 1024 * 1024
            first_id = session.next_outgoing_id
            where = (start, key, max_message, connection._remote_max_frame_size, session.channel, link.handle, first_id,
                     link.delivery_count + 1, room)
            if isinstance(pending, EventColumns):  # a bulk send: straight from the columns
                if self._batch_frames_columns is None:
                    raise Unsupported("an encoder without batch_frames_columns")
                data, ends = self._batch_frames_columns(pending.bodies, pending.properties, *where)
            else:
                data, ends = self._batch_frames(pending, *where)
            if not ends:
                event = pending[start]
                raise OversizedEventError(
                    f"an event of {len(event.body)} bytes is larger than the hub's maximum message size"
                    f" ({max_message} bytes per batch)", event,
                )
            written = self._register(handler, link, first_id, ends)
            n = len(ends)
            session.next_outgoing_id = (first_id + n) & 0xFFFFFFFF
            session.remote_incoming_window -= n
            session.outgoing_window -= n
            link.delivery_count = (link.delivery_count + n) & 0xFFFFFFFF
            link.current_link_credit -= n
            writer = connection._transport.writer
            writer.write(data)  # one write; the SDK's own frames are whole writes too, so none interleave
            self.deliveries += n
            self.writes += 1
            self._start_pump(handler)
            await writer.drain()
        return written

    def _register(self, handler: Any, link: Any, first_id: int, ends: list[int]) -> list[Any]:
        """One SDK delivery record per batch message, settled by the SDK's disposition handling."""
        pending_type, record_type, states = _sdk_delivery_types()
        loop = asyncio.get_running_loop()
        timeout = self._producer._timeout or None
        written = []
        for i, end in enumerate(ends):
            record = record_type(None, states.WaitingForSendAck)
            future: asyncio.Future[None] = loop.create_future()
            delivery = pending_type(
                on_delivery_settled=partial(self._settled, handler, record, future), timeout=timeout,
                message=None, settled=False,
            )
            delivery.sent = True
            delivery.frame = {"delivery_id": (first_id + i) & 0xFFFFFFFF}
            link._pending_deliveries.append(delivery)
            self._outstanding.add(future)
            written.append((future, record, end))
        return written

    async def _settled(self, handler: Any, record: Any, future: asyncio.Future[None], reason: Any, state: Any) -> None:
        try:
            await handler._on_send_complete_async(record, reason, state)
        finally:
            self._outstanding.discard(future)
            if not future.done():
                future.set_result(None)

    def _start_pump(self, handler: Any) -> None:
        if self._pump is None or self._pump.done():
            self._pump = asyncio.create_task(self._read(handler), name="rxhubs-native-send")

    async def _read(self, handler: Any) -> None:
        """Let the SDK read the connection (dispositions, flow, detach) while deliveries are unsettled."""
        try:
            while self._outstanding:
                if not await handler.do_work_async():
                    raise ConnectionError("the producer link closed")
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # every unsettled delivery of this link fails with it
            for future in list(self._outstanding):
                if not future.done():
                    future.set_exception(exc)
            self._outstanding.clear()

    async def _await_credit(self) -> None:
        """No credit or window: let the SDK read the service's flow (or its error)."""
        handler, _, _, _ = await self._link()
        if self._pump is not None and not self._pump.done():
            await asyncio.sleep(0.001)  # the pump is reading; it updates the credit
            return
        if not await handler.do_work_async():
            raise ConnectionError("the producer link closed")

    async def close(self) -> None:
        if self._pump is not None and not self._pump.done():
            self._pump.cancel()
        for future in list(self._outstanding):
            if not future.done():
                future.cancel()
        self._outstanding.clear()
        await self._producer.close()


class Senders:
    """A hub's native senders, one per target partition (and one for the hub); ``send_batches`` when unavailable.

    ``send(client, pending, partition_id, partition_key)`` is what ``EventHub`` retries: the same contract as
    :func:`~rxhubs.transport._producer.send_batches`.
    """

    def __init__(self, secrets: Sequence[str] = ()) -> None:
        self._secrets = secrets
        self._client: Any = None
        self._senders: dict[str | None, NativeSender] = {}
        self._retired: list[NativeSender] = []
        self._off: str | None = None  # why the native path is off for this hub
        self.native = False  # a link was sent on natively (for tests and the bench)

    def _sender(self, client: Any, partition_id: str | None) -> NativeSender | None:
        if self._off is not None:
            return None
        if client is not self._client:  # a new producer client (partitions were added): new links
            self._retired.extend(self._senders.values())
            self._senders, self._client = {}, client
        sender = self._senders.get(partition_id)
        if sender is None:
            encoder = compiled_encoder()
            if encoder is None:
                self._fall_back(None)  # (the line says why: not built, or RXHUBS_NO_EXTENSIONS)
                return None
            kind = getattr(getattr(client, "_amqp_transport", None), "KIND", "")
            if not sdk_version_supported() or kind != "pyamqp" or not callable(getattr(client, "_create_producer", 0)):
                self._fall_back("an azure-eventhub version or transport the native path was not checked against")
                return None
            try:
                sender = NativeSender(client._create_producer(partition_id=partition_id), encoder.batch_frames,
                                      getattr(encoder, "batch_frames_columns", None))
            except NotImplementedError as exc:
                self._fall_back(str(exc))
                return None
            self._senders[partition_id] = sender
            self.native = True
            log_send_path()
        return sender

    def _fall_back(self, reason: str | None) -> None:
        self._off = reason or "no compiled encoder"
        if not (reason is None and extensions_disabled()):  # a fallback, not the path the user asked for
            _paths.record("send", "send_batch", self._off, chosen=False)  # (tests/support/native.py fails on it)
        log_send_path(reason)

    async def send(self, client: Any, pending: Pending, partition_id: str | None,
                   partition_key: str | None) -> None:
        sender = self._sender(client, partition_id)
        if sender is not None:
            try:
                await sender.send(pending, partition_key)
                return
            except Unsupported as exc:  # this call's events need the SDK (nothing of them was sent natively)
                _log.debug("send through azure-eventhub: %s", exc)
            except NotImplementedError as exc:
                self._fall_back(str(exc))
        await send_batches(client, pending, partition_id, partition_key)

    async def close(self, clients: Sequence[Any] = ()) -> None:
        """Close every native link, then the SDK producer ``clients`` given; never raises."""
        senders = [*self._retired, *self._senders.values()]
        self._senders, self._retired, self._client = {}, [], None
        for closable in [*senders, *clients]:
            try:
                await closable.close()
            except Exception as exc:  # closing must not fail the caller
                _log.debug("closing a producer failed: %s", first_line(exc, self._secrets))
