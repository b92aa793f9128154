"""AMQP 1.0 encoder for the send hot path: a run of outgoing events to the transfer frames that deliver them.

The mirror of the frame reader (:mod:`rxhubs.transport._frames_py`), in the same one-source-two-builds layout:
this module runs as plain Python, and ``_encode_c.py`` (a link to this file) is compiled by Cython with the C
types of ``_encode_c.pxd`` when the package is built with a compiler. :mod:`rxhubs.transport._encode` picks one
at import; both pass the same tests.

:func:`batch_frames` packs events into Event Hubs batch messages (message format ``0x80013700``: one data
section per event, each holding a whole encoded AMQP message) that fit the link's maximum message size, and
encodes each batch message as the transfer frames of one delivery, split at the peer's maximum frame size, all
joined into one buffer for one socket write. The bytes are those azure-eventhub's pyamqp would send for the same
events put through ``EventDataBatch.add`` and ``send_batch``: the same sections, the same smallest encodings, the
partition key as ``x-opt-partition-key`` with a durable header on the batch and on each event, the same transfer
fields (the tests compare them byte for byte with pyamqp's encoder and decode them with its decoder).

Application property values may be ``None``, ``bool``, ``str``, ``bytes``, ``float`` and ``int``: an int within
32 bits is an AMQP int (as pyamqp encodes it), a larger one an AMQP long (pyamqp refuses those). Any other value
raises :class:`Unsupported` (the caller sends those events through the SDK).
"""

import struct
from typing import Any

from rxhubs.transport._frame_errors import Unsupported

__all__ = ["BATCH_FORMAT", "Unsupported", "batch_frames", "batch_frames_columns", "encode_event", "section_overhead"]

#: The message format of an Event Hubs batch message.
BATCH_FORMAT = 0x80013700

_u8 = struct.Struct(">B").pack
_u32 = struct.Struct(">I").pack
_i32 = struct.Struct(">i").pack
_i64 = struct.Struct(">q").pack
_f64 = struct.Struct(">d").pack
_b8 = struct.Struct(">b").pack
_DATA8 = b"\x00\x53\x75\xa0"  # a data section: descriptor, vbin8
_DATA32 = b"\x00\x53\x75\xb0"
_APP = b"\x00\x53\x74"  # application properties section descriptor
#: A durable header (pyamqp's Header(durable=True): a list of five fields) and the partition key annotation's start.
_KEYED = b"\x00\x53\x70\xc0\x07\x05\x56\x01\x40\x40\x40\x40" + b"\x00\x53\x72"
_KEY_SYMBOL = b"\xa3\x13x-opt-partition-key"
_TRANSFER = b"\x00\x53\x14"
_TAIL = b"\x40\x40\x40\x40\x40"  # rcv-settle-mode, state, resume, aborted, batchable: null


def section_overhead(size: int) -> int:
    """Bytes a data section adds around ``size`` bytes of content (5 up to 255 bytes, else 8).

    Example:
        >>> section_overhead(255), section_overhead(256)
        (5, 8)
    """
    return 5 if size < 256 else 8


def _data(size: int) -> bytes:
    return _DATA8 + _u8(size) if size < 256 else _DATA32 + _u32(size)


def _string(value: bytes, small: bytes, large: bytes) -> bytes:
    n = len(value)
    return small + _u8(n) + value if n < 256 else large + _u32(n) + value


def _uint(value: int) -> bytes:
    if value == 0:
        return b"\x43"
    if value < 256:
        return b"\x52" + _u8(value)
    return b"\x70" + _u32(value)


def _value(value: Any) -> bytes:
    """One application property value, encoded as pyamqp's ``encode_unknown`` does."""
    if value is None:
        return b"\x40"
    kind = type(value)
    if kind is str:
        return _string(value.encode("utf-8"), b"\xa1", b"\xb1")
    if kind is bool:
        return b"\x56\x01" if value else b"\x56\x00"
    if kind is int:
        if -128 <= value <= 127:
            return b"\x54" + _b8(value)
        if -2147483648 <= value <= 2147483647:
            return b"\x71" + _i32(value)
        if -9223372036854775808 <= value <= 9223372036854775807:
            return b"\x81" + _i64(value)
        raise Unsupported(f"an integer property value outside 64 bits ({value})")
    if kind is float:
        return b"\x82" + _f64(value)
    if kind is bytes or kind is bytearray:
        return _string(bytes(value), b"\xa0", b"\xb0")
    raise Unsupported(f"a property value of type {kind.__name__}")


def _map(items: list[bytes], count: int) -> bytes:
    body = b"".join(items)
    n = len(body)
    if count <= 255 and n < 255:
        return b"\xc1" + _u8(n + 1) + _u8(count) + body
    return b"\xd1" + _u32(n + 4) + _u32(count) + body


def _properties(properties: Any) -> bytes:
    """The application properties section of ``properties`` (b"" for none)."""
    if not properties:
        return b""
    items = []
    for key, value in properties.items():
        if type(key) is not str:
            raise Unsupported(f"a property name of type {type(key).__name__}")
        items.append(_string(key.encode("utf-8"), b"\xa1", b"\xb1"))
        items.append(_value(value))
    return _APP + _map(items, 2 * len(properties))


def _prefix(key: Any) -> bytes:
    """What a message routed by partition ``key`` starts with (b"" for no key): header and annotations sections."""
    if key is None:
        return b""
    if type(key) is not str:
        raise Unsupported(f"a partition key of type {type(key).__name__}")
    return _KEYED + _map([_KEY_SYMBOL, _string(key.encode("utf-8"), b"\xa1", b"\xb1")], 2)


def encode_event(body: bytes, properties: Any, key: Any) -> bytes:
    """One event's whole AMQP message (what a batch message's data section holds), as pyamqp encodes it.

    Example:
        >>> from azure.eventhub._pyamqp._decode import decode_payload
        >>> m = decode_payload(memoryview(encode_event(b"hi", {"unit": "C"}, "device-7")))
        >>> m.data, m.application_properties, m.message_annotations
        ([b'hi'], {b'unit': b'C'}, {b'x-opt-partition-key': b'device-7'})
    """
    return _prefix(key) + _properties(properties) + _data(len(body)) + body


def _head(size: int, channel: int, handle: int, delivery_id: int, tag: int, fmt: int, more: bool) -> bytes:
    """A transfer frame's header and performative (every field, as pyamqp encodes them), before its payload."""
    fields = (_uint(handle) + _uint(delivery_id) + b"\xa0\x04" + _u32(tag) + _uint(fmt) + b"\x56\x00"
              + (b"\x56\x01" if more else b"\x56\x00") + _TAIL)
    n = len(fields)
    if n < 255:
        perf = _TRANSFER + b"\xc0" + _u8(n + 1) + b"\x0b" + fields
    else:  # (not reached: the fields take at most 33 bytes)
        perf = _TRANSFER + b"\xd0" + _u32(n + 4) + _u32(11) + fields
    return _u32(8 + len(perf) + size) + b"\x02\x00" + struct.pack(">H", channel) + perf


def _overhead(channel: int, handle: int, delivery_id: int, tag: int, fmt: int) -> int:
    return len(_head(0, channel, handle, delivery_id, tag, fmt, False))


def _frames(out: list[Any], pieces: list[Any], size: int, channel: int, handle: int, delivery_id: int, tag: int,
            fmt: int, max_frame: int) -> None:
    """Add the transfer frames of one delivery of ``size`` payload bytes (``pieces``) to ``out``.

    As pyamqp's session splits a delivery: each frame but the last carries ``max_frame`` minus the transfer's
    overhead, with ``more`` set; every frame carries the delivery id and tag.
    """
    room = max_frame - _overhead(channel, handle, delivery_id, tag, fmt)
    if room <= 0:
        raise Unsupported(f"a peer max frame size of {max_frame} bytes leaves no room for a payload")
    if size <= room:
        out.append(_head(size, channel, handle, delivery_id, tag, fmt, False))
        out.extend(pieces)
        return
    payload = memoryview(b"".join(pieces))
    start = 0
    while size - start > room:
        out.append(_head(room, channel, handle, delivery_id, tag, fmt, True))
        out.append(payload[start:start + room])
        start += room
    out.append(_head(size - start, channel, handle, delivery_id, tag, fmt, False))
    out.append(payload[start:])


def batch_frames(
    events: list[Any], start: int, key: Any, max_message: int, max_frame: int, channel: int, handle: int,
    delivery_id: int, tag: int, max_deliveries: int,
) -> tuple[bytes, list[int]]:
    """Encode ``events[start:]`` (objects with ``body`` and ``properties``) as transfer frames of batch messages.

    Returns ``(data, ends)``: the frames of up to ``max_deliveries`` deliveries, joined, and for each delivery
    the index in ``events`` after its last event. Delivery ``i`` has id ``delivery_id + i`` and tag
    ``tag + i`` (both modulo 2**32), on ``channel`` and link ``handle``. Each batch message, partition ``key``
    (a str, or None) on it and on every event, stays within ``max_message`` bytes; each frame within
    ``max_frame``. An event too large for a batch message of its own ends the run: ``ends`` stops before it
    (empty when it is the first). Raises :class:`Unsupported` for a property the encoder does not take.

    Example:
        >>> from types import SimpleNamespace as Ev
        >>> data, ends = batch_frames([Ev(body=b"a", properties={}), Ev(body=b"b", properties={})],
        ...                           0, None, 1024, 65536, 1, 0, 7, 8, 10)
        >>> ends, data[:4] == len(data).to_bytes(4, "big")
        ([2], True)
    """
    return _batch(events, None, False, start, key, max_message, max_frame, channel, handle, delivery_id, tag,
                  max_deliveries)


def batch_frames_columns(
    bodies: list[Any], properties: Any, start: int, key: Any, max_message: int, max_frame: int, channel: int,
    handle: int, delivery_id: int, tag: int, max_deliveries: int,
) -> tuple[bytes, list[int]]:
    """:func:`batch_frames` for events given as columns (a bulk send: no object per event), the same bytes.

    ``bodies``: the events' bodies (``bytes``); ``properties``: one mapping that every event carries, or a list of
    one mapping per event (events sharing one mapping object have its section encoded once per run of them).

    Example:
        >>> from types import SimpleNamespace as Ev
        >>> columns = batch_frames_columns([b"a", b"b"], {"k": "v"}, 0, None, 1024, 65536, 1, 0, 7, 8, 10)
        >>> columns == batch_frames([Ev(body=b"a", properties={"k": "v"}), Ev(body=b"b", properties={"k": "v"})],
        ...                         0, None, 1024, 65536, 1, 0, 7, 8, 10)
        True
    """
    return _batch(bodies, properties, True, start, key, max_message, max_frame, channel, handle, delivery_id, tag,
                  max_deliveries)


def _batch(
    items: list[Any], properties: Any, columns: bool, start: int, key: Any, max_message: int, max_frame: int,
    channel: int, handle: int, delivery_id: int, tag: int, max_deliveries: int,
) -> tuple[bytes, list[int]]:
    """The loop of both entry points: ``items`` are events, or (``columns``) bodies with ``properties`` beside."""
    prefix = _prefix(key)
    base = len(prefix)
    out: list[Any] = []
    ends: list[int] = []
    n = len(items)
    i = start
    last_props: Any = None
    last_section = b""
    mask = 0xFFFFFFFF
    per_event = columns and type(properties) is list
    if columns and not per_event and properties:  # one mapping for every event: its section, once
        last_section = _properties(properties)
        last_props = properties
    while i < n and len(ends) < max_deliveries:
        pieces: list[Any] = [prefix] if base else []
        size = base
        first = i
        while i < n:
            if columns:
                body = items[i]
                props = properties[i] if per_event else properties
            else:
                event = items[i]
                body = event.body
                props = event.properties
            if type(body) is not bytes:
                raise Unsupported(f"an event body of type {type(body).__name__}")
            if props is not last_props:  # (callers share one mapping between events with the same properties)
                last_section = _properties(props)
                last_props = props
            length = base + len(last_section) + section_overhead(len(body)) + len(body)
            grown = size + section_overhead(length) + length
            if grown > max_message:
                break
            pieces.append(_data(length))
            if base:
                pieces.append(prefix)
            if last_section:
                pieces.append(last_section)
            pieces.append(_data(len(body)))
            pieces.append(body)
            size = grown
            i += 1
        if i == first:  # the event alone is over the maximum message size
            break
        number = len(ends)
        _frames(out, pieces, size, channel, handle, (delivery_id + number) & mask, (tag + number) & mask,
                BATCH_FORMAT, max_frame)
        ends.append(i)
    return b"".join(out), ends


try:  # the compiled build: the hash setup.py compiled in (a C macro, declared in the .pxd); rxhubs/_extensions.py
    SOURCE_SHA256: str = RXHUBS_SOURCE_SHA256.decode("ascii")  # type: ignore[name-defined]
except NameError:  # the pure-Python build has none
    SOURCE_SHA256 = ""
