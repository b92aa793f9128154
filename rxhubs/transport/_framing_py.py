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

__all__ = ["FrameError", "Unsupported", "decode_message", "parse", "parse_frames"]

# The decoder's names (_Reader, _be, _decode, decode_message), as Python objects: the compiled build has them from
# the .pxd as C types and functions instead (a Python import of them does not compile; mypy is told in
# pyproject.toml). The Python build takes the Python build of the decoder, whether or not one is compiled.
_half = importlib.import_module("rxhubs.transport._frames_" + ("py" if __name__.endswith("_py") else "c"))
globals().update({name: getattr(_half, name) for name in ("_Reader", "_be", "_decode", "decode_message")
                  if hasattr(_half, name)})


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

    Example (deliveries split at every boundary: ``tests/transport/test_frames_multi.py``):
        >>> parse_frames(b"", 1, 0)
        ([], 0, None, None, 0)
    """
    messages: list[Any] = []
    view = buf
    r = _Reader(buf, 0, len(buf))
    n = len(buf)
    pos = start
    last = None
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
            return messages, end, (frame_channel, buf[pos:end]), last, frames
        try:
            delivery_id, payload, more = _transfer(r, body, end, handle)
        except Unsupported:
            return messages, end, (frame_channel, buf[pos:end]), last, frames
        if payload < 0 or delivery_id is None:  # another link's transfer, or one this reader leaves to the SDK
            return messages, end, (frame_channel, buf[pos:end]), last, frames
        if more:
            joined = _gather(r, buf, n, payload, end, channel, handle, delivery_id)
            if joined is None:
                break  # not every frame of the delivery is here yet: wait for more bytes
            if not joined:
                return messages, end, (frame_channel, buf[pos:end]), last, frames
            try:
                message = decode_message(joined[0], 0, len(joined[0]))
            except (Unsupported, FrameError):  # the SDK decides on a joined message rxhubs cannot read
                return messages, end, (frame_channel, buf[pos:end]), last, frames
            messages.append(message)
            last = delivery_id
            frames += joined[2]
            pos = joined[1]
            continue
        try:
            message = _decode(r, payload, end)
        except Unsupported:
            return messages, end, (frame_channel, buf[pos:end]), last, frames
        messages.append(message)
        last = delivery_id
        frames += 1
        pos = end
    return messages, pos, None, last, frames


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
            next_id, start, more = _transfer(r, body, stop, handle)
        except Unsupported:
            return ()
        if start < 0 or (next_id is not None and next_id != did):  # (a continuation may omit its delivery id)
            return ()
        parts.append(buf[start:stop])
        frames += 1
        pos = stop
        if not more:
            return b"".join(parts), pos, frames


def _is_transfer(buf: bytes, body: int, end: int) -> bool:
    return end - body >= 4 and buf[body] == 0x00 and buf[body + 1] == 0x53 and buf[body + 2] == 0x14


def _transfer(r: _Reader, body: int, end: int, handle: int) -> tuple[Any, int, bool]:
    """A transfer's delivery id, where its payload starts and its ``more`` flag; payload -1 if the SDK must see it.

    (Not this link's, resumed or aborted: those keep pyamqp's handling.)
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
    fields = []
    for _ in range(count):
        fields.append(r.value())
    if fields[0] != handle or type(fields[0]) is not int:
        return None, -1, False
    for index in (8, 9):  # resume, aborted
        if count > index and fields[index]:
            return None, -1, False
    return fields[1], r.pos, bool(count > 5 and fields[5])


try:  # the compiled build: the hash setup.py compiled in (a C macro, declared in the .pxd); rxhubs/_extensions.py
    SOURCE_SHA256: str = RXHUBS_SOURCE_SHA256.decode("ascii")
except NameError:  # the pure-Python build has none
    SOURCE_SHA256 = ""
