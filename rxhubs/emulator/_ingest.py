"""The emulator's ingest of a batch message, fast for plain events: the same bytes as the general path.

A publisher's batch message holds its events as data sections of the outer message; each event is usually plain:
no header, message or delivery annotations, only what the service keeps as it is (application properties, data).
:func:`split_plain` splits and checks such events without a generator per message, and :func:`stamp_run`
stamps them (sequence number, offset, enqueued time, partition key) and makes their stored transfer frames in one
loop. Anything else (a header, annotations, an unusual encoding, a geo-replicated offset) takes the general
path of :mod:`rxhubs.emulator._message` (``split_batch``, ``prepare``, ``stamp``), so both give the same stored
bytes (``tests/emulator/test_ingest.py`` holds them to it) and refuse the same malformed messages.
"""

from __future__ import annotations

import struct
from typing import Any

from rxhubs.emulator import _delivery
from rxhubs.emulator import _message as msg
from rxhubs.emulator._codec import decode_value
from rxhubs.emulator._encode import encode_value
from rxhubs.emulator._frames import SEC_DELIVERY_ANNOTATIONS, SEC_HEADER, SEC_MESSAGE_ANNOTATIONS

__all__ = ["RECORD", "split_plain", "stamp_run"]

_I = struct.Struct(">I")
_q = struct.Struct(">q")
_II = struct.Struct(">II")
_DATA = b"\x00\x53\x75"
_DATA_B0 = b"\x00\x53\x75\xb0"
_DURABLE = b"\x00\x53\x70\xc0\x07\x05\x56\x01\x40\x40\x40\x40"  # a header: durable, the rest null (pyamqp's)
_APP = b"\x00\x53\x74"
_ANN = b"\x00\x53\x72"
_KEY_PAIR_START = msg._K_KEY
#: Bytes of a partition log's record header (``_hubs._REC``: size, crc, time, delivery annotations' position).
RECORD = 20


def _plain(m: bytes) -> bool:
    """True when ``m`` is ``[application properties] data`` with every size consistent (else: the general path)."""
    end = len(m)
    pos = 0
    if m[:3] == _APP and end > 5:
        code = m[3]
        if code == 0xC1:
            pos = 5 + m[4]
        elif code == 0xD1 and end > 8:
            pos = 8 + _I.unpack_from(m, 4)[0]
        else:
            return False
    if m[pos : pos + 3] != _DATA or pos + 5 > end:
        return False
    code = m[pos + 3]
    if code == 0xA0:
        return pos + 5 + m[pos + 4] == end
    if code == 0xB0 and pos + 8 <= end:
        return bool(pos + 8 + _I.unpack_from(m, pos + 4)[0] == end)
    return False


def split_plain(payload: bytes) -> tuple[dict[Any, Any], list[bytes], bytes] | None:
    """The outer annotations, inner messages and their prefix of a batch of plain messages; None: the general path.

    A keyed batch's messages (as azure-eventhub and the native send path write them) each start with the same
    prefix, the durable header and the batch's partition key annotation: it is returned, each message without it.
    The same checks as ``msg.split_batch`` and ``msg.prepare``: a payload they would refuse is never plain here.
    """
    end = len(payload)
    if not end:
        return None  # (refused by the general path)
    ann: dict[Any, Any] = {}
    pos = 0
    while pos < end and not payload.startswith(_DATA, pos):  # the header and annotations before the events
        if not (payload.startswith(b"\x00\x53", pos) and pos + 3 < end):
            return None
        code = payload[pos + 2]
        if code not in (SEC_HEADER, SEC_MESSAGE_ANNOTATIONS, SEC_DELIVERY_ANNOTATIONS):
            return None
        stop = msg._value_end(payload, pos + 3, end)
        if code == SEC_MESSAGE_ANNOTATIONS:
            value, _ = decode_value(payload, pos + 3, stop, 1)
            if isinstance(value, dict):
                ann = value
        pos = stop
    key = msg.partition_key_of(ann)
    prefix = b"" if key is None else _DURABLE + _ANN + encode_value({msg.PROP_KEY: key})  # each keyed message's
    skip = len(prefix)
    inner: list[bytes] = []
    append, starts, unpack, plain = inner.append, payload.startswith, _I.unpack_from, _plain
    try:
        while pos < end:
            if not starts(_DATA_B0, pos):
                return None
            stop = pos + 8 + unpack(payload, pos + 4)[0]
            if stop > end or (skip and not starts(prefix, pos + 8)):
                return None
            first = pos + 8 + skip
            if starts(_DATA_B0, first) and first + 8 + unpack(payload, first + 4)[0] == stop:
                append(payload[first:stop])  # the usual event: one vbin32 data section, nothing else
            else:
                m = payload[first:stop]
                if not m or not plain(m):
                    return None
                append(m)
            pos = stop
    except struct.error:  # a size field past the end
        return None
    return ann, inner, prefix


def _annotations_start(body_size: int, count: int) -> bytes:
    if body_size < 255:
        return _ANN + b"\xc1" + bytes((body_size + 1, count))
    return _ANN + b"\xd1" + _II.pack(body_size + 4, count)


def stamp_run(
    messages: list[bytes], first_seq: int, offset: int, t: int, partition_key: str | None,
    lists: tuple[list[int], list[int], list[bytes], list[bytes]], largest: int, prefix: bytes = b"",
) -> tuple[int, int]:
    """Stamp and keep plain ``messages`` (appended to ``lists``: offsets, times, heads, bodies) in one loop.

    ``messages``: plain messages (:func:`split_plain`), each after ``prefix``; each is stamped as ``msg.stamp``
    stamps its ``Prepared`` (the prefix's header kept, its key annotation among the stamped ones).
    Returns the next offset and the largest frame.
    """
    key_pair = b"" if partition_key is None else _KEY_PAIR_START + encode_value(partition_key)
    count = 6 if partition_key is None else 8
    fixed = msg._FIXED_SIZE + len(key_pair)
    around: dict[int, tuple[bytes, bytes]] = {}  # by the offset's digits: what goes before and after the seq
    tail = msg._K_TIME + _q.pack(t) + key_pair
    offsets, times, heads, bodies = lists
    pack, join = _q.pack, b"".join
    made: list[bytes] = []
    keep, at = made.append, offsets.append
    header = prefix[: len(_DURABLE)]
    seq, extra = first_seq, len(header)
    for m in messages:
        off = b"%d" % offset
        pieces = around.get(len(off))
        if pieces is None:
            n = len(off)
            pieces = around[n] = (_annotations_start(fixed + n, count) + msg._K_SEQ, msg._K_OFF + bytes((0xA1, n)))
        encoded = join((pieces[0], pack(seq), pieces[1], off, tail, m))
        keep(encoded)
        at(offset)
        offset += RECORD + extra + len(encoded)
        seq += 1
    sizes = [_delivery.HEAD + extra + size for size in map(len, made)]
    if header:  # the header goes in the frame's head (before where delivery annotations go)
        by_size: dict[int, bytes] = {}
        for size, body in zip(sizes, made, strict=True):
            if size not in by_size:
                by_size[size] = _delivery.stored(header + body, extra)[0]
        heads.extend([by_size[size] for size in sizes])
    else:
        shared = _delivery._HEADS
        heads.extend([shared.get(size) or _delivery.stored(body, 0)[0] for size, body in zip(sizes, made, strict=True)])
    bodies.extend(made)
    times.extend([t] * len(made))
    largest = max(largest, max(sizes, default=0))
    return offset, largest
