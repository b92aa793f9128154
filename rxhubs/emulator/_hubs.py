"""The partitions of an event hub: append-only logs in memory or in files, positions, reader rules.

Offsets are byte positions in the partition's log (the same numbers whether or not the log is on disk), so
they only grow; sequence numbers count from 0. In memory each event is kept as the transfer frame that delivers
it (:mod:`rxhubs.emulator._delivery`), encoded once. A durable log file is a magic header then records of
``[length u32][crc32 u32][enqueued ms i64][delivery-annotation position u32][message]``; recovery keeps every
whole record and cuts the file after the last one, so a record torn by a kill mid-write is dropped.

The hub that holds them (consumer groups, routing, growth) is :mod:`rxhubs.emulator._hub`.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import os
import struct
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from rxhubs.emulator import _delivery
from rxhubs.emulator import _message as msg
from rxhubs.emulator._codec import Timestamp
from rxhubs.emulator._geo import offset_text
from rxhubs.emulator._ingest import stamp_run
from rxhubs.emulator._retention import Retention, expire
from rxhubs.emulator._selectors import StartPosition

_LOG = logging.getLogger("rxhubs.emulator")

MAGIC = b"RXEHLOG1"
_REC = struct.Struct(">IIqI")
_CRC_FIELDS = struct.Struct(">qI")
MAX_READERS = 5


class Reader(Protocol):
    """A consumer link as the partition's reader rules see it."""

    epoch: int | None

    def evict(self, condition: str, description: str) -> None:
        """Detach the reader with an error (its partition was taken by a higher owner level)."""


def now_ms() -> int:
    return int(time.time() * 1000)


#: Called after each append with the partition, the first new sequence number and the count (Capture).
AppendListener = Callable[["Partition", int, int], None]
_DROP_CHUNK = 1024  # expired events leave memory in runs of at least this many (or half the list)


class Partition:
    """One partition: an append-only log of encoded events plus the readers attached to it.

    The lists hold the events from sequence number :attr:`base` on; :attr:`first` is the first one retained
    (``beginning_sequence_number``), at or after ``base``: expired events leave the lists in chunks
    (:mod:`rxhubs.emulator._retention`). Reader cursors are sequence numbers.
    """

    def __init__(self, hub: str, partition_id: str, path: Path | None, retention: Retention | None = None) -> None:
        self.hub = hub
        self.partition_id = partition_id
        self.base = 0  # sequence number of the first event the lists hold
        self.first = 0  # the first retained sequence number (>= base)
        self.retention = retention or Retention()
        self.listeners: list[AppendListener] = []
        self.offsets: list[int] = []
        self.times: list[int] = []
        # each event as its transfer frame (link fields zero), by sequence number: heads and bodies
        self.heads: list[bytes] = []
        self.bodies: list[bytes] = []
        self.own_da: list[int] = []  # sequence numbers of the events whose sender set delivery annotations
        self.largest_frame = 0  # bytes of the largest stored frame
        self.next_offset = len(MAGIC)
        self.segment = 0  # the namespace's replication segment: how offsets are written (rxhubs.emulator._geo)
        self.readers: dict[str, list[Reader]] = {}
        self._signal: asyncio.Future[None] | None = None
        self._fd: int | None = None
        if path is not None:
            self._open(path)
            self.expire()

    # ------------------------------------------------------------------ durability
    def _open(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        with os.fdopen(os.dup(fd), "rb") as f:
            blob = f.read()
        if len(blob) < len(MAGIC) or blob[: len(MAGIC)] != MAGIC:
            if blob:
                _LOG.warning("%s: not an emulator log, starting it afresh", path)
            os.ftruncate(fd, 0)
            os.lseek(fd, 0, os.SEEK_SET)
            os.write(fd, MAGIC)
            blob = MAGIC
        pos = len(MAGIC)
        end = len(blob)
        view = memoryview(blob)
        while pos + _REC.size <= end:
            length, crc, enq, da = _REC.unpack_from(blob, pos)
            start = pos + _REC.size
            if start + length > end:
                break
            body = view[start : start + length]
            if zlib.crc32(body, zlib.crc32(_CRC_FIELDS.pack(enq, da))) != crc or da > length:
                break
            self.offsets.append(pos)
            self.times.append(enq)
            self._keep(body, da)
            pos = start + length
        if pos != end:
            _LOG.warning("%s: dropped a torn record at byte %d (%d bytes)", path, pos, end - pos)
            os.ftruncate(fd, pos)
        os.lseek(fd, pos, os.SEEK_SET)
        self.next_offset = pos
        self._fd = fd

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    # ------------------------------------------------------------------ appending
    @property
    def last_sequence_number(self) -> int:
        return self.base + len(self.bodies) - 1

    @property
    def next_sequence_number(self) -> int:
        """The sequence number the next event appended gets."""
        return self.base + len(self.bodies)

    def expire(self, now: int | None = None) -> int:
        """Apply the retention at ``now`` (ms; default the clock); return the first retained sequence number."""
        if not self.retention.limited:
            return self.first
        return expire(self, self.retention, now_ms() if now is None else now)

    def drop_expired(self) -> None:
        """Let expired events leave memory, in chunks; the last event stays (the partition's properties)."""
        drop = min(self.first - self.base, len(self.bodies) - 1)
        if drop < _DROP_CHUNK and drop * 2 < len(self.bodies):
            return
        del self.offsets[:drop], self.times[:drop], self.heads[:drop], self.bodies[:drop]
        self.base += drop
        del self.own_da[: bisect.bisect_left(self.own_da, self.base)]

    def _keep(self, message: bytes | memoryview, da_pos: int) -> None:
        head, body = _delivery.stored(message, da_pos)
        self.largest_frame = max(self.largest_frame, len(head) + len(body))
        if body.startswith(_delivery.DA):
            self.own_da.append(self.base + len(self.bodies))
        self.heads.append(head)
        self.bodies.append(body)

    def append_plain(self, messages: list[bytes], partition_key: str | None, prefix: bytes = b"") -> bool:
        """:meth:`append` of plain messages in one loop (:mod:`~rxhubs.emulator._ingest`); False: not here."""
        if self._fd is not None or self.segment or not messages:  # a log file, geo offsets: the general path
            return False
        t, first_seq = max(now_ms(), self.times[-1] if self.times else 0), self.next_sequence_number
        lists = (self.offsets, self.times, self.heads, self.bodies)
        self.next_offset, self.largest_frame = stamp_run(
            messages, first_seq, self.next_offset, t, partition_key, lists, self.largest_frame, prefix)
        self._appended(first_seq, len(messages), t)
        return True

    def append(self, messages: list[msg.Prepared], partition_key: str | None) -> None:
        """Append messages, stamping each with its Event Hubs annotations (and writing them when durable).

        Raises:
            OSError: The log file could not be written; nothing was appended (the file is cut back).
        """
        t = max(now_ms(), self.times[-1] if self.times else 0)
        first_seq = self.next_sequence_number
        start = offset = self.next_offset
        records: list[tuple[int, bytes, int]] = []
        segment, pid = self.segment, self.partition_id
        for i, prepared in enumerate(messages):
            text = offset if not segment else offset_text(segment, pid, offset).encode()
            encoded, da = msg.stamp(prepared, first_seq + i, text, t, partition_key)
            records.append((offset, encoded, da))
            offset += _REC.size + len(encoded)
        if self._fd is not None:
            self._write(start, records, t)
        offsets, times, heads, bodies = self.offsets, self.times, self.heads, self.bodies
        stored, own_da, largest = _delivery.stored, self.own_da, self.largest_frame
        for record_offset, encoded, da in records:
            offsets.append(record_offset)
            times.append(t)
            head, body = stored(encoded, da)
            if body.startswith(_delivery.DA):  # the sender's own delivery annotations (merged on delivery)
                own_da.append(self.base + len(bodies))
            heads.append(head)
            bodies.append(body)
            largest = max(largest, len(head) + len(body))
        self.largest_frame = largest
        self.next_offset = offset
        self._appended(first_seq, len(records), t)

    def _appended(self, first_seq: int, count: int, t: int) -> None:
        for listener in self.listeners:
            listener(self, first_seq, count)
        if self.retention.limited:
            expire(self, self.retention, t)
        if self._signal is not None and not self._signal.done():
            self._signal.set_result(None)
        self._signal = None

    def _write(self, start: int, records: list[tuple[int, bytes, int]], t: int) -> None:
        assert self._fd is not None
        chunks: list[bytes] = []
        for _, encoded, da in records:
            crc = zlib.crc32(encoded, zlib.crc32(_CRC_FIELDS.pack(t, da)))
            chunks.append(_REC.pack(len(encoded), crc, t, da))
            chunks.append(encoded)
        view = memoryview(b"".join(chunks))
        try:
            while view:
                written = os.write(self._fd, view)
                view = view[written:]
        except OSError:
            _LOG.error("%s/%s: cannot write the partition log; the append is refused", self.hub, self.partition_id)
            os.ftruncate(self._fd, start)
            os.lseek(self._fd, start, os.SEEK_SET)
            raise

    async def wait_beyond(self, sequence_number: int) -> None:
        """Wait until the log holds the event ``sequence_number`` (more than that many events)."""
        while self.next_sequence_number <= sequence_number:
            if self._signal is None:
                self._signal = asyncio.get_running_loop().create_future()
            await asyncio.shield(self._signal)

    # ------------------------------------------------------------------ reading
    def start_index(self, position: StartPosition | None) -> int:
        """Sequence number of the first event a receiver with this start position gets.

        A receiver without a position filter starts at the beginning of the partition, as the service does. A
        position before the first retained event starts at the first retained event, as the service does.
        """
        first = self.expire()
        if position is None:
            return first
        v = position.value
        if position.kind == "offset":
            if v == "-1":
                return first
            if v == "@latest":
                return self.next_sequence_number
            off = int(v)
            find = bisect.bisect_left if position.inclusive else bisect.bisect_right
            return max(first, self.base + find(self.offsets, off))
        if position.kind == "sequence-number":
            seq = int(v)
            idx = seq if position.inclusive else seq + 1
            return min(max(idx, first), self.next_sequence_number)
        ms = int(v)
        find = bisect.bisect_left if position.inclusive else bisect.bisect_right
        return max(first, self.base + find(self.times, ms))

    def properties(self) -> dict[str, Any]:
        first = self.expire()
        last = self.last_sequence_number
        return {
            "name": self.hub,
            "partition": self.partition_id,
            "begin_sequence_number": 0 if last < 0 else first,
            "last_enqueued_sequence_number": last,
            "last_enqueued_offset": self.last_enqueued()[1],
            "last_enqueued_time_utc": Timestamp(self.times[-1] if last >= 0 else 0),
            "is_partition_empty": first > last,
        }

    def last_enqueued(self) -> tuple[int, str, int]:
        """Sequence number, offset and enqueued time of the last event (-1, "-1", 0 when empty)."""
        if not self.bodies:
            return -1, "-1", 0
        return self.last_sequence_number, offset_text(self.segment, self.partition_id, self.offsets[-1]), self.times[-1]

    # ------------------------------------------------------------------ reader rules
    def add_reader(self, consumer_group: str, reader: Reader) -> tuple[str, str] | None:
        """Register a reader, applying owner-level rules. Returns an error (condition, text) to refuse it.

        Consumer group names are compared ignoring case (``$default`` and ``$Default`` are one group).
        """
        readers = self.readers.setdefault(consumer_group.casefold(), [])
        epochs = [r.epoch for r in readers if r.epoch is not None]
        top = max(epochs) if epochs else None
        where = f"partition '{self.partition_id}' of '{self.hub}' in consumer group '{consumer_group}'"
        if reader.epoch is None:
            if top is not None:
                return ("amqp:link:stolen",
                        f"A receiver with owner level {top} is active on {where}; a receiver without an owner "
                        f"level cannot be created.")
            if len(readers) >= MAX_READERS:
                return ("amqp:resource-limit-exceeded",
                        f"Exceeded the maximum number of allowed receivers per partition in a consumer group "
                        f"which is {MAX_READERS} ({where}).")
        else:
            if top is not None and reader.epoch < top:
                return ("amqp:link:stolen",
                        f"A receiver with a higher owner level {top} is active on {where}; owner level "
                        f"{reader.epoch} cannot be created.")
            for old in list(readers):
                readers.remove(old)
                old.evict("amqp:link:stolen",
                          f"New receiver with owner level {reader.epoch} was opened on {where}; this receiver "
                          f"(owner level {old.epoch}) is disconnected.")
        readers.append(reader)
        return None

    def remove_reader(self, consumer_group: str, reader: Reader) -> None:
        readers = self.readers.get(consumer_group.casefold())
        if readers and reader in readers:
            readers.remove(reader)
