"""Geo-replication: the namespace's replication segment, its offsets, and a promotion (``faults.promote()``).

A Premium or Dedicated namespace with geo-replication keeps copies of its events in other regions; promoting a
secondary repoints the namespace to it. What clients see, and what the emulator does (facts from the SDKs:
azure-eventhub 5.15.0 "offsets are strings", the Go SDK's geo-replication tests against a live namespace):

* Every client connection ends (the emulator closes each with ``amqp:connection:forced``).
* Sequence numbers carry over: a position by sequence number, or by enqueued time, reads on as before.
* Offsets take the geo-replicated form, an opaque string (the service's "contains broker and partition
  information"): the emulator's is ``<segment>:<partition>:<byte offset>``, and after a promotion every event,
  old or new, is delivered with the offset of the new segment. Before any promotion offsets stay numeric.
* A position by an offset of another segment, a plain numeric one included, gets the service's answer: the
  receiver link is refused with ``com.microsoft:georeplication:invalid-offset``.
* The hub's properties carry ``georeplication_factor`` (1 before, 2 once promoted: "> 1" is how the SDKs tell a
  geo-replicated hub); partition properties and runtime metrics report offsets in the segment's form. Links that
  ask for the ``com.microsoft:georeplication`` capability (azure-eventhub >= 5.15 always does) get it offered back.

With a data directory the segment is kept in ``DATA_DIR/replication_segment``: a restarted emulator stays in it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

from rxhubs.emulator import _delivery as dl
from rxhubs.emulator import _message as msg
from rxhubs.emulator._codec import encode_value

if TYPE_CHECKING:
    from rxhubs.emulator._hub import Hub
    from rxhubs.emulator._hubs import Partition
    from rxhubs.emulator._selectors import StartPosition
    from rxhubs.emulator._server import Server

__all__ = ["CAPABILITY", "GEO_OFFSET", "INVALID_OFFSET", "GeoOffsetError", "Replication", "offset_text", "restamp"]

CAPABILITY = "com.microsoft:georeplication"
INVALID_OFFSET = "com.microsoft:georeplication:invalid-offset"
SEGMENT_FILE = "replication_segment"
#: An offset in the geo-replicated form the emulator writes: segment, partition, byte offset.
GEO_OFFSET = re.compile(r"^(\d+):([^:']+):(\d+)$")


def offset_text(segment: int, partition_id: str, offset: int) -> str:
    """An event's offset as delivered in ``segment`` (0: never promoted, the plain number).

    Example:
        >>> offset_text(0, "3", 4096), offset_text(2, "3", 4096)
        ('4096', '2:3:4096')
    """
    return str(offset) if segment == 0 else f"{segment}:{partition_id}:{offset}"


class GeoOffsetError(Exception):
    """A start position by an offset that is not one of the namespace's current replication segment."""

    condition = INVALID_OFFSET


class Replication:
    """The namespace's replication segment (0 until the first promotion), kept in its data directory."""

    def __init__(self, data_dir: Path | None) -> None:
        self._file = data_dir / SEGMENT_FILE if data_dir is not None else None
        self.segment = 0
        if self._file is not None:
            try:
                self.segment = max(0, int(self._file.read_text()))
            except (OSError, ValueError):
                self.segment = 0

    @property
    def factor(self) -> int:
        """The hub property ``georeplication_factor``: 1 for a single region, 2 once a secondary was promoted."""
        return 1 if self.segment == 0 else 2

    def promote(self) -> int:
        """Move to the next segment (kept first, when there is a data directory); return it.

        Raises:
            OSError: The segment could not be written (nothing changed).
        """
        segment = self.segment + 1
        if self._file is not None:
            self._file.parent.mkdir(parents=True, exist_ok=True)
            tmp = self._file.with_suffix(".tmp")
            tmp.write_text(str(segment))
            os.replace(tmp, self._file)
        self.segment = segment
        return segment

    def resolve(self, start: StartPosition | None, partition_id: str) -> StartPosition | None:
        """``start`` with an offset of this segment turned into the byte offset the partition's log knows.

        Raises:
            GeoOffsetError: An offset of another segment (a plain number once promoted, or another segment's
                string), or one that is not an offset at all.
        """
        from rxhubs.emulator._selectors import StartPosition

        if start is None or start.kind != "offset" or start.value in ("-1", "@latest"):
            return start
        value, segment = start.value, self.segment
        if value.isdigit():
            if segment == 0:
                return start
            raise GeoOffsetError(
                f"The offset '{value}' is not valid in a geo-replicated namespace (replication segment {segment}): "
                "use an offset of the current segment or a sequence number.")
        found = GEO_OFFSET.match(value)
        if found is None or int(found.group(1)) != segment or found.group(2) != partition_id:
            where = f"replication segment {segment}" if segment else "a namespace that was never promoted"
            raise GeoOffsetError(f"The offset '{value}' is not an offset of partition '{partition_id}' in {where}: "
                                 "use an offset of the current segment or a sequence number.")
        return StartPosition("offset", found.group(3), start.inclusive)

    def apply(self, hub: Hub) -> None:
        """Put every partition of ``hub`` in the current segment (stored events re-stamped with its offsets)."""
        hub.segment = self.segment
        for partition in hub.partitions.values():
            if partition.segment != self.segment:
                restamp(partition, self.segment)


def promote(server: Server) -> dict[str, int]:
    """Promote a secondary: the next segment, every event re-stamped with its offsets, every connection closed.

    Returns:
        ``{"segment": N, "closed": connections closed}``.

    Raises:
        OSError: The segment could not be kept in the data directory (nothing changed).
    """
    from rxhubs.emulator import _frames as fr

    replication = server.replication
    segment = replication.promote()
    for hub in server.hubs.values():
        replication.apply(hub)
    closing = [c for c in list(server.connections) if not c.closing]
    for conn in closing:
        conn.force_close(fr.CONNECTION_FORCED, f"The namespace was promoted to another region (geo-replication, "
                         f"replication segment {segment}); reconnect. (rxhubs emulator fault control)")
    return {"segment": segment, "closed": len(closing)}


def restamp(partition: Partition, segment: int) -> None:
    """Give every stored event of ``partition`` its offset in ``segment`` (once, at a promotion or a restart)."""
    partition.segment = segment
    heads, bodies, largest = partition.heads, partition.bodies, 0
    pid = partition.partition_id
    for i, (head, body) in enumerate(zip(heads, bodies, strict=True)):
        da_pos = len(head) - dl.HEAD
        text = offset_text(segment, pid, partition.offsets[i]).encode()
        message = with_offset(dl.message_of(head, body), da_pos, text)
        heads[i], bodies[i] = dl.stored(message, da_pos)
        largest = max(largest, len(heads[i]) + len(bodies[i]))
    partition.largest_frame = largest


def with_offset(message: bytes, da_pos: int, offset: bytes) -> bytes:
    r"""``message`` with its ``x-opt-offset`` message annotation set to ``offset`` (a str8 value).

    Example:
        >>> prepared = msg.prepare(b"\x00\x53\x75\xa0\x02hi")
        >>> stamped, da_pos = msg.stamp(prepared, 7, 4096, 0, None)
        >>> b"4096" in stamped, b"1:0:4096" in with_offset(stamped, da_pos, b"1:0:4096")
        (True, True)
    """
    pos = da_pos
    if message[pos : pos + 3] == b"\x00\x53\x71":  # the sender's delivery annotations come first
        pos = msg._value_end(message, pos + 3, len(message))
    if message[pos : pos + 3] != b"\x00\x53\x72":
        return message  # no message annotations: not an event the emulator stamped
    stop = msg._value_end(message, pos + 3, len(message))
    pairs = msg._map_pairs(message, pos + 3, stop)
    key = encode_value(msg.PROP_OFFSET)
    value = encode_value(offset.decode())
    entries = [message[k:e] if message[k:v] != key else key + value for k, v, e in pairs]
    body = b"".join(entries)
    count = 2 * len(entries)
    if len(body) < 255 and count < 256:
        section = b"\x00\x53\x72\xc1" + bytes((len(body) + 1, count)) + body
    else:
        section = b"\x00\x53\x72\xd1" + (len(body) + 4).to_bytes(4, "big") + count.to_bytes(4, "big") + body
    return message[:pos] + section + message[stop:]
