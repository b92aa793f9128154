"""AMQP messages as the emulator handles them: split batches, stamp Event Hubs annotations, build replies.

A stored event is the message exactly as it will be delivered: the client's sections with the Event Hubs
message annotations (sequence number, offset, enqueued time, partition key) encoded once, at append time.
``da_pos`` marks where delivery annotations (runtime metrics) are spliced in on delivery.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

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

_K_SEQ = encode_value(PROP_SEQ) + b"\x81"
_K_OFF = encode_value(PROP_OFFSET)
_K_TIME = encode_value(PROP_TIME) + b"\x83"
_K_KEY = encode_value(PROP_KEY)
_q = struct.Struct(">q")
_II = struct.Struct(">II")


@dataclass(frozen=True, slots=True)
class Section:
    """One top-level section of a message: its descriptor code and its span in the message bytes."""

    code: int
    start: int
    value_start: int
    stop: int


def sections(buf: bytes) -> list[Section]:
    """Split an encoded message into its sections without decoding them.

    Raises:
        DecodeError: A section is not ``0x00 0x53 <code> <value>`` or runs past the end.
    """
    out: list[Section] = []
    pos, end = 0, len(buf)
    while pos < end:
        if pos + 3 > end or buf[pos] != 0x00 or buf[pos + 1] != 0x53:
            # the client always uses a smallulong descriptor; accept ulong too for other clients
            if pos + 10 <= end and buf[pos] == 0x00 and buf[pos + 1] == 0x80:
                code = int.from_bytes(buf[pos + 2 : pos + 10], "big")
                value_start = pos + 10
            else:
                raise DecodeError("message section is not a described value")
        else:
            code = buf[pos + 2]
            value_start = pos + 3
        if not SEC_HEADER <= code <= 0x78:
            raise DecodeError("unknown message section")
        stop = skip_value(buf, value_start, end)
        out.append(Section(code, pos, value_start, stop))
        pos = stop
    if not out:
        raise DecodeError("empty message")
    return out


def batch_messages(payload: bytes) -> list[bytes]:
    """The inner messages of a batch (message format 0x80013700): one per data section."""
    inner: list[bytes] = []
    for sec in sections(payload):
        if sec.code == SEC_DATA:
            value, _ = decode_value(payload, sec.value_start, sec.stop, 1)
            if not isinstance(value, bytes):
                raise DecodeError("batch data section is not binary")
            inner.append(value)
    return inner


def message_annotations(buf: bytes, secs: list[Section]) -> dict[Any, Any]:
    """The message annotations map (empty when the message has none)."""
    for sec in secs:
        if sec.code == SEC_MESSAGE_ANNOTATIONS:
            value, _ = decode_value(buf, sec.value_start, sec.stop, 1)
            return value if isinstance(value, dict) else {}
    return {}


def partition_key_of(ann: dict[Any, Any]) -> str | None:
    """The partition key a sender set in the message annotations, as text."""
    key = ann.get(PROP_KEY)
    if key is None:
        return None
    if isinstance(key, bytes):
        return key.decode("utf-8", "replace")
    return str(key)


def stamp(buf: bytes, secs: list[Section], ann: dict[Any, Any], sequence_number: int, offset: int,
          enqueued_ms: int, partition_key: str | None) -> tuple[bytes, int]:
    """Build the message as delivered: the client's sections plus the Event Hubs annotations.

    Returns:
        The encoded message and the position where delivery annotations go (after the header).
    """
    head = b""
    rest: list[bytes] = []
    for sec in secs:
        if sec.code == SEC_HEADER:
            head = buf[sec.start : sec.stop]
        elif sec.code in (SEC_DELIVERY_ANNOTATIONS, SEC_MESSAGE_ANNOTATIONS):
            continue
        else:
            rest.append(buf[sec.start : sec.stop])
    off = str(offset).encode()
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
        ann_section = b"\x00\x53\x72\xc1" + bytes((len(body) + 1, count)) + body
    else:
        ann_section = b"\x00\x53\x72\xd1" + _II.pack(len(body) + 4, count) + body
    return head + ann_section + b"".join(rest), len(head)


def runtime_metrics(last_sequence_number: int, last_offset: int, last_enqueued_ms: int, now_ms: int) -> bytes:
    """The delivery annotations section the client reads as last enqueued event properties."""
    return b"\x00\x53\x71" + encode_value({
        Symbol("last_enqueued_sequence_number"): last_sequence_number,
        Symbol("last_enqueued_offset"): str(last_offset) if last_sequence_number >= 0 else "-1",
        Symbol("last_enqueued_time_utc"): Timestamp(last_enqueued_ms),
        Symbol("runtime_info_retrieval_time_utc"): Timestamp(now_ms),
    })


@dataclass(slots=True)
class Request:
    """A management or CBS request: its application properties, raw message id and body value."""

    application_properties: dict[Any, Any]
    message_id: Raw | None
    body: Any


def parse_request(buf: bytes) -> Request:
    """Decode a request message (application properties, message id, amqp-value body)."""
    secs = sections(buf)
    props: dict[Any, Any] = {}
    message_id: Raw | None = None
    body: Any = None
    for sec in secs:
        if sec.code == SEC_APPLICATION_PROPERTIES:
            value, _ = decode_value(buf, sec.value_start, sec.stop, 1)
            if isinstance(value, dict):
                props = value
        elif sec.code == SEC_PROPERTIES:
            pos = sec.value_start
            code = buf[pos]
            if code in (0xC0, 0xD0):
                pos += 3 if code == 0xC0 else 9
                count = buf[sec.value_start + 2] if code == 0xC0 else _II.unpack_from(buf, sec.value_start + 1)[1]
                if count and pos < sec.stop:
                    stop = skip_value(buf, pos, sec.stop)
                    if buf[pos] != 0x40:
                        message_id = Raw(buf[pos:stop])
        elif sec.code == SEC_VALUE or (sec.code == SEC_DATA and body is None):
            body, _ = decode_value(buf, sec.value_start, sec.stop, 1)
    return Request(props, message_id, body)


def response(correlation_id: Raw | None, status_code: int, description: str, body: Any = None) -> bytes:
    """A reply message: correlation id, status code and description (under both keys the SDK reads), body."""
    properties: list[Any] = [None] * 13
    if correlation_id is not None:
        properties[5] = correlation_id
    app = {
        "status-code": status_code,
        "status-description": description,
        "statusCode": status_code,
        "statusDescription": description,
    }
    out = b"\x00\x53\x73" + encode_list_always8or32(properties)
    out += encode_value(Described(ULong(SEC_APPLICATION_PROPERTIES), app))
    out += b"\x00\x53\x77" + encode_value(body)
    return out
