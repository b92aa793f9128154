"""The direct receive path: one partition's AMQP link driven by rxhubs, without the SDK's receive loop.

azure-eventhub's public ``receive_batch`` runs, per partition, a task that reads the socket and then sleeps
50 ms, and a second task that turns each message into an ``EventData`` and then sleeps 50 ms when it found
none (``_pyamqp_transport_async.py``, 5.15). A partition is therefore read at most 20 times a second, and
each event costs an ``EventData`` and an ``AmqpAnnotatedMessage`` that rxhubs does not need. This module opens
the same link through the SDK's own consumer (``client._create_consumer``: same authentication, link
properties, owner level, filters and error mapping) and runs the loop itself: read while the receiver has
room, hand the messages over as they are, no pause.

It uses private parts of azure-eventhub, so it is guarded: only the pyamqp transport, only azure-eventhub
versions from 5.11 up to (not including) 6, and only when every attribute it uses is there. Otherwise, or
with ``RXHUBS_DIRECT_RECEIVE=0`` in the environment, receivers use the public ``receive_batch`` path; both
paths pass the same receiver and partition-stream contract tests. See ``docs/transport.md``.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from azure.eventhub import __version__ as sdk_version

from rxhubs.errors import TransportError
from rxhubs.transport._direct_native import FrameSink, _Forwarding, _native_link, _SignallingDeque
from rxhubs.transport._liveness import LinkWatch, own_the_decision
from rxhubs.transport._native import NativeLink
from rxhubs.transport._paths import record
from rxhubs.transport._warm import adopt
from rxhubs.transport._warm import close_session as _close_warm

__all__ = [
    "DIRECT_VARIABLE", "FrameSink", "delivery_tags", "direct_supported", "receive_direct", "record_public",
    "sdk_version_supported",
]

_log = logging.getLogger("rxhubs.transport.azure")

#: Set to ``0`` to make every receiver use the SDK's public ``receive_batch`` loop.
DIRECT_VARIABLE = "RXHUBS_DIRECT_RECEIVE"

#: Seconds the hand-over waits after a first message arrives, so that a busy link's messages go downstream in
#: batches (a trickle is handed over within this delay).
COALESCE = 0.005

_SUPPORTED = ((5, 11), (6, 0))  # [from, to): the versions whose private parts this module was checked against
_CONSUMER_PARTS = ("_open", "_message_buffer", "_handle_exception", "close", "_prefetch", "_create_handler")
_CLIENT_PARTS = ("_create_auth_async", "_auth_uri", "_conn_manager_async", "_address", "_amqp_transport")
#: Upper bound on each step of closing a link (it sends; normally milliseconds).
_CLOSE_BOUND = 5.0
#: Seconds between the steps of opening a link (the SDK waits 50 ms between its steps: connection, CBS
#: authentication, attach, each needing a reply from the service). Each step's read already waits for the
#: service's reply, so the first steps follow at once (about ten make an open; 2 ms each cost 20 ms per
#: handover); only a handshake that goes on past them is paced (a read that returns without waiting must not
#: spin the loop).
_OPEN_POLL = 0.002
_OPEN_STEPS_UNPACED = 32


class _Cancels:
    """Raises a cancel of the current task that pyamqp swallowed, at the next step of a loop.

    pyamqp reads each frame through ``asyncio.wait_for``, which on Python 3.11 returns the read's result and drops
    a cancel that arrives in the same step as the frame (CPython gh-86296, fixed by 3.12's ``wait_for``). On a
    busy link that is most steps: the task went on reading, "cancelling" for ever, and a closed receiver's link
    stayed open and held up the end of ``asyncio.run`` (a consumer that did not exit on SIGTERM).
    ``Task.cancelling()`` still counts the request, so each step of the loops below checks it.
    """

    __slots__ = ("_before", "_task")

    def __init__(self) -> None:
        self._task = asyncio.current_task()
        self._before = self._task.cancelling() if self._task is not None else 0

    def check(self) -> None:
        if self._task is not None and self._task.cancelling() > self._before:
            raise asyncio.CancelledError


async def _open(
    consumer: Any, watch: LinkWatch | None = None, cancels: _Cancels | None = None, warm: Any | None = None
) -> None:
    """The SDK consumer's ``_open``, without its 50 ms pause after each step of the handshake.

    ``watch.handler`` is set as soon as the SDK's receive client exists: a watchdog sees the handshake too.
    ``warm``: a session opened ahead (:mod:`rxhubs.transport._warm`): only the link is attached, on it.
    """
    client = consumer._client
    if not all(hasattr(client, name) for name in _CLIENT_PARTS):
        await consumer._open()
        return
    auth = await client._create_auth_async(auth_uri=client._auth_uri)
    consumer._create_handler(auth)
    handler = consumer._handler
    if watch is not None:
        watch.handler = handler
    if warm is None or not adopt(handler, warm):
        if warm is not None:
            await _close_warm(warm)
        connection = await client._conn_manager_async.get_connection(endpoint=client._address.hostname, auth=auth)
        await handler.open_async(connection=connection)
    if watch is not None:  # the watchdog decides when the path is silent, the handshake included (not pyamqp's
        own_the_decision(handler._connection)  # check, which a loaded machine's late reads set off)
    steps = 0
    while True:  # each step reads the socket until the service's reply (or the socket timeout)
        if await handler.client_ready_async():
            break
        if cancels is not None:
            cancels.check()
        steps += 1
        await asyncio.sleep(0.0 if steps <= _OPEN_STEPS_UNPACED else _OPEN_POLL)
    consumer._max_message_size_on_link = (
        client._amqp_transport.get_remote_max_message_size(handler) or client._amqp_transport.MAX_MESSAGE_LENGTH_BYTES
    )
    consumer.running = True


def sdk_version_supported(version: str = sdk_version) -> bool:
    """True for the azure-eventhub versions the direct path was checked against.

    Example:
        >>> sdk_version_supported("5.15.1"), sdk_version_supported("6.0.0"), sdk_version_supported("5.10.0")
        (True, False, False)
    """
    try:
        parts = tuple(int(p) for p in version.split(".")[:2])
    except ValueError:
        return False
    return _SUPPORTED[0] <= parts < _SUPPORTED[1]


def _direct_off() -> bool:
    return os.environ.get(DIRECT_VARIABLE, "1").strip() == "0"


def direct_supported(client: Any) -> bool:
    """Whether receivers of this SDK client can use the direct path (see the module docstring)."""
    if _direct_off() or not sdk_version_supported():
        return False
    transport = getattr(client, "_amqp_transport", None)
    return getattr(transport, "KIND", None) == "pyamqp" and callable(getattr(client, "_create_consumer", None))


def record_public(partition_id: str, why: str | None = None) -> None:
    """Record (:mod:`rxhubs.transport._paths`) that a link reads on the SDK's public loop; ``why``: a guard failed."""
    if why is None:
        why = f"{DIRECT_VARIABLE}=0" if _direct_off() else f"azure-eventhub {sdk_version} or its transport"
    record(partition_id, "public", why, chosen=why == f"{DIRECT_VARIABLE}=0")


async def _no_callback(*_: Any) -> None:  # the SDK's consumer wants one; the direct loop never calls it
    return None


def delivery_tags(handler: Any) -> set[Any] | None:
    """The link's set of delivery tags awaiting a disposition, or None if it cannot be found."""
    tags = getattr(getattr(handler, "_link", None), "_received_delivery_tags", None)
    return tags if isinstance(tags, set) else None


def _forget_tags(handler: Any) -> None:
    """The SDK's link keeps every delivery tag forever (no disposition is ever sent): about 60 bytes an event."""
    tags = delivery_tags(handler)
    if tags:
        tags.clear()


async def receive_direct(
    client: Any,
    consumer_group: str,
    partition_id: str,
    position: Any,
    inclusive: bool,
    *,
    prefetch: int,
    owner_level: int | None,
    track_last_enqueued_event_properties: bool,
    room: Callable[[], Awaitable[None]],
    deliver: Callable[[list[Any]], None],
    opened: Callable[[Any], None] = lambda handler: None,
    watch: LinkWatch | None = None,
    open_timeout: float | None = None,
    warm: Any | None = None,
    on_native: Callable[[NativeLink | None], None] | None = None,
    frames: FrameSink | None = None,
    has_room: Callable[[], bool] | None = None,
    deliver_events: Callable[[list[Any], Any], None] | None = None,
) -> None:
    """Read one partition until cancelled or an error, handing each read's AMQP messages to ``deliver``.

    ``opened(handler)`` is called once the link is attached, with the SDK's AMQP receive client.
    ``room()`` returns when the receiver can take more (it waits while the receiver's buffer is full: the
    link then stops being read, its credit runs out and the service stops sending). Errors come out as the
    SDK's own exception types (the consumer maps them, as in its public loop), for the caller to translate.

    ``watch`` (for a :class:`~rxhubs.transport._liveness.Watchdog`) gets the SDK's receive client as soon as
    it exists, and ``watch.reading`` is False while the loop waits for room. Opening the link (connection,
    authentication, attach) taking more than ``open_timeout`` seconds raises a retriable ``TransportError``.
    ``warm``: a session opened ahead to attach the link on (closed if it cannot be used).
    ``on_native(native)``: called once the link is open, with its :class:`NativeLink` (None on the SDK's loop).
    ``frames``: a :class:`FrameSink` that keeps the events itself (``deliver`` is then never called, and the loop
    reads while ``frames.has_room()``). ``has_room()``: whether the receiver takes more now; given, the native path
    hands each chunk to ``deliver`` as it is read (no buffer here) and reads while it is True; with
    ``deliver_events`` too, the compiled reader makes the events and each chunk goes to
    ``deliver_events(events, the last one's delivery annotations)`` (the SDK's messages still go to ``deliver``).
    """
    link = watch if watch is not None else LinkWatch()
    consumer = client._create_consumer(
        consumer_group, partition_id, position, _no_callback,
        prefetch=prefetch, owner_level=owner_level,
        track_last_enqueued_event_properties=track_last_enqueued_event_properties,
        event_position_inclusive=inclusive,
    )
    missing = [name for name in _CONSUMER_PARTS if not hasattr(consumer, name)]
    if missing:  # checked before any I/O: the caller falls back to the public path
        if warm is not None:
            await _close_warm(warm)
        raise NotImplementedError(f"azure-eventhub's consumer has no {', '.join(missing)}")
    # The SDK's message callback appends each message to consumer._message_buffer, during do_work_async, which
    # returns only after up to `prefetch` frames or a quiet socket: a trickle of events would sit there for
    # seconds. So the buffer signals each arrival, and a second task hands messages over as they come (those
    # that arrive within COALESCE of the first together).
    arrived = asyncio.Event()
    buffer: deque[Any] = _SignallingDeque(arrived.set) if frames is None else _Forwarding(frames)
    consumer._message_buffer = buffer
    drained = asyncio.Event()

    async def hand_over() -> None:
        while True:
            await arrived.wait()
            if native is None and len(buffer) < prefetch // 2:
                # let a busy link's frames gather: one hand-over, not one per read (the native path reads whole
                # chunks: what it pushes at once already arrived together)
                await asyncio.sleep(COALESCE)
            arrived.clear()
            await room()
            if buffer:
                messages = list(buffer)
                buffer.clear()
                drained.set()
                deliver(messages)

    drainer: asyncio.Task[None] | None = None
    native: NativeLink | None = None
    cancels = _Cancels()
    try:
        try:
            try:
                async with asyncio.timeout(open_timeout):
                    await _open(consumer, link, cancels, warm)
            except TimeoutError:
                raise TransportError(
                    f"partition {partition_id}: the link did not open within {open_timeout:g} s (open_timeout)"
                ) from None
            handler = consumer._handler
            link.handler = handler
            _log.debug("partition %s: link open", partition_id)
            opened(handler)
            direct = has_room is not None and frames is None  # (chunks handed over in the read)
            native = _native_link(handler, prefetch, buffer, arrived, partition_id, frames,
                                  deliver if direct else None, deliver_events if direct else None)
            if on_native is not None:
                on_native(native)
            if frames is None:
                drainer = asyncio.create_task(hand_over(), name=f"rxhubs-direct-{partition_id}")

            def buffer_room() -> bool:
                return len(buffer) < prefetch

            room_left = frames.has_room if frames is not None else has_room or buffer_room
            while True:
                if drainer is not None and drainer.done():
                    drainer.result()  # its error, if any
                link.reading = False  # waiting for room is not silence (backpressure)
                await room()
                if len(buffer) >= prefetch:  # a full read is waiting for room downstream
                    drained.clear()
                    await drained.wait()
                    continue
                link.reading = True
                if native is not None and await native.pump(room_left):
                    cancels.check()
                    continue  # full: wait for room
                if not await handler.do_work_async(batch=prefetch):
                    raise TransportError(f"the link to partition {partition_id} closed")
                cancels.check()
                _forget_tags(handler)
        except (asyncio.CancelledError, TransportError):
            raise
        except Exception as exc:
            try:
                error = await consumer._handle_exception(exc)
            except asyncio.CancelledError:
                raise
            except Exception as mapped:
                error = mapped
            raise error from exc
    finally:
        if drainer is not None and not drainer.get_loop().is_closed():  # (a coroutine collected after its loop)
            drainer.cancel()
        try:  # each step bounded: closing over a dead path must not hold up the error it ends with
            await asyncio.wait_for(asyncio.shield(consumer.close()), _CLOSE_BOUND)
            # the SDK leaves a connection it was still opening (no session yet) to the garbage collector
            connection = getattr(link.handler, "_connection", None)
            if connection is not None:
                await asyncio.wait_for(asyncio.shield(connection.close()), _CLOSE_BOUND)
        except Exception as exc:  # closing is best effort; the outcome above is what counts
            _log.debug("closing the consumer of partition %s failed: %r", partition_id, exc)
