"""AMQP 1.0 framing for the receive hot path: whole chunks of socket bytes to pyamqp ``Message`` tuples.

One source, two builds, as :mod:`rxhubs.transport._frames_py` (the decoder this module uses): this module runs as
plain Python, and ``_framing_c.py`` (a link to it) is compiled by Cython with the C types of ``_framing_c.pxd``,
which ``cimport``-s the decoder's ``_Reader``, ``_be``, ``_decode`` and ``decode_message`` from ``_frames_c.pxd``.
:mod:`rxhubs.transport._frames` picks one at import; both pass the same tests.

:func:`parse` takes the bytes read from a receive connection and decodes every complete transfer frame of one
link (its channel and handle) into the ``Message`` tuple pyamqp's own ``decode_payload`` builds (the values of
:func:`~rxhubs.transport._frames_py.decode_message`), joining a delivery of several frames (a large event) once
all are in the buffer. It stops at the first frame it leaves to the SDK (another performative, channel or link, an
aborted or resumed transfer, a value type pyamqp itself cannot decode) and hands that frame back whole: the caller
keeps the order of frames.
"""

import importlib
from typing import Any

from rxhubs.transport._frame_errors import FrameError, Unsupported

__all__ = ["FrameError", "Unsupported", "decode_message", "message_event", "parse", "parse_events", "parse_frames"]

# The decoder's names (_Reader, _be, _decode, decode_message), as Python objects: the compiled build has them from
# the .pxd as C types and functions instead (a Python import of them does not compile; mypy is told in
# pyproject.toml). The Python build takes the Python build of the decoder, whether or not one is compiled.
_half = importlib.import_module("rxhubs.transport._frames_" + ("py" if __name__.endswith("_py") else "c"))
_NAMES = ("_Reader", "_be", "_decode", "decode_message", "message_event")
globals().update({name: getattr(_half, name) for name in _NAMES if hasattr(_half, name)})


def parse(buf: bytes, channel: int, handle: int, start: int = 0) -> tuple[list[Any], int, object, object]:
    """Decode the complete frames of ``buf[start:]``: ``(messages, consumed, other, last_delivery_id)``.

    ``messages``: one pyamqp ``Message`` per transfer of link ``handle`` on ``channel``, in order (a delivery of
    several frames once they are all in ``buf``); keep-alive frames are consumed silently. It stops after the first
    frame it leaves to the SDK, returned as ``other = (frame_channel, frame_bytes)`` (``consumed`` includes it);
    ``other`` is None when it stopped at an incomplete frame or delivery (``consumed`` is where it starts) or the
    end of ``buf``. ``last_delivery_id``: the last message's (None without one). Raises :class:`FrameError` for
    bytes that are not AMQP frames (a size under 8 or over 2**31, a data offset under 2, a SASL frame, a transfer
    whose performative or payload is malformed). See :func:`parse_frames` for an example.
    """
    return parse_frames(buf, channel, handle, start)[:4]


def parse_frames(buf: bytes, channel: int, handle: int, start: int = 0) -> tuple[list[Any], int, object, object, int]:
    """:func:`parse`, and how many transfer frames the messages took (the session counts frames, the link deliveries).

    Only the last message's delivery annotations are decoded (the partition's last-enqueued metrics, which the
    receiver reads from a chunk's last event): the others' are None, their bytes stepped over.

    Example (deliveries split at every boundary: ``tests/transport/test_frames_multi.py``):
        >>> parse_frames(b"", 1, 0)
        ([], 0, None, None, 0)
    """
    r = _Reader(buf, 0, len(buf))
    messages, pos, other, last, frames, tail, tail_end, _ = _read(r, buf, channel, handle, start, False)
    if tail >= 0:  # the last message came from one frame, its delivery annotations stepped over: decode it whole
        try:
            messages[len(messages) - 1] = _decode(r, tail, tail_end, True, False)
        except Unsupported:  # (a value pyamqp cannot decode there either: they stay None)
            pass
    return messages, pos, other, last, frames


def parse_events(buf: bytes, channel: int, handle: int, start: int = 0) -> tuple[list[Any], int, object, object, int,
                                                                               object]:
    """:func:`parse_frames` with the receive path's events instead of messages, and the last one's delivery annotations.

    ``(events, consumed, other, last_delivery_id, frames, delivery_annotations)``: each message becomes the
    :class:`~rxhubs.Event` that :func:`~rxhubs.transport._frames_py.message_event` makes of it (a plain one
    straight from the frame, without a ``Message`` tuple); ``delivery_annotations`` are the last event's (the
    partition's last-enqueued metrics; None without events or annotations). A message without a sequence number
    raises the retriable :class:`FrameError` (nothing of the chunk is handed on). Example:

        >>> parse_events(b"", 1, 0)
        ([], 0, None, None, 0, None)
    """
    r = _Reader(buf, 0, len(buf))
    events, pos, other, last, frames, tail, tail_end, delivery = _read(r, buf, channel, handle, start, True)
    if tail >= 0:
        try:
            delivery = _decode(r, tail, tail_end, True, False)[1]  # (the Message's delivery_annotations)
        except Unsupported:
            pass
    return events, pos, other, last, frames, delivery


def _read(r: _Reader, buf: bytes, channel: int, handle: int, start: int, events: bool) -> tuple[Any, ...]:
    """:func:`parse_frames` (``events``: :func:`parse_events`), and where the last message's payload is.

    That is: where it starts and ends if it came from one frame (else -1), and the delivery annotations of a last
    message joined from several frames (``events`` only).
    """
    messages: list[Any] = []
    view = buf
    n = len(buf)
    tail = tail_end = -1
    pos = start
    last = delivery = None
    frames = 0
    while n - pos >= 8:
        size = _be(view, pos, 4)
        if size < 8 or size > 0x7FFFFFFF:
            raise FrameError(f"a frame size of {size} bytes")
        doff = view[pos + 4]
        if doff < 2:
            raise FrameError(f"a frame data offset of {doff}")
        if view[pos + 5] != 0:
            raise FrameError(f"a frame of type {view[pos + 5]} (not AMQP) on an open connection")
        if n - pos < size:
            break  # incomplete: wait for more bytes
        end = pos + size
        frame_channel = _be(view, pos + 6, 2)
        if size == 8:  # an empty frame: a keep-alive
            pos = end
            continue
        body = pos + doff * 4
        if body > end:
            raise FrameError(f"a frame data offset of {doff} past its size of {size} bytes")
        if frame_channel != channel or doff != 2 or not _is_transfer(view, body, end):
            return messages, end, (frame_channel, buf[pos:end]), last, frames, tail, tail_end, delivery
        try:
            payload = _transfer(r, body, end, handle)
        except Unsupported:
            return messages, end, (frame_channel, buf[pos:end]), last, frames, tail, tail_end, delivery
        delivery_id = r.delivery_id
        if payload < 0 or delivery_id is None:  # another link's transfer, or one this reader leaves to the SDK
            return messages, end, (frame_channel, buf[pos:end]), last, frames, tail, tail_end, delivery
        if r.more:
            joined = _gather(r, buf, n, payload, end, channel, handle, delivery_id)
            if joined is None:
                break  # not every frame of the delivery is here yet: wait for more bytes
            if not joined:
                return messages, end, (frame_channel, buf[pos:end]), last, frames, tail, tail_end, delivery
            try:
                message = decode_message(joined[0], 0, len(joined[0]))
            except (Unsupported, FrameError):  # the SDK decides on a joined message rxhubs cannot read
                return messages, end, (frame_channel, buf[pos:end]), last, frames, tail, tail_end, delivery
            if events:
                delivery = message.delivery_annotations
                message = message_event(message)
            messages.append(message)
            tail = -1
            last = delivery_id
            frames += joined[2]
            pos = joined[1]
            continue
        try:
            message = _decode(r, payload, end, False, events)
        except Unsupported:
            return messages, end, (frame_channel, buf[pos:end]), last, frames, tail, tail_end, delivery
        messages.append(message)
        tail = payload
        tail_end = end
        last = delivery_id
        frames += 1
        pos = end
    return messages, pos, None, last, frames, tail, tail_end, delivery


def _gather(r: _Reader, buf: bytes, n: int, payload: int, end: int, channel: int, handle: int, did: Any) -> Any:
    """The rest of a delivery after its first frame: ``(message bytes, end, frames)``, None (not all here) or ().

    ``()``: a frame the SDK must see comes first (another channel, link, delivery or performative; aborted).
    """
    parts = [buf[payload:end]]
    view = buf
    pos = end
    frames = 1
    while True:
        if n - pos < 8:
            return None
        size = _be(view, pos, 4)
        if size < 8 or size > 0x7FFFFFFF:
            raise FrameError(f"a frame size of {size} bytes")
        doff = view[pos + 4]
        if doff < 2 or view[pos + 5] != 0:
            raise FrameError(f"a frame data offset of {doff} or type {view[pos + 5]} inside a delivery")
        if n - pos < size:
            return None
        stop = pos + size
        if size == 8:
            pos = stop
            continue
        body = pos + doff * 4
        if body > stop:
            raise FrameError(f"a frame data offset of {doff} past its size of {size} bytes")
        if _be(view, pos + 6, 2) != channel or doff != 2 or not _is_transfer(view, body, stop):
            return ()
        try:
            start = _transfer(r, body, stop, handle)
        except Unsupported:
            return ()
        next_id = r.delivery_id
        more = r.more
        if start < 0 or (next_id is not None and next_id != did):  # (a continuation may omit its delivery id)
            return ()
        parts.append(buf[start:stop])
        frames += 1
        pos = stop
        if not more:
            return b"".join(parts), pos, frames


def _is_transfer(buf: bytes, body: int, end: int) -> bool:
    return end - body >= 4 and buf[body] == 0x00 and buf[body + 1] == 0x53 and buf[body + 2] == 0x14


def _transfer(r: _Reader, body: int, end: int, handle: int) -> int:
    """Where a transfer's payload starts; -1 if the SDK must see it (not this link's, resumed or aborted).

    Its delivery id and ``more`` flag are left in ``r.delivery_id`` and ``r.more``: no list of its fields is made.
    """
    r.pos = body + 3
    r.end = end
    r.depth = 0
    code = r.u8()
    if code == 0x45:
        raise FrameError("a transfer performative without fields")
    if code != 0xC0 and code != 0xD0:
        raise FrameError(f"a transfer performative that is not a list (constructor 0x{code:02x})")
    count = r.count(code == 0xD0)
    if count < 2:
        raise FrameError("a transfer performative without handle or delivery id")
    first = r.value()  # every field is decoded (a value pyamqp cannot decode is the SDK's), the list is not kept
    delivery_id = r.value()
    more = False
    leave = False
    for index in range(2, count):
        value = r.value()
        if index == 5:
            more = bool(value)
        elif (index == 8 or index == 9) and value:  # resume, aborted
            leave = True
    r.delivery_id = delivery_id
    r.more = more
    if first != handle or type(first) is not int or leave:
        r.delivery_id = None
        return -1
    payload: int = r.pos
    return payload


try:  # the compiled build: the hash setup.py compiled in (a C macro, declared in the .pxd); rxhubs/_extensions.py
    SOURCE_SHA256: str = RXHUBS_SOURCE_SHA256.decode("ascii")
except NameError:  # the pure-Python build has none
    SOURCE_SHA256 = ""
