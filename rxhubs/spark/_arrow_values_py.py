# cython: boundscheck=False, initializedcheck=False
"""The byte buffers of Arrow columns, and a reader of AMQP values, for the Spark source's frame reader.

Half of :mod:`rxhubs.spark._arrow_frames_py` (one source, two builds, as that module is): ``_arrow_values_c.py``
is a link to this file, compiled by Cython with the C types of ``_arrow_values_c.pxd``. :class:`Buf` is a growable
``bytearray`` written through a buffer view (C stores when compiled); :class:`ValueReader` steps through the AMQP
values of one frame as ``_frames_py`` decodes them (the same errors), reading the usual kinds (null, booleans,
integers, strings, symbols and binaries) without making Python objects.
"""

from typing import Any

from rxhubs.transport._frame_errors import FrameError, Unsupported

__all__ = ["KINDS", "SOURCE_SHA256", "Buf", "MapColumn", "ValueReader", "bits", "is_name", "put"]

#: What :meth:`ValueReader.scan` found (``_arrow_frames_py`` has the same numbers: C constants in each build).
K_NULL, K_TRUE, K_FALSE, K_UINT, K_INT, K_BYTES, K_OTHER = 0, 1, 2, 3, 4, 5, 6
KINDS = (K_NULL, K_TRUE, K_FALSE, K_UINT, K_INT, K_BYTES, K_OTHER)
_MAX_DEPTH = 100


class Buf:
    """A growable byte buffer: ``data[:n]`` is what was written."""

    def __init__(self, size: int) -> None:
        self.data = bytearray(size)
        self.view: Any = self.data
        self.n = 0

    def room(self, k: int) -> int:
        """Where the next ``k`` bytes go (grows the buffer when needed, and counts them as written)."""
        p = self.n
        if p + k > len(self.view):  # (the view: its length is a C field when compiled)
            self.grow(p + k)
        self.n = p + k
        return p

    def grow(self, size: int) -> None:
        self.view = None  # (the compiled build holds a buffer view: a bytearray cannot grow under it)
        try:
            self.data.extend(bytes(max(size, 2 * len(self.data)) - len(self.data)))
        finally:  # (never left unset: the compiled build does not check the view before each use)
            self.view = self.data

    def byte(self, x: int) -> None:
        p = self.room(1)
        self.view[p] = x

    def i32(self, x: int) -> None:
        if x > 0x7FFFFFFF:
            raise FrameError("more than 2 GiB of one column in one record batch")
        p = self.room(4)
        self.view[p] = x & 0xFF
        self.view[p + 1] = (x >> 8) & 0xFF
        self.view[p + 2] = (x >> 16) & 0xFF
        self.view[p + 3] = (x >> 24) & 0xFF

    def i64(self, x: int) -> None:
        p = self.room(8)
        for i in range(8):
            self.view[p + i] = x & 0xFF
            x >>= 8

    def copy(self, r: "ValueReader", a: int, b: int) -> None:
        """``r.v[a:b]``: bytes of the frame reader ``r`` is on; the bounds are checked here.

        One block copy, view to view: ``rxhubs_move``, a C ``memcpy`` declared in the .pxd when compiled (no
        memoryview slices, no bytes object), :func:`_move` in the Python build. The reader is passed, not its view
        (a struct the compiled build would copy at every call).
        """
        if a < 0 or b < a or b > len(r.v):
            raise FrameError(f"a copy of bytes {a}..{b} of {len(r.v)}")
        k = b - a
        p = self.room(k)
        rxhubs_move(self, p, r, a, k)  # type: ignore[name-defined]  # noqa: F821

    def add(self, src: bytes) -> None:
        """All of ``src`` (a name, a literal, a row's value: not the frame)."""
        k = len(src)
        p = self.room(k)
        if k > 32:
            self.data[p:p + k] = src
        else:
            for i in range(k):
                self.view[p + i] = src[i]

    def copy_buf(self, src: "Buf", a: int, b: int) -> None:
        """``src.data[a:b]``, written before (so within its bounds)."""
        p = self.room(b - a)
        for i in range(b - a):
            self.view[p + i] = src.view[a + i]

    def digits(self, u: int, negative: bool) -> None:
        """The decimal text of ``u`` (``-u`` when ``negative``), as ``int.__repr__`` writes it."""
        k = 1
        t = u
        while t >= 10:
            t //= 10
            k += 1
        if negative:
            self.byte(45)
        p = self.room(k)
        i = p + k - 1
        while i >= p:
            self.view[i] = 48 + u % 10
            u //= 10
            i -= 1

    def same(self, a: int, b: int, c: int, d: int) -> bool:
        """Whether ``data[a:b]`` equals ``data[c:d]``."""
        if b - a != d - c:
            return False
        for i in range(b - a):
            if self.view[a + i] != self.view[c + i]:
                return False
        return True

    def get_i32(self, at: int) -> int:
        x: int = self.view[at] | (self.view[at + 1] << 8) | (self.view[at + 2] << 16) | (self.view[at + 3] << 24)
        return x

    def take(self) -> object:
        out = memoryview(self.data)[:self.n]
        self.view = None
        self.data = bytearray(max(64, len(self.data)))
        self.view = self.data
        self.n = 0
        return out


def bits(valid: Buf, rows: int) -> object:
    """A validity bitmap of one byte per row in ``valid``: None when no row is null."""
    nulls = 0
    for i in range(rows):
        if not valid.view[i]:
            nulls += 1
    if nulls == 0:
        return None
    out = Buf((rows + 7) // 8)
    if nulls < rows:
        for i in range(rows):
            if valid.view[i]:
                out.view[i >> 3] |= 1 << (i & 7)
    return out.data


def _move(dst: Buf, p: int, r: "ValueReader", a: int, k: int) -> None:
    """``dst.view[p:p + k] = r.v[a:a + k]``: the Python build's ``rxhubs_move`` (a C macro in the compiled one)."""
    dst.view[p:p + k] = r.v[a:a + k]


globals().setdefault("rxhubs_move", _move)


class ValueReader:
    """A cursor over the AMQP values of one frame, ``v[pos:end]`` (the base of the frame reader)."""

    def __init__(self) -> None:
        self.frame = b""  # the bytes being read, and a buffer view of them (``v``, C reads when compiled)
        self.v: Any = b""
        self.pos = self.end = self.depth = 0
        self.kind = 0
        self.u = 0
        self.a = self.b = 0

    def utf8(self, a: int, b: int) -> bool:
        """Whether ``v[a:b]`` is valid UTF-8, by the rules of Python's strict decoder."""
        i = a  # (self.v at each use: a local view would cost the compiled build two atomic counts a call)
        while i < b:
            c = self.v[i]
            if c < 0x80:
                i += 1
                continue
            lo = 0x80
            hi = 0xBF
            if c < 0xC2:
                return False
            if c < 0xE0:
                n = 1
            elif c < 0xF0:
                n = 2
                if c == 0xE0:
                    lo = 0xA0
                elif c == 0xED:
                    hi = 0x9F
            elif c < 0xF5:
                n = 3
                if c == 0xF0:
                    lo = 0x90
                elif c == 0xF4:
                    hi = 0x8F
            else:
                return False
            if i + n >= b:
                return False
            if self.v[i + 1] < lo or self.v[i + 1] > hi:
                return False
            for j in range(i + 2, i + n + 1):
                if self.v[j] & 0xC0 != 0x80:
                    return False
            i += n + 1
        return True

    def be(self, pos: int, width: int) -> int:
        """The unsigned big-endian integer of ``width`` bytes at ``pos`` of the frame."""
        x = 0
        for i in range(pos, pos + width):
            x = (x << 8) | self.v[i]
        return x

    def need(self, k: int) -> int:
        p = self.pos
        if k < 0 or p + k > self.end:
            self.past(p, k)  # (raises: out of line, so that the compiled need stays small and inlined)
        self.pos = p + k
        return p

    def past(self, p: int, k: int) -> None:
        raise FrameError(f"a value runs past the end of its frame (at byte {p}, {k} more wanted)")

    def u8(self) -> int:
        x: int = self.v[self.need(1)]
        return x

    def count(self, large: bool) -> int:
        if large:
            self.need(4)
            return self.be(self.need(4), 4)
        self.need(1)
        return self.u8()

    def scan(self) -> None:
        """Read one value of the usual kinds: ``kind``, and ``u`` (magnitude of an int) or ``a:b`` (bytes)."""
        code = self.u8()
        self.a = self.b = 0
        if code == 0xA1 or code == 0xA3 or code == 0xA0 or code == 0xB0 or code == 0xB1 or code == 0xB3:
            k = self.u8() if code < 0xB0 else self.be(self.need(4), 4)
            self.a = self.need(k)
            self.b = self.a + k
            self.kind = K_BYTES
        elif code == 0x40:
            self.kind = K_NULL
        elif code == 0x41 or code == 0x42:
            self.kind = K_TRUE if code == 0x41 else K_FALSE
        elif code == 0x56:
            self.kind = K_TRUE if self.u8() == 1 else K_FALSE
        elif code == 0x43 or code == 0x44 or code == 0x53 or code == 0x52 or code == 0x50 or code == 0x60 \
                or code == 0x70 or code == 0x80:
            width = 0 if code < 0x50 else 1 if code < 0x60 else 2 if code == 0x60 else 4 if code == 0x70 else 8
            self.u = self.be(self.need(width), width)
            self.kind = K_UINT
        elif code == 0x55 or code == 0x54 or code == 0x51 or code == 0x61 or code == 0x71 or code == 0x81 \
                or code == 0x83:
            width = 1 if code < 0x60 else 2 if code == 0x61 else 4 if code == 0x71 else 8
            x = self.be(self.need(width), width)
            top = 1
            top <<= 8 * width - 1
            self.kind = K_UINT
            if x & top:  # negative: keep the magnitude (in 64 bits: 2**64 - x when width is 8)
                self.u = (top << 1) - x if width < 8 else 0xFFFFFFFFFFFFFFFF - x + 1
                self.kind = K_INT
            else:
                self.u = x
        else:
            self.kind = K_OTHER
        if self.kind != K_BYTES and (self.kind == K_UINT or self.kind == K_INT):
            self.b = 1 if self.u else 0  # (truthiness, for the properties section and transfer flags)

    def skip(self) -> None:
        self.skip_typed(self.u8())

    def skip_typed(self, code: int) -> None:
        """Step over one value after constructor ``code`` (as _frames_py decodes it: same errors)."""
        if code == 0xA1 or code == 0xA3 or code == 0xA0:
            self.need(self.u8())
        elif code == 0xB0 or code == 0xB1 or code == 0xB3:
            self.need(self.be(self.need(4), 4))
        elif code == 0x40 or code == 0x41 or code == 0x42 or code == 0x43 or code == 0x44 or code == 0x45:
            pass
        elif code == 0x50 or code == 0x51 or code == 0x52 or code == 0x53 or code == 0x54 or code == 0x55 \
                or code == 0x56:
            self.need(1)
        elif code == 0x60 or code == 0x61:
            self.need(2)
        elif code == 0x70 or code == 0x71 or code == 0x72:
            self.need(4)
        elif code == 0x80 or code == 0x81 or code == 0x82 or code == 0x83:
            self.need(8)
        elif code == 0x98:
            self.need(16)
        elif code == 0xC0 or code == 0xD0 or code == 0xC1 or code == 0xD1 or code == 0xE0 or code == 0xF0 \
                or code == 0:
            self.depth += 1
            if self.depth > _MAX_DEPTH:
                raise Unsupported(f"values nested more than {_MAX_DEPTH} deep")
            if code == 0:
                self.skip()
                self.skip()
            else:
                n = self.count(code == 0xD0 or code == 0xD1 or code == 0xF0)
                if code == 0xC1 or code == 0xD1:
                    n = n // 2 * 2
                if code == 0xE0 or code == 0xF0:
                    if n:
                        element = self.u8()
                        if element == 0:
                            raise Unsupported("an array of described values")
                        if n > 255 and n > self.end - self.pos:  # (as _frames_py: elements of no width)
                            raise FrameError(f"an array of {n} elements in the {self.end - self.pos} bytes left of"
                                             " its frame")
                        for _ in range(n):
                            self.skip_typed(element)
                else:
                    for _ in range(n):
                        self.skip()
            self.depth -= 1
        else:
            raise Unsupported(f"AMQP type constructor 0x{code:02x}")

    def map_entries(self, column: "MapColumn") -> None:
        """The application properties: a map (or null) into ``column``'s row."""
        code = self.u8()
        if code != 0xC1 and code != 0xD1 and code != 0x40:
            raise Unsupported("application properties that are not a map")
        pairs = 0 if code == 0x40 else self.count(code == 0xD1) // 2
        first = column.keys_off.n
        for _ in range(pairs):
            self.key(column, first)
            self.scan()
            self.text(column, True)

    def key(self, column: "MapColumn", first: int) -> None:
        """A map key as text into ``column`` (UTF-8 bytes only), refused when it repeats one of this row's."""
        self.scan()
        if self.kind != K_BYTES or not self.utf8(self.a, self.b):
            raise Unsupported("a map key that is not UTF-8 text")
        keys = column.keys
        start = keys.n
        keys.copy(self, self.a, self.b)
        offsets = column.keys_off
        previous = offsets.get_i32(first - 4)
        for at in range(first, offsets.n, 4):
            nxt = offsets.get_i32(at)
            if keys.same(previous, nxt, start, keys.n):
                raise Unsupported("a key twice in one map")
            previous = nxt
        offsets.i32(keys.n)

    def text(self, column: "MapColumn", base64: bool) -> None:
        """The scanned value as a map value's text, by property_to_str's rules (the usual types only)."""
        kind = self.kind
        values = column.values
        if kind == K_NULL:
            column.valid.byte(0)
        else:
            column.valid.byte(1)
            if kind == K_BYTES:
                if not self.utf8(self.a, self.b):
                    raise Unsupported("bytes that are not UTF-8 (base64)" if base64 else "bytes that are not UTF-8")
                values.copy(self, self.a, self.b)
            elif kind == K_UINT or kind == K_INT:
                values.digits(self.u, kind == K_INT and self.u != 0)
            elif kind == K_TRUE:
                values.add(b"true")
            elif kind == K_FALSE:
                values.add(b"false")
            else:
                raise Unsupported("a value of another type")
        column.values_off.i32(values.n)


class MapColumn:
    """A ``map<string,string>`` column's buffers: row offsets, keys and their offsets, values, offsets, validity."""

    def __init__(self, bufs: list[Buf]) -> None:
        self.offsets, self.keys, self.keys_off = bufs[0], bufs[1], bufs[2]
        self.values, self.values_off, self.valid = bufs[3], bufs[4], bufs[5]
        self.start()

    def start(self) -> None:
        self.offsets.i32(0)
        self.keys_off.i32(0)
        self.values_off.i32(0)

    def end_row(self) -> None:
        self.offsets.i32(self.keys_off.n // 4 - 1)


def is_name(buf: Buf, at: int, name: bytes) -> bool:
    """Whether ``buf`` holds ``name`` at ``at``."""
    for i in range(len(name)):
        if buf.view[at + i] != name[i]:
            return False
    return True


def put(data: Buf, offsets: Buf, valid: Buf, value: object) -> None:
    """One value of a string column: ``value`` (a str, or None for a null) as UTF-8."""
    if value is None:
        valid.byte(0)
    else:
        text = value.encode()  # type: ignore[attr-defined]
        data.add(text)
        valid.byte(1)
    offsets.i32(data.n)


try:  # the compiled build: the hash setup.py compiled in (a C macro, declared in the .pxd); rxhubs/_extensions.py
    SOURCE_SHA256: str = RXHUBS_SOURCE_SHA256.decode("ascii")  # type: ignore[name-defined]
except NameError:  # the pure-Python build has none
    SOURCE_SHA256 = ""
