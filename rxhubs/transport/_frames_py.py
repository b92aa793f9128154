"""AMQP 1.0 value and message decoder for the receive hot path: one delivery's payload to a pyamqp ``Message``.

One source, two builds (as aiohttp's ``reader_py``/``reader_c``): this module runs as plain Python, and
``_frames_c.py`` (a link to this file) is compiled by Cython with the C types of ``_frames_c.pxd`` when the
package is built with a compiler. :mod:`rxhubs.transport._frames` picks one at import; both pass the same tests.

:func:`decode_message` decodes a message straight into the ``Message`` tuple pyamqp's own ``decode_payload``
builds, with the same values (AMQP strings and symbols as bytes, timestamps as int milliseconds, the five delivery
outcomes as ``{name: value}``); it raises ``Unsupported`` for a value type pyamqp itself cannot decode. The framing
half (transfer frames of one link, deliveries of several frames: ``parse``) is :mod:`rxhubs.transport._framing_py`,
which uses this module's ``_Reader`` and ``_decode`` (``cimport``-ed through ``_frames_c.pxd`` when compiled).
"""

import struct
import uuid
from typing import Any

from azure.eventhub._pyamqp.message import Header, Message, Properties

from rxhubs.transport._frame_errors import FrameError, Unsupported

__all__ = ["FrameError", "Unsupported", "decode_message"]

_float = struct.Struct(">f").unpack_from
_double = struct.Struct(">d").unpack_from
_UUID = uuid.UUID
_MAX_DEPTH = 100  # nesting of lists, maps, arrays and described values
_new = tuple.__new__  # a NamedTuple made without its Python-level __new__ (same object)
_COMPOSITES = {35: "received", 36: "accepted", 37: "rejected", 38: "released", 39: "modified"}


def _be(view: bytes, pos: int, width: int) -> int:
    """The unsigned big-endian integer of ``width`` bytes at ``pos`` (accumulated in 64 bits when compiled)."""
    x = 0
    for i in range(pos, pos + width):
        x = (x << 8) | view[i]
    return x


def _signed(u: int, bits: int) -> int:
    """Two's complement: the ``bits``-wide unsigned ``u`` as a signed int (no C overflow when compiled)."""
    top = 1  # (a 64-bit variable when compiled, before the shift)
    top <<= bits - 1
    if not u & top:
        return u
    mask = (top << 1) - 1  # 2**bits - 1 (in 64-bit C arithmetic too, where top << 1 wraps to 0 for 64 bits)
    return -int(mask - u) - 1


class _Reader:
    """A cursor over one frame body: ``data[pos:end]``, values decoded as pyamqp decodes them."""

    def __init__(self, data: bytes, pos: int, end: int) -> None:
        self.data = data
        self.view = data
        self.pos = pos
        self.end = end
        self.depth = 0

    def need(self, n: int) -> int:
        """Start of the next ``n`` bytes (advances past them); raises FrameError if the frame ends first."""
        p = self.pos
        if n < 0 or p + n > self.end:
            raise FrameError(f"a value runs past the end of its frame (at byte {p}, {n} more wanted)")
        self.pos = p + n
        return p

    def u8(self) -> int:
        return self.view[self.need(1)]

    def u32(self) -> int:
        return _be(self.view, self.need(4), 4)

    def u64(self) -> int:
        return _be(self.view, self.need(8), 8)

    def i64(self) -> int:
        return _signed(self.u64(), 64)

    def raw(self, n: int) -> bytes:
        p = self.need(n)
        return self.data[p:p + n]

    def value(self) -> Any:
        return self.typed(self.u8())

    def typed(self, code: int) -> Any:
        """The value after constructor ``code`` (also an array's element, which has no constructor of its own)."""
        if code == 0xA1 or code == 0xA3 or code == 0xA0:  # str8, sym8, vbin8: bytes, as pyamqp returns them
            n = self.u8()
            return self.raw(n)
        if code == 0xB0 or code == 0xB1 or code == 0xB3:
            n = self.u32()
            return self.raw(n)
        if code == 0x81 or code == 0x83:  # long, timestamp (ms)
            return self.i64()
        if code == 0x80:
            return self.u64()
        if code == 0x53 or code == 0x52 or code == 0x50:  # smallulong, smalluint, ubyte
            return self.u8()
        if code == 0x55 or code == 0x54 or code == 0x51:  # smalllong, smallint, byte
            return _signed(self.u8(), 8)
        if code == 0x40:
            return None
        if code == 0x41:
            return True
        if code == 0x42:
            return False
        if code == 0x43 or code == 0x44:
            return 0
        if code == 0x45:
            return []
        if code == 0x56:
            return self.u8() == 1
        if code == 0x70:
            return self.u32()
        if code == 0x71:
            return _signed(self.u32(), 32)
        if code == 0x60 or code == 0x61:
            u = _be(self.view, self.need(2), 2)
            return _signed(u, 16) if code == 0x61 else u
        if code == 0xC1 or code == 0xD1 or code == 0xC0 or code == 0xD0 or code == 0xE0 or code == 0xF0 or code == 0:
            self.depth += 1
            if self.depth > _MAX_DEPTH:  # (pyamqp's recursion would fail too; a C stack must not)
                raise Unsupported(f"values nested more than {_MAX_DEPTH} deep")
            out = self.nested(code)
            self.depth -= 1
            return out
        if code == 0x98:
            return _UUID(bytes=self.raw(16))
        if code == 0x72:
            return _float(self.data, self.need(4))[0]
        if code == 0x82:
            return _double(self.data, self.need(8))[0]
        # char, decimal32/64/128 and unknown codes: pyamqp's decoder has none (or a lossy one) - the SDK decides
        raise Unsupported(f"AMQP type constructor 0x{code:02x} at byte {self.pos - 1}")

    def nested(self, code: int) -> Any:
        if code == 0xC1 or code == 0xD1:
            return self.dict_of(code == 0xD1)
        if code == 0xC0 or code == 0xD0:
            return self.list_of(code == 0xD0)
        if code == 0xE0 or code == 0xF0:
            return self.array(code == 0xF0)
        descriptor = self.value()
        value = self.value()
        if type(descriptor) is int and 35 <= descriptor <= 39:
            return {_COMPOSITES[descriptor]: value}
        return value

    def count(self, large: bool) -> int:
        """A compound's element count (pyamqp reads the count and ignores the size; so does this)."""
        if large:
            self.need(4)
            return self.u32()
        self.need(1)
        return self.u8()

    def list_of(self, large: bool) -> list[Any]:
        n = self.count(large)
        out = []
        for _ in range(n):
            out.append(self.value())
        return out

    def dict_of(self, large: bool) -> dict[Any, Any]:
        n = self.count(large) // 2
        out = {}
        for _ in range(n):
            key = self.value()
            try:
                out[key] = self.value()
            except TypeError:  # an unhashable key (a list or a map): pyamqp fails on it too
                raise Unsupported("a map key that is a list or a map") from None
        return out

    def array(self, large: bool) -> list[Any]:
        n = self.count(large)
        if not n:
            return []
        code = self.u8()
        if code == 0x00:
            raise Unsupported("an array of described values")
        if n > 255 and n > self.end - self.pos:  # elements of no width (null, true, ...): bytes do not bound n
            raise FrameError(f"an array of {n} elements in the {self.end - self.pos} bytes left of its frame")
        out = []
        for _ in range(n):
            out.append(self.typed(code))
        return out

    def section_list(self, what: str) -> list[Any]:
        """A header or properties section: a list (pyamqp builds its NamedTuple from it)."""
        value = self.value()
        if type(value) is not list:
            raise Unsupported(f"a {what} section that is not a list")
        return value


def decode_message(data: bytes, pos: int, end: int) -> Any:
    """The pyamqp ``Message`` encoded in ``data[pos:end]`` (one delivery's payload), as ``decode_payload`` gives.

    Raises :class:`FrameError` for bytes that are not a message (truncated or malformed sections), and
    :class:`Unsupported` for what pyamqp's decoder itself cannot decode. Example:

        >>> from azure.eventhub._pyamqp._encode import encode_payload
        >>> from azure.eventhub._pyamqp.message import Message
        >>> raw = bytes(encode_payload(bytearray(), Message(data=[b"hi"], application_properties={"k": 1})))
        >>> m = decode_message(raw, 0, len(raw))
        >>> m.data, m.application_properties, m.properties
        ([b'hi'], {b'k': 1}, None)
    """
    return _decode(_Reader(data, pos, end), pos, end, True)


def _decode(r: _Reader, pos: int, end: int, whole: bool) -> Any:
    """The message of ``r.data[pos:end]``; not ``whole``: a map of delivery annotations is stepped over (None)."""
    r.pos = pos
    r.end = end
    r.depth = 0
    header = delivery = annotations = properties = application = body = sequence = footer = None
    value = None
    while r.pos < end:
        p = r.need(3)
        if r.view[p] != 0x00 or r.view[p + 1] != 0x53:
            raise Unsupported(f"a message section without a small-ulong descriptor at byte {p}")
        descriptor = r.view[p + 2]
        if descriptor == 0x75:
            section = r.value()
            if type(section) is not bytes:
                raise Unsupported("a data section that is not binary")
            if body is None:
                body = [section]
            else:
                body.append(section)
        elif descriptor == 0x72:
            annotations = r.value()
        elif descriptor == 0x74:
            application = r.value()
        elif descriptor == 0x73:
            items = r.section_list("properties")
            if len(items) > 13:
                raise Unsupported("a properties section with more than 13 fields")
            properties = Properties(*items)
        elif descriptor == 0x70:
            items = r.section_list("header")
            if len(items) > 5:
                raise Unsupported("a header section with more than 5 fields")
            header = Header(*items)
        elif descriptor == 0x71:
            code = r.u8()
            if whole or (code != 0xC1 and code != 0xD1):
                delivery = r.typed(code)
            else:  # only a chunk's last message's are read (the last-enqueued metrics): skip the map's size
                r.need(r.u8() if code == 0xC1 else r.u32())
        elif descriptor == 0x76:
            if sequence is None:
                sequence = [r.value()]
            else:
                sequence.append(r.value())
        elif descriptor == 0x77:
            value = r.value()
        elif descriptor == 0x78:
            footer = r.value()
        else:
            r.value()  # an unknown section: pyamqp drops it
    return _new(Message, (header, delivery, annotations, properties, application, body, sequence, value, footer))


try:  # the compiled build: the hash setup.py compiled in (a C macro, declared in the .pxd); rxhubs/_extensions.py
    SOURCE_SHA256: str = RXHUBS_SOURCE_SHA256.decode("ascii")  # type: ignore[name-defined]
except NameError:  # the pure-Python build has none
    SOURCE_SHA256 = ""
