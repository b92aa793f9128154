"""Malformed AMQP frames on a live connection: :meth:`FaultProxy.corrupt <CorruptFaults.corrupt>` and its tracker.

A network does not flip bits inside TCP (the checksums see to that), but a broken middlebox, a buggy peer or a
memory fault can hand a reader bytes that are not the frames it expects; the reader must fail that connection
with a typed, retriable error and nothing else. Each proxied connection follows the AMQP frames of its stream
(:class:`FrameTracker`: protocol headers, then 4-byte sizes) at little cost, and while a ``corrupt`` fault is
armed it holds back each frame until it is whole, so that it can damage the next transfer frame that carries an event
(its annotations hold ``x-opt-sequence-number``: the replies of CBS and management links are left alone) in one
of three ways:

* ``"flip"``: the constructor byte of the first message section's value is inverted (0xC1, a map, becomes
  0x3E): a value that is no AMQP constructor, in a frame whose framing is intact;
* ``"truncate"``: the frame's size field is cut to end halfway through the payload, so the rest of the frame
  reads as the next frame's header (garbage framing);
* ``"oversize"``: the size field says 2**31 - 16 bytes, far past the connection's maximum frame size, while the
  frame's own bytes follow (a reader that trusts it waits for, or allocates, 2 GB);
* ``"section"``: the section code of the message annotations (0x72) is inverted (0x8D, no AMQP section): the
  frame and every value are well formed, and a decoder that skips an unknown section, as AMQP readers do, gives
  an event without its annotations (no sequence number, offset or enqueued time).

After a frame it damaged the tracker stops following that stream (its framing is no longer what the client
sees) and passes the rest through untouched.
"""

from __future__ import annotations

from typing import Any

from rxhubs.errors import ConfigurationError

__all__ = ["KINDS", "OVERSIZE", "CorruptFaults", "FrameTracker", "damage"]

#: What :meth:`CorruptFaults.corrupt` can do to a transfer frame (see the module docstring).
KINDS = ("flip", "truncate", "oversize", "section")
#: The size field an ``"oversize"`` frame is given.
OVERSIZE = 0x7FFFFFF0

_HEADER = b"AMQP"
_EVENT = b"x-opt-sequence-number"  # an event's annotation: not in the CBS or management replies
_ANNOTATIONS = b"\x00\x53\x72"  # the message annotations section's descriptor


def _payload_at(frame: bytes | bytearray) -> int | None:
    """Where a transfer frame's event payload starts, or None if ``frame`` is not a transfer carrying an event."""
    if len(frame) < 8 or frame[5] != 0:
        return None
    body = frame[4] * 4
    if body + 5 > len(frame) or frame[body:body + 3] != b"\x00\x53\x14":
        return None
    code = frame[body + 3]
    if code == 0xC0:
        payload = body + 5 + frame[body + 4]
    elif code == 0xD0 and body + 8 <= len(frame):
        payload = body + 8 + int.from_bytes(frame[body + 4:body + 8], "big")
    else:
        return None
    if payload + 3 >= len(frame) or _EVENT not in frame[payload:]:
        return None
    return payload


def damage(frame: bytes | bytearray, kind: str) -> bytes | None:
    """``frame`` damaged as ``kind`` says (module docstring), or None when it is not a transfer carrying an event.

    Example:
        >>> from azure.eventhub._pyamqp._encode import encode_frame, encode_payload
        >>> from azure.eventhub._pyamqp.message import Message
        >>> from azure.eventhub._pyamqp.performatives import TransferFrame
        >>> event = Message(data=[b"hi"], message_annotations={b"x-opt-sequence-number": 7})
        >>> payload = bytes(encode_payload(bytearray(), event))
        >>> head, body = encode_frame(TransferFrame(handle=0, delivery_id=5, delivery_tag=b"t", payload=payload))
        >>> frame = bytes(head + (1).to_bytes(2, "big") + body)
        >>> flipped = damage(frame, "flip")
        >>> len(flipped) == len(frame), sum(a != b for a, b in zip(frame, flipped))
        (True, 1)
        >>> int.from_bytes(damage(frame, "oversize")[:4], "big") == OVERSIZE
        True
        >>> damage(bytes([0, 0, 0, 8, 2, 0, 0, 0]), "flip") is None  # a keep-alive: not a transfer
        True
    """
    payload = _payload_at(frame)
    if payload is None:
        return None
    out = bytearray(frame)
    if kind == "flip":
        out[payload + 3] ^= 0xFF  # the constructor of the first section's value (after 0x00 0x53 code)
    elif kind == "truncate":
        out[:4] = (payload + max(1, (len(frame) - payload) // 2)).to_bytes(4, "big")
    elif kind == "oversize":
        out[:4] = OVERSIZE.to_bytes(4, "big")
    elif kind == "section":
        at = frame.find(_ANNOTATIONS, payload)  # (the first one: the delivery annotations' keys hold no such bytes)
        if at < 0:
            return None
        out[at + 2] ^= 0xFF
    else:
        raise ConfigurationError(f"corrupt kind must be one of {', '.join(KINDS)}, got {kind!r}")
    return bytes(out)


class FrameTracker:
    """Follows the AMQP frames of one direction of one connection; damages a transfer frame while armed.

    Unarmed, every byte passes at once, uncopied (only frame boundaries are counted); armed, bytes from the next
    frame boundary on are held back until their frame is whole, and the first transfer frame is damaged. After
    that, or when the bytes are not AMQP framing, the tracker goes blind and passes everything.
    """

    def __init__(self) -> None:
        self._held = bytearray()  # bytes from a frame boundary on, not passed on yet (armed only)
        self._head = bytearray()  # the first bytes of a frame header, already passed on
        self._skip = 0  # bytes of the current frame still to pass on untouched
        self._blind = False

    def _header(self, head: bytes | bytearray) -> None:
        """A whole 8-byte header seen: a protocol header, or a frame's (its body still to pass)."""
        if head[:4] != _HEADER:
            size = int.from_bytes(head[:4], "big")
            self._blind = size < 8  # not AMQP framing: nothing to follow
            self._skip = max(0, size - 8)

    def _count(self, data: bytes, pos: int, *, to_boundary: bool) -> int:
        """Count ``data[pos:]`` through frames already passed on; returns where it stopped.

        ``to_boundary``: stop at the next frame boundary (where an armed tracker starts holding bytes back).
        """
        n = len(data)
        while pos < n and not self._blind:
            if self._skip:
                take = min(self._skip, n - pos)
                self._skip -= take
                pos += take
                continue
            if to_boundary and not self._head:
                break
            take = min(8 - len(self._head), n - pos)
            self._head += data[pos:pos + take]
            pos += take
            if len(self._head) == 8:
                self._header(self._head)
                self._head.clear()
        return pos

    def feed(self, data: bytes, kind: str | None) -> tuple[bytes, bool]:
        """The bytes to forward for ``data`` (fewer: held back, more: released); True when a frame was damaged."""
        if self._blind:
            return data, False
        if kind is None:
            if self._held:  # disarmed while holding: release what was held
                data = bytes(self._held) + data
                self._held.clear()
            if not self._head and self._skip >= len(data):
                self._skip -= len(data)
            else:
                self._count(data, 0, to_boundary=False)
            return data, False
        pos = 0 if self._held else self._count(data, 0, to_boundary=True)
        out = bytearray(data[:pos])
        held = self._held
        held += data[pos:]
        damaged = False
        while not self._blind and len(held) >= 8:
            if held[:4] == _HEADER:
                out += held[:8]
                del held[:8]
                continue
            size = int.from_bytes(held[:4], "big")
            if size < 8:
                self._blind = True
                break
            if len(held) < size:
                break  # wait for the whole frame
            frame = bytes(held[:size])
            del held[:size]
            broken = damage(frame, kind)
            out += frame if broken is None else broken
            damaged = self._blind = broken is not None
        if self._blind:
            out += held
            held.clear()
        return bytes(out), damaged


class CorruptFaults:
    """The ``corrupt`` fault of :class:`~rxhubs.testing.FaultProxy` (a mixin: the proxy's state is its own)."""

    _faults: Any
    _change: Any

    def corrupt(self, kind: str = "flip", count: int = 1, direction: str = "downstream") -> None:
        """Damage the next ``count`` event frames that pass in ``direction`` (one per connection, first come).

        An event frame is a transfer whose annotations hold ``x-opt-sequence-number`` (module docstring).
        ``kind`` is ``"flip"`` (a payload byte inverted), ``"truncate"`` (the size field ends the frame halfway
        through), ``"oversize"`` (the size field says 2 GB) or ``"section"`` (the message annotations' section
        code inverted: a well-formed event without its annotations). A connection is damaged once. The count
        goes down as frames are damaged (:attr:`ProxyStats.frames_corrupted`); :meth:`heal` disarms it.

        Args:
            kind: ``"flip"``, ``"truncate"``, ``"oversize"`` or ``"section"``.
            count: How many frames to damage, >= 1.
            direction: ``"downstream"`` (the hub's frames to the client, the default) or ``"upstream"``.

        Example:
            >>> from rxhubs.testing import FaultProxy
            >>> proxy = FaultProxy("127.0.0.1", 5672)
            >>> proxy.corrupt("truncate", count=2)
            >>> proxy.mode
            'corrupt(truncate x2,downstream)'
        """
        if kind not in KINDS:
            raise ConfigurationError(f"corrupt kind must be one of {', '.join(KINDS)}, got {kind!r}")
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ConfigurationError(f"count must be an integer >= 1, got {count!r}")
        if direction not in ("upstream", "downstream"):
            raise ConfigurationError(f"direction must be 'upstream' or 'downstream', got {direction!r}")
        self._change(lambda: self._faults.corrupt.update({direction: (kind, count)}))
