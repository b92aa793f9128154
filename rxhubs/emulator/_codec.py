"""A small AMQP 1.0 type codec: just what an Event Hubs server needs.

Decoding turns bytes into plain Python values (``Symbol`` for symbols, ``Described`` for described types,
``Timestamp`` for timestamps); it never trusts a length or count it reads: anything that runs past the end
of the buffer, nests too deep or claims more elements than bytes raises :class:`DecodeError`.
Encoding (:mod:`rxhubs.emulator._encode`, re-exported here) maps Python values back; the value types live in
:mod:`rxhubs.emulator._amqp_values`.
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
    DecodeError,
    Described,
    Raw,
    Symbol,
    Timestamp,
    UByte,
    UInt,
    ULong,
    UShort,
    _d,
    _f,
    _h,
    _i,
    _q,
)
from rxhubs.emulator._encode import encode_list_always8or32, encode_value

__all__ = [
    "Array",
    "DecodeError",
    "Described",
    "Raw",
    "Symbol",
    "Timestamp",
    "UByte",
    "UInt",
    "ULong",
    "UShort",
    "decode_value",
    "encode_list_always8or32",
    "encode_value",
    "skip_value",
]

MAX_DEPTH = 32


# ----------------------------------------------------------------------------------------------- decoding
def _need(buf: bytes, pos: int, n: int, end: int) -> None:
    if pos + n > end:
        raise DecodeError("truncated value")


def _fixed_width(code: int) -> int:
    """Width of the data after a fixed-width constructor, or -1 when not fixed."""
    sub = code >> 4
    if sub == 0x4:
        return 0
    if sub == 0x5:
        return 1
    if sub == 0x6:
        return 2
    if sub == 0x7:
        return 4
    if sub == 0x8:
        return 8
    if sub == 0x9:
        return 16
    return -1


def _decode_element(buf: bytes, code: int, pos: int, end: int, depth: int) -> tuple[Any, int]:
    """Decode one value whose constructor byte ``code`` has already been read; ``pos`` points after it."""
    if code == 0x40:
        return None, pos
    if code == 0x41:
        return True, pos
    if code == 0x42:
        return False, pos
    if code in (0x43, 0x44):
        return 0, pos
    if code == 0x45:
        return [], pos
    if code in (0xA1, 0xA3, 0xA0):
        _need(buf, pos, 1, end)
        n = buf[pos]
        pos += 1
        _need(buf, pos, n, end)
        raw = bytes(buf[pos : pos + n])
        return _var(code, raw), pos + n
    if code in (0xB1, 0xB3, 0xB0):
        _need(buf, pos, 4, end)
        (n,) = _I.unpack_from(buf, pos)
        pos += 4
        _need(buf, pos, n, end)
        raw = bytes(buf[pos : pos + n])
        return _var(code, raw), pos + n
    if code in (0x50, 0x52, 0x53):
        _need(buf, pos, 1, end)
        return buf[pos], pos + 1
    if code in (0x51, 0x54, 0x55):
        _need(buf, pos, 1, end)
        v = buf[pos]
        return (v - 256 if v > 127 else v), pos + 1
    if code == 0x56:
        _need(buf, pos, 1, end)
        return buf[pos] != 0, pos + 1
    if code == 0x60:
        _need(buf, pos, 2, end)
        return _H.unpack_from(buf, pos)[0], pos + 2
    if code == 0x61:
        _need(buf, pos, 2, end)
        return _h.unpack_from(buf, pos)[0], pos + 2
    if code == 0x70:
        _need(buf, pos, 4, end)
        return _I.unpack_from(buf, pos)[0], pos + 4
    if code == 0x71:
        _need(buf, pos, 4, end)
        return _i.unpack_from(buf, pos)[0], pos + 4
    if code == 0x72:
        _need(buf, pos, 4, end)
        return _f.unpack_from(buf, pos)[0], pos + 4
    if code == 0x73:
        _need(buf, pos, 4, end)
        cp = _I.unpack_from(buf, pos)[0]
        if cp > 0x10FFFF:
            raise DecodeError("invalid char")
        return chr(cp), pos + 4
    if code == 0x80:
        _need(buf, pos, 8, end)
        return _Q.unpack_from(buf, pos)[0], pos + 8
    if code == 0x81:
        _need(buf, pos, 8, end)
        return _q.unpack_from(buf, pos)[0], pos + 8
    if code == 0x82:
        _need(buf, pos, 8, end)
        return _d.unpack_from(buf, pos)[0], pos + 8
    if code == 0x83:
        _need(buf, pos, 8, end)
        return Timestamp(_q.unpack_from(buf, pos)[0]), pos + 8
    if code == 0x98:
        _need(buf, pos, 16, end)
        return uuid.UUID(bytes=bytes(buf[pos : pos + 16])), pos + 16
    if code in (0x74, 0x84, 0x94):  # decimal32/64/128: kept as raw bytes
        width = _fixed_width(code)
        _need(buf, pos, width, end)
        return bytes(buf[pos : pos + width]), pos + width
    if depth >= MAX_DEPTH:
        raise DecodeError("nesting too deep")
    if code in (0xC0, 0xC1, 0xE0):
        _need(buf, pos, 2, end)
        size, count = buf[pos], buf[pos + 1]
        body = pos + 1
        pos += 2
    elif code in (0xD0, 0xD1, 0xF0):
        _need(buf, pos, 8, end)
        size, count = _II.unpack_from(buf, pos)
        body = pos + 4
        pos += 8
    elif code == 0x00:
        descriptor, pos = decode_value(buf, pos, end, depth + 1)
        value, pos = decode_value(buf, pos, end, depth + 1)
        return Described(descriptor, value), pos
    else:
        raise DecodeError(f"unknown constructor 0x{code:02x}")
    stop = body + size
    if stop > end or stop < pos:
        raise DecodeError("compound size runs past the buffer")
    if code in (0xE0, 0xF0):
        return _decode_array(buf, pos, stop, count, depth)
    if count > stop - pos:
        raise DecodeError("element count larger than the bytes available")
    items: list[Any] = []
    for _ in range(count):
        item, pos = decode_value(buf, pos, stop, depth + 1)
        items.append(item)
    if code in (0xC1, 0xD1):
        if count % 2:
            raise DecodeError("map with an odd element count")
        result: dict[Any, Any] = {}
        for i in range(0, count, 2):
            key = items[i]
            if isinstance(key, list | dict | Described | Array):
                raise DecodeError("unhashable map key")
            result[key] = items[i + 1]
        return result, stop
    return items, stop


def _decode_array(buf: bytes, pos: int, stop: int, count: int, depth: int) -> tuple[Any, int]:
    if count == 0:
        return Array(0x40, []), stop
    _need(buf, pos, 1, stop)
    code = buf[pos]
    pos += 1
    descriptor: Any = None
    described = code == 0x00
    if described:
        descriptor, pos = decode_value(buf, pos, stop, depth + 1)
        _need(buf, pos, 1, stop)
        code = buf[pos]
        pos += 1
    width = _fixed_width(code)
    if width == 0 and count > 65536:
        raise DecodeError("array of zero-width elements too long")
    if width > 0 and count * width > stop - pos:
        raise DecodeError("array count larger than the bytes available")
    if width < 0 and count > stop - pos:
        raise DecodeError("array count larger than the bytes available")
    items: list[Any] = []
    for _ in range(count):
        item, pos = _decode_element(buf, code, pos, stop, depth + 1)
        items.append(Described(descriptor, item) if described else item)
    return Array(code, items), stop


def _var(code: int, raw: bytes) -> Any:
    low = code & 0x0F
    if low == 0x0:
        return raw
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DecodeError("invalid UTF-8 in string") from exc
    return Symbol(text) if low == 0x3 else text


def decode_value(buf: bytes, pos: int, end: int, depth: int = 0) -> tuple[Any, int]:
    """Decode one AMQP value from ``buf[pos:end]``.

    Returns:
        The value and the position just after it.

    Raises:
        DecodeError: The bytes are truncated, malformed, too deeply nested or use an unknown constructor.
    """
    if pos >= end:
        raise DecodeError("truncated value")
    return _decode_element(buf, buf[pos], pos + 1, end, depth)


def skip_value(buf: bytes, pos: int, end: int, depth: int = 0) -> int:
    """Return the position after the value at ``pos`` without decoding it (used to split messages fast)."""
    if pos >= end:
        raise DecodeError("truncated value")
    code = buf[pos]
    pos += 1
    if code == 0x00:
        if depth >= MAX_DEPTH:
            raise DecodeError("nesting too deep")
        pos = skip_value(buf, pos, end, depth + 1)
        return skip_value(buf, pos, end, depth + 1)
    width = _fixed_width(code)
    if width >= 0:
        if pos + width > end:
            raise DecodeError("truncated value")
        return pos + width
    sub = code >> 4
    if sub in (0xA, 0xC, 0xE):
        if pos >= end:
            raise DecodeError("truncated value")
        nxt = pos + 1 + buf[pos]
    elif sub in (0xB, 0xD, 0xF):
        if pos + 4 > end:
            raise DecodeError("truncated value")
        nxt = pos + 4 + _I.unpack_from(buf, pos)[0]
    else:
        raise DecodeError(f"unknown constructor 0x{code:02x}")
    if nxt > end:
        raise DecodeError("value runs past the buffer")
    return nxt
