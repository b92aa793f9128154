"""AMQP messages as the emulator handles them: split batches, stamp Event Hubs annotations, build replies.

A stored event is the message exactly as it will be delivered: the client's sections (its delivery
annotations too, as the service keeps them) with the Event Hubs message annotations (sequence number, offset,
enqueued time, partition key) encoded once, at append time. ``da_pos`` marks where the delivery annotations
section is or goes: runtime metrics are spliced in there on delivery, merged into the sender's own section
when it has one.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

from rxhubs.emulator._codec import (
    DecodeError,
    Described,
    Raw,
    Symbol,
    Timestamp,
    ULong,
    decode_value,
    encode_list_always8or32,
    encode_value,
    skip_value,
)
from rxhubs.emulator._frames import (
    SEC_APPLICATION_PROPERTIES,
    SEC_DATA,
    SEC_DELIVERY_ANNOTATIONS,
    SEC_FOOTER,
    SEC_HEADER,
    SEC_MESSAGE_ANNOTATIONS,
    SEC_PROPERTIES,
    SEC_VALUE,
)

PROP_SEQ = Symbol("x-opt-sequence-number")
PROP_OFFSET = Symbol("x-opt-offset")
PROP_TIME = Symbol("x-opt-enqueued-time")
PROP_KEY = Symbol("x-opt-partition-key")
_OWN_KEYS = frozenset((PROP_SEQ, PROP_OFFSET, PROP_TIME))

_DA = b"\x00\x53\x71"
_K_SEQ = encode_value(PROP_SEQ) + b"\x81"
_K_OFF = encode_value(PROP_OFFSET)
_K_TIME = encode_value(PROP_TIME) + b"\x83"
_K_KEY = encode_value(PROP_KEY)
_q = struct.Struct(">q")
_II = struct.Struct(">II")
_I = struct.Struct(">I")
_FIXED_SIZE = len(_K_SEQ) + 8 + len(_K_OFF) + 2 + len(_K_TIME) + 8  # annotations map body without the offset


class Prepared(NamedTuple):
    """A received message split for stamping: header, other sections, message annotations, delivery annotations.

    ``delivery`` is the sender's delivery annotations section (``00 53 71`` and a map), or empty.
    """

    head: bytes
    rest: bytes
    annotations: dict[Any, Any]
    delivery: bytes = b""


def _value_end(buf: bytes, pos: int, end: int) -> int:
    """End of the value at ``pos``: a fast path for the encodings messages use, else :func:`skip_value`."""
    if pos < end:
        code = buf[pos]
        if code in (0xA0, 0xA1, 0xC0, 0xC1) and pos + 1 < end:
            stop = pos + 2 + buf[pos + 1]
        elif code in (0xB0, 0xB1, 0xD0, 0xD1) and pos + 5 <= end:
            stop = pos + 5 + _I.unpack_from(buf, pos + 1)[0]
        else:
            return skip_value(buf, pos, end)
        if stop > end:
            raise DecodeError("message section runs past the end")
        return stop
    raise DecodeError("truncated message section")


def _sections(buf: bytes) -> Iterator[tuple[int, int, int, int]]:
    """Yield ``(code, start, value_start, stop)`` for each top-level section of an encoded message.

    Raises:
        DecodeError: A section is not a described section value or runs past the end.
    """
    pos, end = 0, len(buf)
    if not end:
        raise DecodeError("empty message")
    while pos < end:
        if pos + 3 <= end and buf[pos] == 0x00 and buf[pos + 1] == 0x53:
            code = buf[pos + 2]
            value_start = pos + 3
        elif pos + 10 <= end and buf[pos] == 0x00 and buf[pos + 1] == 0x80:  # a ulong descriptor
            code = int.from_bytes(buf[pos + 2 : pos + 10], "big")
            value_start = pos + 10
        else:
            raise DecodeError("message section is not a described value")
        if not SEC_HEADER <= code <= SEC_FOOTER:
            raise DecodeError("unknown message section")
        stop = _value_end(buf, value_start, end)
        yield code, pos, value_start, stop
        pos = stop


def prepare(buf: bytes) -> Prepared:
    """Split a message into its header, its annotations (decoded) and the sections after them (as bytes).

    Every section boundary is checked, so a malformed message is refused here rather than delivered.
    """
    end = len(buf)
    if not end:
        raise DecodeError("empty message")
    head = b""
    delivery = b""
    ann: dict[Any, Any] = {}
    kept_from = -1  # start of the contiguous run of kept sections (the usual, spec-ordered case)
    pieces: list[bytes] | None = None  # only when annotations or a header come after kept sections
    for code, pos, value_start, stop in _sections(buf):
        if code <= SEC_MESSAGE_ANNOTATIONS:
            if kept_from >= 0:  # out of spec order: keep what came before separately
                pieces = (pieces or []) + [buf[kept_from:pos]]
                kept_from = -1
            if code == SEC_HEADER:
                head = buf[pos:stop]
            elif code == SEC_DELIVERY_ANNOTATIONS:
                if buf[value_start] in (0xC1, 0xD1):  # a map (a null section carries nothing)
                    delivery = _DA + buf[value_start:stop]
            elif code == SEC_MESSAGE_ANNOTATIONS:
                value, _ = decode_value(buf, value_start, stop, 1)
                if isinstance(value, dict):
                    ann = value
        elif kept_from < 0:
            kept_from = pos
    tail = buf[kept_from:] if kept_from > 0 else buf if kept_from == 0 else b""
    rest = tail if pieces is None else b"".join([*pieces, tail])
    return Prepared(head, rest, ann, delivery)


def split_batch(payload: bytes) -> tuple[dict[Any, Any], list[bytes]]:
    """The outer annotations and inner messages of a batch (message format 0x80013700).

    Each data section of the outer message holds one complete encoded message.
    """
    ann: dict[Any, Any] = {}
    inner: list[bytes] = []
    for code, _start, value_start, stop in _sections(payload):
        if code == SEC_DATA:
            kind = payload[value_start]
            if kind == 0xA0:
                inner.append(payload[value_start + 2 : stop])
            elif kind == 0xB0:
                inner.append(payload[value_start + 5 : stop])
            else:
                raise DecodeError("batch data section is not binary")
        elif code == SEC_MESSAGE_ANNOTATIONS:
            value, _ = decode_value(payload, value_start, stop, 1)
            if isinstance(value, dict):
                ann = value
    return ann, inner


def partition_key_of(ann: dict[Any, Any]) -> str | None:
    """The partition key a sender set in the message annotations, as text."""
    key = ann.get(PROP_KEY)
    if key is None:
        return None
    if isinstance(key, bytes):
        return key.decode("utf-8", "replace")
    return str(key)


def stamp(message: Prepared, sequence_number: int, offset: int | bytes, enqueued_ms: int,
          partition_key: str | None) -> tuple[bytes, int]:
    """Build the message as delivered: the client's sections plus the Event Hubs annotations.

    Returns:
        The encoded message and the position of its delivery annotations section (after the header), where
        :func:`with_delivery_annotations` adds runtime metrics.
    """
    off = offset if isinstance(offset, bytes) else b"%d" % offset  # bytes: a geo-replicated offset (_geo)
    ann = message.annotations
    head = message.head + message.delivery
    if not ann and partition_key is None:  # the usual case: only our three annotations
        size = _FIXED_SIZE + len(off)
        return b"".join((head, b"\x00\x53\x72\xc1", bytes((size + 1, 6)), _K_SEQ, _q.pack(sequence_number), _K_OFF,
                         bytes((0xA1, len(off))), off, _K_TIME, _q.pack(enqueued_ms), message.rest)), len(message.head)
    body = b"".join((_K_SEQ, _q.pack(sequence_number), _K_OFF, bytes((0xA1, len(off))), off, _K_TIME,
                     _q.pack(enqueued_ms)))
    count = 6
    extra = {k: v for k, v in ann.items() if k not in _OWN_KEYS}
    if PROP_KEY not in extra and partition_key is not None:
        extra[PROP_KEY] = partition_key
    for k, v in extra.items():
        body += encode_value(k) + encode_value(v)
        count += 2
    if len(body) < 255:
        section = b"\x00\x53\x72\xc1" + bytes((len(body) + 1, count)) + body
    else:
        section = b"\x00\x53\x72\xd1" + _II.pack(len(body) + 4, count) + body
    return b"".join((head, section, message.rest)), len(message.head)


def runtime_metrics(last_sequence_number: int, last_offset: int | str, last_enqueued_ms: int, now_ms: int) -> bytes:
    """The delivery annotations section the client reads as last enqueued event properties."""
    return b"\x00\x53\x71" + encode_value({
        Symbol("last_enqueued_sequence_number"): last_sequence_number,
        Symbol("last_enqueued_offset"): str(last_offset) if last_sequence_number >= 0 else "-1",
        Symbol("last_enqueued_time_utc"): Timestamp(last_enqueued_ms),
        Symbol("runtime_info_retrieval_time_utc"): Timestamp(now_ms),
    })


def with_delivery_annotations(stored: bytes, da_pos: int, section: bytes) -> bytes:
    """A stored message with the delivery annotations ``section`` (from :func:`runtime_metrics`) added.

    A message carries at most one delivery annotations section: when the sender's is there, both maps are
    merged into one (the emulator's keys win over the sender's same keys).
    """
    if stored[da_pos : da_pos + 3] != _DA:
        return stored[:da_pos] + section + stored[da_pos:]
    stop = _value_end(stored, da_pos + 3, len(stored))
    theirs = _map_pairs(stored, da_pos + 3, stop)
    ours = _map_pairs(section, 3, len(section))
    own_keys = {decode_value(section, k, v)[0] for k, v, _ in ours}
    kept = [(k, e) for k, v, e in theirs if decode_value(stored, k, v)[0] not in own_keys]
    body = b"".join([stored[k:e] for k, e in kept] + [section[k:e] for k, _, e in ours])
    merged = _DA + b"\xd1" + _II.pack(len(body) + 4, 2 * (len(kept) + len(ours))) + body
    return stored[:da_pos] + merged + stored[stop:]


def _map_pairs(buf: bytes, pos: int, stop: int) -> list[tuple[int, int, int]]:
    """``(key start, value start, pair end)`` for each entry of the encoded map at ``pos``."""
    if buf[pos] == 0xC1:
        count, first = buf[pos + 2], pos + 3
    elif buf[pos] == 0xD1:
        count, first = _I.unpack_from(buf, pos + 5)[0], pos + 9
    else:
        raise DecodeError("delivery annotations are not a map")
    pairs = []
    for _ in range(count // 2):
        value = skip_value(buf, first, stop)
        end = skip_value(buf, value, stop)
        pairs.append((first, value, end))
        first = end
    return pairs


@dataclass(slots=True)
class Request:
    """A management or CBS request: its application properties, raw message id and body value."""

    application_properties: dict[Any, Any]
    message_id: Raw | None
    body: Any


def parse_request(buf: bytes) -> Request:
    """Decode a request message (application properties, raw message id, amqp-value body)."""
    props: dict[Any, Any] = {}
    message_id: Raw | None = None
    body: Any = None
    for code, _start, value_start, stop in _sections(buf):
        if code == SEC_APPLICATION_PROPERTIES:
            value, _ = decode_value(buf, value_start, stop, 1)
            if isinstance(value, dict):
                props = value
        elif code == SEC_PROPERTIES:
            message_id = _first_list_item(buf, value_start, stop)
        elif code == SEC_VALUE or (code == SEC_DATA and body is None):
            body, _ = decode_value(buf, value_start, stop, 1)
    return Request(props, message_id, body)


def _first_list_item(buf: bytes, pos: int, stop: int) -> Raw | None:
    """The raw encoding of a described list's first field (a message id), None when absent or null."""
    decode_value(buf, pos, stop, 1)  # validates the whole properties list
    kind = buf[pos]
    if kind == 0xC0:
        count, first = buf[pos + 2], pos + 3
    elif kind == 0xD0:
        count, first = _I.unpack_from(buf, pos + 5)[0], pos + 9
    else:
        return None
    if not count or buf[first] == 0x40:
        return None
    return Raw(buf[first : skip_value(buf, first, stop)])


def response(correlation_id: Raw | None, status_code: int, description: str, body: Any = None,
             condition: str | None = None) -> bytes:
    """A reply message: correlation id, status code and description (under both keys the SDK reads), body.

    ``condition`` (e.g. ``com.microsoft:server-busy``) goes in the ``error-condition`` application property.
    """
    properties: list[Any] = [None] * 13
    if correlation_id is not None:
        properties[5] = correlation_id
    app = {
        "status-code": status_code,
        "status-description": description,
        "statusCode": status_code,
        "statusDescription": description,
    }
    if condition is not None:
        app["error-condition"] = condition
    out = b"\x00\x53\x73" + encode_list_always8or32(properties)
    out += encode_value(Described(ULong(SEC_APPLICATION_PROPERTIES), app))
    out += b"\x00\x53\x77" + encode_value(body)
    return out
