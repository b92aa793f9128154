# cython: boundscheck=False, initializedcheck=False
"""Arrow columns straight from AMQP transfer frames: the Spark source's per-event work, one source, two builds.

As :mod:`rxhubs.transport._frames_py` (whose frame rules it follows), this module runs as plain Python, and
``_arrow_frames_c.py`` (a link to it) is compiled by Cython with the C types of ``_arrow_frames_c.pxd``.

:meth:`FrameColumns.parse` reads the transfer frames of one link and writes each event straight into the byte
buffers of the source's Arrow columns (``body``, ``offset``, ``sequenceNumber``, ``enqueuedTime``, ``publisher``,
``partitionKey`` and the ``properties``/``systemProperties`` maps): no pyamqp ``Message``, no ``Event``, no Python
object per field. :meth:`FrameColumns.take` hands the buffers over (:mod:`rxhubs.spark._arrow_batch` makes a
``pyarrow.RecordBatch`` of them without copying). The values are those of :mod:`rxhubs.spark._columns` for the
same message. Only the usual shapes are written here: an event with anything else (a value of another type, a
duplicate key, text that is not UTF-8, several data sections...) is rolled back and decoded by the ``slow``
function the builder was given (a pyamqp ``Message`` and the rules of ``_columns``); what that cannot decode is
handed back to the SDK as a whole frame, as ``_frames_py.parse`` does.
"""

import importlib
from typing import Any

from rxhubs.spark._arrow_cut import cut
from rxhubs.transport._frame_errors import FrameError, Unsupported

__all__ = ["FrameColumns", "FrameError", "Unsupported"]

# The other half's names (Buf, MapColumn, ValueReader, bits, is_name, put), as Python objects: the
# compiled build has them from the .pxd as C types and functions instead (a Python import of them does not compile;
# mypy is told in pyproject.toml). The Python build takes the Python build of it, whether or not one is compiled.
_half = importlib.import_module("rxhubs.spark._arrow_values_" + ("py" if __name__.endswith("_py") else "c"))
globals().update({name: getattr(_half, name) for name in _half.__all__ if hasattr(_half, name)})

#: The kinds of _arrow_values_py.ValueReader.scan (C constants in the compiled build; checked equal by the tests).
K_NULL, K_TRUE, K_FALSE, K_UINT, K_INT, K_BYTES, K_OTHER = 0, 1, 2, 3, 4, 5, 6

_EXACT_MS = 4294967296000  # 2**32 s in ms: below it, ms * 1000 is what the datetime path gives (see _columns)
_TOP = 0x8000000000000000
_SEQ = b"x-opt-sequence-number"
_OFFSET = b"x-opt-offset"
_ENQUEUED = b"x-opt-enqueued-time"
_PKEY = b"x-opt-partition-key"
_PUBLISHER = b"x-opt-publisher"
#: The AMQP properties section's fields, as system properties name them (rxhubs.transport._convert).
_PROPERTY_NAMES = (b"message-id", b"user-id", b"to", b"subject", b"reply-to", b"correlation-id", b"content-type",
                   b"content-encoding", b"absolute-expiry-time", b"creation-time", b"group-id", b"group-sequence",
                   b"reply-to-group-id")


class FrameColumns(ValueReader):
    """The source's column buffers, filled from transfer frames (:meth:`parse`) or rows (:meth:`append_row`).

    ``slow(data, pos, end)`` decodes one event's payload the general way and returns its row (the arguments of
    :meth:`append_row`); it raises ``Unsupported`` for what the SDK must decode. Example (the Python build):

        >>> from rxhubs.spark._arrow_batch import slow_row, record_batch
        >>> from rxhubs.testing._emulator_frames import emulator_frames
        >>> columns = FrameColumns(slow_row)
        >>> columns.parse(emulator_frames(16, 1, count=3), 1, 0)[0]
        3
        >>> batch = record_batch(columns.take(), "0", "$Default", "hub")
        >>> batch.column("sequenceNumber").to_pylist(), batch.column("properties").to_pylist()[0]
        ([1000000, 1000001, 1000002], [('property-0', 'value-0')])
    """

    def __init__(self, slow: Any) -> None:
        ValueReader.__init__(self)
        self.slow = slow
        self.rows = 0
        self.bufs = [Buf(1 << 16), Buf(1 << 12)]  # body data, offsets
        for _ in range(22):
            self.bufs.append(Buf(1 << 12))
        b = self.bufs
        self.body, self.body_off, self.off, self.off_off, self.seq, self.enq = b[0], b[1], b[2], b[3], b[4], b[5]
        self.pk, self.pk_off, self.pk_ok, self.pub, self.pub_off, self.pub_ok = b[6], b[7], b[8], b[9], b[10], b[11]
        self.pk_off.i32(0)
        self.pub_off.i32(0)
        self.maps = [MapColumn(b[12:18]), MapColumn(b[18:24])]
        self.props = self.maps[0]
        self.system = self.maps[1]
        self.body_off.i32(0)
        self.off_off.i32(0)
        self.delivery = 0

    # -- frames ------------------------------------------------------------------------------------------------

    def parse(self, buf: bytes, channel: int, handle: int, start: int = 0) -> tuple[int, int, Any, Any]:
        """Add the events of the complete frames of ``buf[start:]``: ``(rows, consumed, other, last_delivery_id)``.

        The contract of :func:`rxhubs.transport._frames_py.parse`, with a count of rows added instead of
        messages (the same frames are read, handed back or refused with :class:`FrameError`).
        """
        self.frame = buf
        self.v = buf
        n = len(buf)
        pos = start
        added = 0
        last = None
        try:
            while n - pos >= 8:
                size = self.be(pos, 4)
                if size < 8 or size > 0x7FFFFFFF:
                    raise FrameError(f"a frame size of {size} bytes")
                doff = self.v[pos + 4]
                if doff < 2:
                    raise FrameError(f"a frame data offset of {doff}")
                if self.v[pos + 5] != 0:
                    raise FrameError(f"a frame of type {self.v[pos + 5]} (not AMQP) on an open connection")
                if n - pos < size:
                    break
                end = pos + size
                frame_channel = self.be(pos + 6, 2)
                if size == 8:
                    pos = end
                    continue
                body = pos + doff * 4
                if body > end:
                    raise FrameError(f"a frame data offset of {doff} past its size of {size} bytes")
                if frame_channel != channel or doff != 2 or not self._is_transfer(body, end):
                    return added, end, (frame_channel, buf[pos:end]), last
                try:
                    payload = self._transfer(body, end, handle)
                except Unsupported:
                    payload = -1
                if payload < 0 or not self._event(buf, payload, end):
                    return added, end, (frame_channel, buf[pos:end]), last
                added += 1
                last = self.delivery
                pos = end
            return added, pos, None, last
        finally:
            self.frame = self.v = b""

    def _transfer(self, body: int, end: int, handle: int) -> int:
        """Where the payload of a single-frame transfer of link ``handle`` starts; -1: the SDK's (see _frames_py)."""
        self.pos = body + 3
        self.end = end
        self.depth = 0
        code = self.u8()
        if code == 0x45:
            raise FrameError("a transfer performative without fields")
        if code != 0xC0 and code != 0xD0:
            raise FrameError(f"a transfer performative that is not a list (constructor 0x{code:02x})")
        count = self.count(code == 0xD0)
        if count < 2:
            raise FrameError("a transfer performative without handle or delivery id")
        ours = True
        for i in range(count):
            if i == 0 or i == 1 or i == 5 or i == 8 or i == 9:
                at = self.pos
                self.scan()
                kind = self.kind
                if kind == K_OTHER:
                    self.pos = at
                    self.skip()
                    ours = False
                elif i == 0:
                    ours = ours and kind == K_UINT and self.u == handle
                elif i == 1:
                    ours = ours and kind == K_UINT  # (a null delivery id, or a negative one: the SDK's)
                    self.delivery = self.u
                elif kind == K_TRUE or ((kind == K_UINT or kind == K_INT or kind == K_BYTES) and self.b > self.a):
                    ours = False  # more, resume, aborted: multi-frame or unusual deliveries stay the SDK's
            else:
                self.skip()
        return self.pos if ours else -1

    # -- one event ---------------------------------------------------------------------------------------------

    def _event(self, data: bytes, pos: int, end: int) -> bool:
        """Add the event of ``data[pos:end]``; False when the SDK must decode it (the frame is handed back)."""
        try:
            self._fast(pos, end)
            self.rows += 1
            return True
        except BaseException as exc:  # the row is cut off (_arrow_cut); anything but Unsupported goes on up
            cut(self.bufs, self.rows)
            if not isinstance(exc, Unsupported):
                raise
        try:
            row = self.slow(data, pos, end)
        except Unsupported:
            return False
        self.append_row(*row)
        return True

    def _fast(self, pos: int, end: int) -> None:
        self.pos = pos
        self.end = end
        self.depth = 0
        annotations = properties = application = data = -1
        while self.pos < end:
            p = self.need(3)
            if self.v[p] != 0x00 or self.v[p + 1] != 0x53:
                raise Unsupported("a section without a small-ulong descriptor")
            d = self.v[p + 2]
            at = self.pos
            if d == 0x72 or d == 0x73 or d == 0x74 or d == 0x75:
                if (d == 0x72 and annotations >= 0 or d == 0x73 and properties >= 0 or d == 0x74 and application >= 0
                        or d == 0x75 and data >= 0):
                    raise Unsupported("a section twice")
                if d == 0x72:
                    annotations = at
                elif d == 0x73:
                    properties = at
                elif d == 0x74:
                    application = at
                else:
                    data = at
            elif d == 0x76 or d == 0x77:
                raise Unsupported("an amqp-value or amqp-sequence body")
            elif d == 0x70:
                code = self.u8()
                if code != 0x45 and (code != 0xC0 and code != 0xD0 or self.count(code == 0xD0) > 5):
                    raise Unsupported("a header that is not a list of at most 5 fields")
                self.pos = at
            self.skip()
        if data < 0 or annotations < 0:
            raise Unsupported("no data section, or no annotations")
        self.pos = data
        self.scan()
        if self.kind != K_BYTES:
            raise Unsupported("a data section that is not binary")
        self.body.copy(self, self.a, self.b)
        self.body_off.i32(self.body.n)
        system = self.system
        first = system.keys_off.n
        if properties >= 0:
            self._properties(properties)
        self._annotations(annotations, first)
        system.end_row()
        if application >= 0:
            self.pos = application
            self.map_entries(self.props)
        self.props.end_row()

    def _properties(self, at: int) -> None:
        self.pos = at
        code = self.u8()
        if code != 0xC0 and code != 0xD0 and code != 0x45:
            raise Unsupported("a properties section that is not a list")
        count = 0 if code == 0x45 else self.count(code == 0xD0)
        if count > 13:
            raise Unsupported("a properties section with more than 13 fields")
        system = self.system
        for i in range(count):
            self.scan()
            kind = self.kind
            if kind == K_OTHER:
                raise Unsupported("a properties field of another type")
            if kind == K_NULL or kind == K_FALSE or (kind != K_TRUE and self.b == self.a):
                continue  # unset or falsy: left out (as SystemProperties does)
            name = _PROPERTY_NAMES[i]
            system.keys.add(name)
            system.keys_off.i32(system.keys.n)
            self.text(system, False)

    def _annotations(self, at: int, first: int) -> None:
        self.pos = at
        code = self.u8()
        if code != 0xC1 and code != 0xD1:
            raise Unsupported("message annotations that are not a map")
        pairs = self.count(code == 0xD1) // 2
        system = self.system
        seq = offset = enqueued = key = publisher = False
        for _ in range(pairs):
            is_publisher = False
            self.key(system, first)
            k = system.keys_off.get_i32(system.keys_off.n - 8)
            kn = system.keys.n - k
            self.scan()
            kind = self.kind
            if kn == 21 and system.keys.view[k + 6] == 0x73 and is_name(system.keys, k, _SEQ):
                if kind != K_UINT and kind != K_INT or kind == K_UINT and self.u >= _TOP:
                    raise Unsupported("a sequence number that is not a long")
                self.seq.i64(self.u if kind == K_UINT else -self.u)
                seq = True
            elif kn == 12 and system.keys.view[k + 6] == 0x6F and is_name(system.keys, k, _OFFSET):
                if kind == K_BYTES:
                    for i in range(self.a, self.b):
                        if self.v[i] >= 0x80:
                            raise Unsupported("an offset that is not ASCII")
                    self.off.copy(self, self.a, self.b)
                elif kind == K_UINT or kind == K_INT:
                    self.off.digits(self.u, kind == K_INT and self.u != 0)
                else:
                    raise Unsupported("an offset of another type")
                self.off_off.i32(self.off.n)
                offset = True
            elif kn == 19 and system.keys.view[k + 6] == 0x65 and is_name(system.keys, k, _ENQUEUED):
                if kind != K_UINT or self.u >= _EXACT_MS:
                    raise Unsupported("an enqueued time outside the usual range")
                self.enq.i64(self.u * 1000)
                enqueued = True
            elif kn == 19 and system.keys.view[k + 6] == 0x70 and is_name(system.keys, k, _PKEY):
                if kind == K_BYTES and self.utf8(self.a, self.b):
                    self.pk.copy(self, self.a, self.b)
                    self.pk_ok.byte(1)
                elif kind == K_NULL:
                    self.pk_ok.byte(0)
                else:
                    raise Unsupported("a partition key of another type")
                self.pk_off.i32(self.pk.n)
                key = True
            elif kn == 15 and system.keys.view[k + 6] == 0x70 and is_name(system.keys, k, _PUBLISHER):
                publisher = is_publisher = True
            self.text(system, True)
            if is_publisher:  # the publisher column: the entry's text
                t = system.values_off.get_i32(system.values_off.n - 8)
                self.pub.copy_buf(system.values, t, system.values.n)
                self.pub_ok.byte(system.valid.view[system.valid.n - 1])
                self.pub_off.i32(self.pub.n)
        if not seq or not offset:
            raise Unsupported("no sequence number or offset")
        if not enqueued:
            self.enq.i64(0)  # (what a missing time converts to)
        if not key:
            self.pk_ok.byte(0)
            self.pk_off.i32(self.pk.n)
        if not publisher:
            self.pub_ok.byte(0)
            self.pub_off.i32(self.pub.n)

    # -- rows from elsewhere, and handing the buffers over -----------------------------------------------------

    def append_row(self, body: bytes, offset: str, seq: int, micros: int, publisher: Any, key: Any,
                   properties: list[Any], system: list[Any]) -> None:
        """One row from Python values (an event :mod:`~rxhubs.spark._arrow_batch` decoded the general way)."""
        self.body.add(body)
        self.body_off.i32(self.body.n)
        self.off.add(offset.encode())
        self.off_off.i32(self.off.n)
        self.seq.i64(seq)
        self.enq.i64(micros)
        put(self.pk, self.pk_off, self.pk_ok, key)
        put(self.pub, self.pub_off, self.pub_ok, publisher)
        for column, entries in ((self.props, properties), (self.system, system)):
            for name, value in entries:
                column.keys.add(name.encode())
                column.keys_off.i32(column.keys.n)
                put(column.values, column.values_off, column.valid, value)
            column.end_row()
        self.rows += 1

    def size(self) -> int:
        """Bytes of bodies held."""
        n: int = self.body.n
        return n

    def take(self) -> tuple[int, Any]:
        """``(rows, buffers)``: the rows so far as Arrow buffers (see ``_arrow_batch.record_batch``); starts anew."""
        rows = self.rows
        pk_bits = bits(self.pk_ok, rows)
        pub_bits = bits(self.pub_ok, rows)
        maps = []
        for m in self.maps:
            maps.append((m.offsets.take(), m.keys.take(), m.keys_off.take(), m.values.take(), m.values_off.take(),
                         bits(m.valid, m.valid.n), m.valid.n))
            m.valid.take()
            m.start()
        out = (self.body.take(), self.body_off.take(), self.off.take(), self.off_off.take(), self.seq.take(),
               self.enq.take(), self.pk.take(), self.pk_off.take(), pk_bits, self.pub.take(), self.pub_off.take(),
               pub_bits, maps[0], maps[1])
        self.pk_ok.take()
        self.pub_ok.take()
        for buf in (self.body_off, self.off_off, self.pk_off, self.pub_off):
            buf.i32(0)
        self.rows = 0
        return rows, out

    def _is_transfer(self, body: int, end: int) -> bool:
        return end - body >= 4 and self.v[body] == 0x00 and self.v[body + 1] == 0x53 and self.v[body + 2] == 0x14


try:  # the compiled build: the hash setup.py compiled in (a C macro, declared in the .pxd); rxhubs/_extensions.py
    SOURCE_SHA256: str = RXHUBS_SOURCE_SHA256.decode("ascii")
except NameError:  # the pure-Python build has none
    SOURCE_SHA256 = ""
