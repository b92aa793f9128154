"""AMQP 1.0 frames and performatives as the azure-eventhub client reads them.

The client reads performative fields by position, so every performative is encoded with its full field
list (never trimmed, never ``list0``). Transfers to consumers, the hot path, are packed with one struct call.
"""

from __future__ import annotations

import struct
from typing import Any

from rxhubs.emulator._codec import (
    Array,
    DecodeError,
    Described,
    Raw,
    Symbol,
    UByte,
    UInt,
    ULong,
    UShort,
    decode_value,
    encode_list_always8or32,
)

# frame types
AMQP_FRAME = 0
SASL_FRAME = 1

# performative descriptors
OPEN = 0x10
BEGIN = 0x11
ATTACH = 0x12
FLOW = 0x13
TRANSFER = 0x14
DISPOSITION = 0x15
DETACH = 0x16
END = 0x17
CLOSE = 0x18
ERROR = 0x1D
SOURCE = 0x28
TARGET = 0x29
ACCEPTED = 0x24
REJECTED = 0x25
SASL_MECHANISMS = 0x40
SASL_INIT = 0x41
SASL_OUTCOME = 0x44

# message sections
SEC_HEADER = 0x70
SEC_DELIVERY_ANNOTATIONS = 0x71
SEC_MESSAGE_ANNOTATIONS = 0x72
SEC_PROPERTIES = 0x73
SEC_APPLICATION_PROPERTIES = 0x74
SEC_DATA = 0x75
SEC_SEQUENCE = 0x76
SEC_VALUE = 0x77
SEC_FOOTER = 0x78

BATCH_FORMAT = 0x80013700

AMQP_HEADER = b"AMQP\x00\x01\x00\x00"
SASL_HEADER = b"AMQP\x03\x01\x00\x00"

_FRAME_HEADER = struct.Struct(">IBBH")
EMPTY_FRAME = _FRAME_HEADER.pack(8, 2, AMQP_FRAME, 0)

# error conditions
NOT_FOUND = "amqp:not-found"
LINK_STOLEN = "amqp:link:stolen"
RESOURCE_LIMIT = "amqp:resource-limit-exceeded"
MESSAGE_SIZE_EXCEEDED = "amqp:link:message-size-exceeded"
DECODE_ERROR = "amqp:decode-error"
FRAMING_ERROR = "amqp:connection:framing-error"
NOT_ALLOWED = "amqp:not-allowed"
INVALID_FIELD = "amqp:invalid-field"
NOT_IMPLEMENTED = "amqp:not-implemented"
INTERNAL_ERROR = "amqp:internal-error"
UNAUTHORIZED = "amqp:unauthorized-access"
DETACH_FORCED = "amqp:link:detach-forced"
CONNECTION_FORCED = "amqp:connection:forced"
UNATTACHED_HANDLE = "amqp:session:unattached-handle"
ARGUMENT_ERROR = "com.microsoft:argument-error"


def frame(channel: int, body: bytes, frame_type: int = AMQP_FRAME) -> bytes:
    """Wrap an encoded performative (plus payload) in a frame header."""
    return _FRAME_HEADER.pack(8 + len(body), 2, frame_type, channel) + body


def performative(code: int, fields: list[Any]) -> bytes:
    """Encode a performative (descriptor + full field list)."""
    return b"\x00\x53" + bytes((code,)) + encode_list_always8or32(fields)


def error(condition: str, description: str | None = None, info: dict[Any, Any] | None = None) -> Described:
    """An ``amqp:error`` value."""
    return Described(ULong(ERROR), [Symbol(condition), description, info])


def symbols(names: list[str] | tuple[str, ...]) -> Array:
    """An array of symbols, the encoding the client expects for capabilities."""
    return Array(0xA3, [Symbol(n) for n in names])


def open_frame(container_id: str, max_frame_size: int, channel_max: int, idle_timeout_ms: int | None) -> bytes:
    fields: list[Any] = [
        container_id,
        None,
        UInt(max_frame_size),
        UShort(channel_max),
        UInt(idle_timeout_ms) if idle_timeout_ms else None,
        None,
        None,
        None,
        None,
        None,
    ]
    return frame(0, performative(OPEN, fields))


def begin_frame(channel: int, remote_channel: int, next_outgoing_id: int, incoming_window: int,
                outgoing_window: int, handle_max: int) -> bytes:
    fields: list[Any] = [
        UShort(remote_channel),
        UInt(next_outgoing_id),
        UInt(incoming_window),
        UInt(outgoing_window),
        UInt(handle_max),
        None,
        None,
        None,
    ]
    return frame(channel, performative(BEGIN, fields))


def attach_frame(channel: int, *, name: str, handle: int, role_receiver: bool, source: Any, target: Any,
                 initial_delivery_count: int | None, max_message_size: int | None,
                 offered_capabilities: Array | None = None, properties: dict[Any, Any] | None = None,
                 snd_settle_mode: int = 2, rcv_settle_mode: int = 0) -> bytes:
    fields: list[Any] = [
        name,
        UInt(handle),
        role_receiver,
        UByte(snd_settle_mode),
        UByte(rcv_settle_mode),
        source,
        target,
        None,
        False,
        UInt(initial_delivery_count) if initial_delivery_count is not None else None,
        ULong(max_message_size) if max_message_size is not None else None,
        offered_capabilities,
        None,
        properties,
    ]
    return frame(channel, performative(ATTACH, fields))


def flow_frame(channel: int, *, next_incoming_id: int, incoming_window: int, next_outgoing_id: int,
               outgoing_window: int, handle: int | None = None, delivery_count: int | None = None,
               link_credit: int | None = None, available: int | None = None, drain: bool = False,
               echo: bool = False) -> bytes:
    fields: list[Any] = [
        UInt(next_incoming_id),
        UInt(incoming_window),
        UInt(next_outgoing_id),
        UInt(outgoing_window),
        UInt(handle) if handle is not None else None,
        UInt(delivery_count & 0xFFFFFFFF) if delivery_count is not None else None,
        UInt(link_credit) if link_credit is not None else None,
        UInt(available) if available is not None else None,
        drain,
        echo,
        None,
    ]
    return frame(channel, performative(FLOW, fields))


def disposition_frame(channel: int, *, role_receiver: bool, first: int, last: int | None, settled: bool,
                      state: Any) -> bytes:
    fields: list[Any] = [role_receiver, UInt(first), UInt(last) if last is not None else None, settled, state,
                         False]
    return frame(channel, performative(DISPOSITION, fields))


ACCEPTED_STATE = Described(ULong(ACCEPTED), [])


def rejected_state(condition: str, description: str) -> Described:
    return Described(ULong(REJECTED), [error(condition, description)])


def detach_frame(channel: int, handle: int, closed: bool, err: Described | None = None) -> bytes:
    return frame(channel, performative(DETACH, [UInt(handle), closed, err]))


def end_frame(channel: int, err: Described | None = None) -> bytes:
    return frame(channel, performative(END, [err]))


def close_frame(err: Described | None = None) -> bytes:
    return frame(0, performative(CLOSE, [err]))


def sasl_mechanisms_frame(mechanisms: tuple[str, ...]) -> bytes:
    return frame(0, performative(SASL_MECHANISMS, [symbols(mechanisms)]), SASL_FRAME)


def sasl_outcome_frame(code: int) -> bytes:
    return frame(0, performative(SASL_OUTCOME, [UByte(code), None]), SASL_FRAME)


# ------------------------------------------------------------------------------------ fast transfer path
# descriptor, list8 (size 25, 11 fields), handle uint, delivery-id uint, tag vbin8(4), format uint, settled,
# more, then rcv-settle-mode, state, resume, aborted, batchable all null.
_TRANSFER_HEAD = struct.Struct(">IBBH3s3sBIBI2sIBIBB5s")
_TRANSFER_OVERHEAD = _TRANSFER_HEAD.size
_T_DESC = b"\x00\x53\x14"
_T_LIST = b"\xc0\x1d\x0b"  # size: 29 bytes follow the size byte (count + 28 of fields); 11 fields
_NULLS = b"\x40\x40\x40\x40\x40"


def transfer_frames(channel: int, handle: int, delivery_id: int, payload: bytes, settled: bool, max_frame: int,
                    message_format: int = 0) -> list[bytes]:
    """Encode one delivery as one transfer frame, or several with ``more`` set when it exceeds ``max_frame``."""
    room = max_frame - _TRANSFER_OVERHEAD
    settled_b = 0x41 if settled else 0x42
    n = len(payload)
    if n <= room:
        return [_TRANSFER_HEAD.pack(_TRANSFER_OVERHEAD + n, 2, 0, channel, _T_DESC, _T_LIST, 0x70, handle, 0x70,
                                    delivery_id, b"\xa0\x04", delivery_id, 0x70, message_format, settled_b, 0x42,
                                    _NULLS) + payload]
    out = []
    for start in range(0, n, room):
        chunk = payload[start : start + room]
        more = 0x41 if start + room < n else 0x42
        out.append(_TRANSFER_HEAD.pack(_TRANSFER_OVERHEAD + len(chunk), 2, 0, channel, _T_DESC, _T_LIST, 0x70,
                                       handle, 0x70, delivery_id, b"\xa0\x04", delivery_id, 0x70, message_format,
                                       settled_b, more, _NULLS) + chunk)
    return out


# ----------------------------------------------------------------------------------------------- decoding
class Performative:
    """A decoded incoming performative: its descriptor code, its fields, and (transfers) the payload."""

    __slots__ = ("code", "fields", "payload", "spans")

    def __init__(self, code: int, fields: list[Any], payload: bytes, spans: list[tuple[int, int]],
                 ) -> None:
        self.code = code
        self.fields = fields
        self.payload = payload
        self.spans = spans

    def field(self, index: int) -> Any:
        """Field ``index`` or None when the sender trimmed it."""
        return self.fields[index] if index < len(self.fields) else None


def decode_performative(body: bytes) -> Performative:
    """Decode a frame body (after the frame header and extended header).

    Raises:
        DecodeError: The body is not a described list performative.
    """
    end = len(body)
    if end < 3 or body[0] != 0x00:
        raise DecodeError("frame body is not a described performative")
    descriptor, pos = decode_value(body, 1, end, 1)
    if isinstance(descriptor, Symbol):
        raise DecodeError("symbolic performative descriptors are not supported")
    if not isinstance(descriptor, int):
        raise DecodeError("bad performative descriptor")
    if pos >= end:
        raise DecodeError("truncated performative")
    code = body[pos]
    fields: list[Any] = []
    spans: list[tuple[int, int]] = []
    if code == 0x45:
        pos += 1
    elif code in (0xC0, 0xD0):
        if code == 0xC0:
            if pos + 3 > end:
                raise DecodeError("truncated performative")
            size, count = body[pos + 1], body[pos + 2]
            stop = pos + 2 + size
            pos += 3
        else:
            if pos + 9 > end:
                raise DecodeError("truncated performative")
            size, count = struct.unpack_from(">II", body, pos + 1)
            stop = pos + 5 + size
            pos += 9
        if stop > end or count > stop - pos:
            raise DecodeError("performative list runs past the frame")
        for _ in range(count):
            start = pos
            value, pos = decode_value(body, pos, stop, 1)
            fields.append(value)
            spans.append((start, pos))
        pos = stop
    else:
        raise DecodeError("performative body is not a list")
    payload = body[pos:] if descriptor == TRANSFER else b""
    return Performative(descriptor, fields, payload, spans)


def raw_field(perf: Performative, body: bytes, index: int) -> Raw | None:
    """The field's original encoding, to echo it back unchanged (e.g. a link's source and target)."""
    if index >= len(perf.spans):
        return None
    start, stop = perf.spans[index]
    return Raw(body[start:stop])

