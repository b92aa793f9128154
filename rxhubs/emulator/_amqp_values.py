"""The AMQP 1.0 value types of the emulator's codec (:mod:`rxhubs.emulator._codec` decodes, ``_encode`` encodes).

Decoded symbols are :class:`Symbol`, timestamps :class:`Timestamp`, described values :class:`Described`; the
unsigned wrappers (``UInt``, ``ULong``, ...) say which AMQP integer to encode; :class:`Raw` is bytes that are
already an encoding.
"""

from __future__ import annotations

import struct
from typing import Any

__all__ = ["Array", "DecodeError", "Described", "Raw", "Symbol", "Timestamp", "UByte", "UInt", "ULong", "UShort"]

_B = struct.Struct(">B")
_H = struct.Struct(">H")
_h = struct.Struct(">h")
_I = struct.Struct(">I")
_i = struct.Struct(">i")
_Q = struct.Struct(">Q")
_q = struct.Struct(">q")
_f = struct.Struct(">f")
_d = struct.Struct(">d")
_II = struct.Struct(">II")


class DecodeError(ValueError):
    """Bytes that are not a valid AMQP encoding (truncated, oversized, too deep or unknown)."""


class Symbol(str):
    """An AMQP symbol (ASCII name such as ``amqp:not-found``)."""

    __slots__ = ()


class Timestamp(int):
    """An AMQP timestamp: milliseconds since the Unix epoch, UTC."""

    __slots__ = ()


class UByte(int):
    """An AMQP ubyte."""

    __slots__ = ()


class UShort(int):
    """An AMQP ushort."""

    __slots__ = ()


class UInt(int):
    """An AMQP uint."""

    __slots__ = ()


class ULong(int):
    """An AMQP ulong."""

    __slots__ = ()


class Raw(bytes):
    """Bytes that are already an AMQP encoding; encoded as they are."""

    __slots__ = ()


class Described:
    """A described value: ``descriptor`` (usually a ulong code or a symbol) and ``value``."""

    __slots__ = ("descriptor", "value")

    def __init__(self, descriptor: Any, value: Any) -> None:
        self.descriptor = descriptor
        self.value = value

    def __repr__(self) -> str:
        return f"Described({self.descriptor!r}, {self.value!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Described) and (self.descriptor, self.value) == (other.descriptor, other.value)

    def __hash__(self) -> int:
        return hash((self.descriptor, repr(self.value)))


class Array:
    """An AMQP array: every element has the same ``constructor`` (e.g. ``0xA3`` for symbols)."""

    __slots__ = ("constructor", "items")

    def __init__(self, constructor: int, items: list[Any]) -> None:
        self.constructor = constructor
        self.items = items

    def __repr__(self) -> str:
        return f"Array(0x{self.constructor:02x}, {self.items!r})"
