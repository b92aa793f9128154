"""Deliveries to consumers: every stored event is kept as the transfer frame that delivers it.

A partition stores each event once, at append, as the transfer frame that delivers it, in two parts
(:func:`stored`): the *head* (the frame header and the transfer performative with its link fields left zero:
channel, handle, delivery id and tag; then the message's header section, if any) and the *body* (the rest of
the message, from where delivery annotations go). A delivery joins a run of stored heads and bodies into one
buffer, one socket write, and patches each frame's link fields in place (:func:`assemble`): one ``pack_into``
per event, no encoding and no per-event copy beyond the join. A link that asked for runtime metrics gets the
metrics section joined in between each head and body, and each frame's size patched too
(:func:`assemble_with_metrics`). A message with delivery annotations of its own (merged with the metrics) or a
frame larger than the peer's max frame size goes through :func:`rxhubs.emulator._frames.transfer_frames`.
"""

from __future__ import annotations

import struct

__all__ = ["DA", "HEAD", "assemble", "assemble_with_metrics", "message_of", "stored"]

# frame header, descriptor, list8 (29 bytes, 11 fields), handle uint, delivery-id uint, tag vbin8(4), format uint,
# settled false, more false, then rcv-settle-mode, state, resume, aborted, batchable all null; as
# rxhubs.emulator._frames.transfer_frames encodes a delivery that fits in one frame.
_FRAME = struct.Struct(">IBBH3s3sBIBI2sIBIBB5s")
HEAD = _FRAME.size  # bytes before the message
_DESC = b"\x00\x53\x14"
_LIST = b"\xc0\x1d\x0b"
_DESC_LIST = _DESC + _LIST
_NULLS = b"\x40" * 5
_TAG = b"\xa0\x04"
DA = b"\x00\x53\x71"  # how a delivery annotations section starts; a stored body that does is the sender's own
_LINK = struct.Struct(">H6sBIBI2sI")  # channel .. tag, written at byte 6 of a frame
_LINK_AT = 6
_SIZED = struct.Struct(">IBBH6sBIBI2sI")  # the same with the frame's size in front
_MASK = 0xFFFFFFFF
_SIZE = struct.Struct(">I")
_AFTER_SIZE = _FRAME.pack(0, 2, 0, 0, _DESC, _LIST, 0x70, 0, 0x70, 0, _TAG, 0, 0x70, 0, 0x42, 0x42, _NULLS)[4:]
_HEADS: dict[int, bytes] = {}  # by frame size
_HEADS_KEPT = 65536


def stored(message: bytes | memoryview, da_pos: int) -> tuple[bytes, bytes]:
    r"""The head and body of the transfer frame that delivers ``message`` (unsettled, format 0), link fields zero.

    ``da_pos`` is where the message's delivery annotations section is or goes (after its header section).

    Example:
        >>> head, body = stored(b"\x00\x53\x75\xa0\x02hi", 0)
        >>> len(head) == HEAD, body, message_of(head, body)
        (True, b'\x00Su\xa0\x02hi', b'\x00Su\xa0\x02hi')
    """
    size = HEAD + len(message)
    if da_pos:
        body = message[da_pos:]
        return _SIZE.pack(size) + _AFTER_SIZE + message[:da_pos], body if isinstance(body, bytes) else bytes(body)
    head = _HEADS.get(size)
    if head is None:  # heads without a header section are alike for a size: shared, up to a bound
        head = _SIZE.pack(size) + _AFTER_SIZE
        if len(_HEADS) < _HEADS_KEPT:
            _HEADS[size] = head
    return head, message if isinstance(message, bytes) else bytes(message)


def message_of(head: bytes, body: bytes) -> bytes:
    """The message a stored frame delivers."""
    return head[HEAD:] + body


def assemble(heads: list[bytes], bodies: list[bytes], channel: int, handle: int, first_id: int) -> bytearray:
    """The stored frames as one buffer, with delivery ids ``first_id``, ``first_id + 1``, ... on this link.

    Each frame must fit in the peer's max frame size (the caller checks).
    """
    pieces = [b""] * (2 * len(heads))
    pieces[::2] = heads
    pieces[1::2] = bodies
    out = bytearray().join(pieces)
    pack = _LINK.pack_into
    pos = _LINK_AT
    did = first_id
    for head, body in zip(heads, bodies, strict=True):
        pack(out, pos, channel, _DESC_LIST, 0x70, handle, 0x70, did, _TAG, did)
        pos += len(head) + len(body)
        did = (did + 1) & _MASK
    return out


def assemble_with_metrics(heads: list[bytes], bodies: list[bytes], channel: int, handle: int, first_id: int,
                          section: bytes) -> bytearray:
    """Like :func:`assemble`, each message with the delivery annotations ``section`` (runtime metrics) added.

    No body may start with delivery annotations of its own (:data:`DA`; those need a merge),
    and each frame, ``len(section)`` bytes longer, must fit in the peer's max frame size (the caller checks).
    """
    pieces = [section] * (3 * len(heads))
    pieces[::3] = heads
    pieces[2::3] = bodies
    out = bytearray().join(pieces)
    pack = _SIZED.pack_into
    extra = len(section)
    pos = 0
    did = first_id
    for head, body in zip(heads, bodies, strict=True):
        size = len(head) + extra + len(body)
        pack(out, pos, size, 2, 0, channel, _DESC_LIST, 0x70, handle, 0x70, did, _TAG, did)
        pos += size
        did = (did + 1) & _MASK
    return out
