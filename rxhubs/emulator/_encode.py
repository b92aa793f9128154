"""Python values to AMQP 1.0 bytes, for the emulator (the other half of :mod:`rxhubs.emulator._codec`).

``int`` is an AMQP ``long`` unless wrapped (``UInt``, ``ULong``, ...), ``str`` a string, ``bytes`` binary;
``Raw`` passes already-encoded bytes through unchanged.

    >>> encode_value({Symbol("x-opt-offset"): "7"}).hex()
    'c11202a30c782d6f70742d6f6666736574a10137'
"""

from __future__ import annotations

import uuid
from typing import Any

from rxhubs.emulator._amqp_values import (
    _H,
    _I,
    _II,
    _Q,
    Array,
    Described,
    Raw,
    Symbol,
    Timestamp,
    UByte,
    UInt,
    ULong,
    UShort,
    _d,
    _q,
)

__all__ = ["encode_list_always8or32", "encode_value"]


def _enc_str(code8: int, code32: int, data: bytes) -> bytes:
    n = len(data)
    if n < 256:
        return bytes((code8, n)) + data
    return bytes((code32,)) + _I.pack(n) + data


def _enc_compound(code8: int, code32: int, count: int, body: bytes) -> bytes:
    if len(body) + 1 < 256 and count < 256:
        return bytes((code8, len(body) + 1, count)) + body
    return bytes((code32,)) + _II.pack(len(body) + 4, count) + body


def _encode_int(value: int) -> bytes:
    if isinstance(value, ULong):
        if value == 0:
            return b"\x44"
        if value < 256:
            return bytes((0x53, value))
        return b"\x80" + _Q.pack(value)
    if isinstance(value, UInt):
        if value == 0:
            return b"\x43"
        if value < 256:
            return bytes((0x52, value))
        return b"\x70" + _I.pack(value)
    if isinstance(value, UShort):
        return b"\x60" + _H.pack(value)
    if isinstance(value, UByte):
        return bytes((0x50, value))
    if isinstance(value, Timestamp):
        return b"\x83" + _q.pack(value)
    if -128 <= value <= 127:
        return bytes((0x55, value & 0xFF))
    return b"\x81" + _q.pack(value)


def _array_element(constructor: int, value: Any) -> bytes:
    """Encode ``value`` with the fixed constructor ``constructor`` and return the bytes without it."""
    if constructor in (0xA3, 0xB3, 0xA1, 0xB1, 0xA0, 0xB0):
        data = value.encode("utf-8") if isinstance(value, str) else bytes(value)
        return _I.pack(len(data)) + data
    encoded = encode_value(value)
    return encoded[1:]


def _encode_array(value: Array) -> bytes:
    constructor = value.constructor
    if constructor in (0xA3, 0xA1, 0xA0):  # always use the 32-bit form so one constructor fits every item
        constructor += 0x10
    body = b"".join(_array_element(constructor, item) for item in value.items)
    inner = bytes((constructor,)) + body
    if len(inner) + 1 < 256 and len(value.items) < 256:
        return bytes((0xE0, len(inner) + 1, len(value.items))) + inner
    return b"\xf0" + _II.pack(len(inner) + 4, len(value.items)) + inner


def encode_value(value: Any) -> bytes:
    """Encode a Python value as AMQP (see the module docstring for the type mapping)."""
    if value is None:
        return b"\x40"
    if value is True:
        return b"\x41"
    if value is False:
        return b"\x42"
    if isinstance(value, Raw):
        return bytes(value)
    if isinstance(value, int):
        return _encode_int(value)
    if isinstance(value, Symbol):
        return _enc_str(0xA3, 0xB3, value.encode("ascii"))
    if isinstance(value, str):
        return _enc_str(0xA1, 0xB1, value.encode("utf-8"))
    if isinstance(value, bytes | bytearray | memoryview):
        return _enc_str(0xA0, 0xB0, bytes(value))
    if isinstance(value, float):
        return b"\x82" + _d.pack(value)
    if isinstance(value, uuid.UUID):
        return b"\x98" + value.bytes
    if isinstance(value, Described):
        return b"\x00" + encode_value(value.descriptor) + encode_value(value.value)
    if isinstance(value, Array):
        return _encode_array(value)
    if isinstance(value, list | tuple):
        return _enc_compound(0xC0, 0xD0, len(value), b"".join(encode_value(v) for v in value))
    if isinstance(value, dict):
        body = b"".join(encode_value(k) + encode_value(v) for k, v in value.items())
        return _enc_compound(0xC1, 0xD1, 2 * len(value), body)
    raise TypeError(f"cannot encode {type(value).__name__} as AMQP")


def encode_list_always8or32(fields: list[Any]) -> bytes:
    """Encode a list with an explicit list8/list32 constructor, never list0 (the SDK cannot read list0)."""
    body = b"".join(encode_value(v) for v in fields)
    if len(body) + 1 < 256:
        return bytes((0xC0, len(body) + 1, len(fields))) + body
    return b"\xd0" + _II.pack(len(body) + 4, len(fields)) + body
