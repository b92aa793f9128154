"""The direct receive path's native link and message buffers (private; :mod:`rxhubs.transport._direct` runs them).

:func:`_native_link` opens a link's :class:`~rxhubs.transport._native.NativeLink` (or says why not);
:class:`_SignallingDeque` is the consumer's message buffer that wakes the hand-over on each SDK message;
:class:`FrameSink` and :class:`_Forwarding` let a receive loop put events straight into a builder (the Spark
source's Arrow columns) instead of handing messages over.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

from rxhubs.transport._frames import compiled_reader, extensions_disabled, log_receive_path, receive_path
from rxhubs.transport._native import NativeLink
from rxhubs.transport._paths import record

__all__ = ["FrameSink"]

_log = logging.getLogger("rxhubs.transport.azure")


class _SignallingDeque(deque[Any]):
    """The consumer's message buffer, calling ``on_append`` after each message the SDK appends."""

    def __init__(self, on_append: Callable[[], None]) -> None:
        super().__init__()
        self._on_append = on_append

    def append(self, item: Any) -> None:
        super().append(item)
        self._on_append()


class FrameSink(Protocol):
    """Where a receive loop puts events itself instead of handing messages over (the Spark source's builder).

    ``parse`` is :func:`~rxhubs.transport._framing_py.parse`'s contract with a count of events kept instead of a
    list of messages; ``add_message`` takes each message the SDK decoded (a frame ``parse`` handed back, or every
    message on the SDK's own loop), at once, so the order stays; ``pushed(n)`` says ``n`` events arrived;
    ``has_room`` says whether the loop may read on.
    """

    def parse(self, buf: bytes, channel: int, handle: int, start: int = 0) -> tuple[int, int, Any, Any]: ...

    def add_message(self, message: Any) -> None: ...

    def pushed(self, count: int) -> None: ...

    def has_room(self) -> bool: ...


class _Forwarding(deque[Any]):
    """The consumer's message buffer when a :class:`FrameSink` keeps the events: each message goes to it at once."""

    def __init__(self, sink: FrameSink) -> None:
        super().__init__()
        self._sink = sink

    def append(self, item: Any) -> None:
        self._sink.add_message(item)


def _native_link(
    handler: Any, prefetch: int, buffer: deque[Any], arrived: asyncio.Event, partition_id: str,
    frames: FrameSink | None = None, deliver: Callable[[list[Any]], None] | None = None,
    deliver_events: Callable[[list[Any], Any], None] | None = None,
) -> NativeLink | None:
    """The link read natively (:mod:`rxhubs.transport._native`), or None: no compiled reader, or a guard failed.

    With ``deliver``, each chunk's messages are handed over at once, in the read (after any message the SDK put
    in ``buffer`` before them): they become events while young, and no task hop per chunk. With
    ``deliver_events`` too, the reader makes the events itself (``parse_events``: no ``Message`` tuples) and
    each chunk goes to ``deliver_events(events, the last one's delivery annotations)``.
    """
    log_receive_path()
    reader = compiled_reader()
    if reader is None and frames is None:
        record(partition_id, "sdk-loop", receive_path(), chosen=extensions_disabled())
        return None

    def push(messages: list[Any]) -> None:
        if deliver is not None:
            sdk_first()
            deliver(messages)
            return
        buffer.extend(messages)  # (deque's own extend: one signal per chunk, not one per message)
        arrived.set()

    def sdk_first() -> None:
        if buffer and deliver is not None:  # the SDK's own messages (a frame handed back) came first: keep the order
            earlier = list(buffer)
            buffer.clear()
            deliver(earlier)

    def push_events(events: list[Any], delivery_annotations: Any) -> None:
        sdk_first()
        assert deliver_events is not None
        deliver_events(events, delivery_annotations)

    try:
        if frames is not None:
            native = NativeLink(frames.parse, handler, prefetch, frames.pushed)
        else:
            assert reader is not None
            if deliver is not None and deliver_events is not None:
                native = NativeLink(reader.parse_events, handler, prefetch, push_events)
            else:
                native = NativeLink(reader.parse_frames, handler, prefetch, push)
    except NotImplementedError as exc:
        _log.info("partition %s: the SDK's receive loop (%s)", partition_id, exc)
        record(partition_id, "sdk-loop", str(exc), chosen=False)
        return None
    record(partition_id, "native", "compiled frame reader", chosen=True)
    return native
