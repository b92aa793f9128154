"""Cutting the Arrow builder's buffers back to a whole row, after an event that failed half-way (the rare path).

:class:`FrameColumns <rxhubs.spark._arrow_frames_py.FrameColumns>` writes an event's fields straight into its 24
column buffers; when the event turns out to need the general decoder (or the frame is bad), what it wrote of it
is cut off here. Nothing is recorded per event for that: every buffer's length after ``rows`` whole rows follows
from the offsets written so far (the last offset of each variable-width column, the last entry offset of each
map), so the builder's per-event path only counts rows. Plain Python for both builds (it runs once per refused
event, and reads the buffers' ``n`` and bytes as the compiled ``Buf`` exposes them).

Example (three events, then a half-written fourth cut off):

    >>> from rxhubs.spark._arrow_batch import slow_row
    >>> from rxhubs.spark._arrow_frames_py import FrameColumns
    >>> from rxhubs.testing._emulator_frames import emulator_frames
    >>> columns = FrameColumns(slow_row)
    >>> columns.parse(emulator_frames(16, 1, count=3), 1, 0)[0]
    3
    >>> whole = [b.n for b in columns.bufs]
    >>> columns.body.add(b"half of an event")
    >>> columns.seq.i64(7)
    >>> cut(columns.bufs, columns.rows)
    >>> [b.n for b in columns.bufs] == whole
    True
"""

from __future__ import annotations

from typing import Any

__all__ = ["cut"]

#: (data, offsets) pairs of the string/binary columns in the builder's ``bufs``: body, offset, key, publisher.
_VARIABLE = ((0, 1), (2, 3), (6, 7), (9, 10))
_FIXED = ((4, 8), (5, 8), (8, 1), (11, 1))  # sequence number, enqueued time (8 bytes a row); validity bytes
_MAPS = (12, 18)  # each map's six buffers: row offsets, keys, key offsets, values, value offsets, validity


def _last(offsets: Any) -> int:
    """The last 32-bit offset written to ``offsets``."""
    return int.from_bytes(offsets.data[offsets.n - 4:offsets.n], "little")


def cut(bufs: list[Any], rows: int) -> None:
    """Cut the builder's buffers ``bufs`` back to what ``rows`` whole rows wrote."""
    for data, offsets in _VARIABLE:
        bufs[offsets].n = 4 * (rows + 1)
        bufs[data].n = _last(bufs[offsets])
    for at, width in _FIXED:
        bufs[at].n = width * rows
    for first in _MAPS:
        offsets, keys, keys_off, values, values_off, valid = bufs[first:first + 6]
        offsets.n = 4 * (rows + 1)
        entries = _last(offsets)
        keys_off.n = values_off.n = 4 * (entries + 1)
        valid.n = entries
        keys.n = _last(keys_off)
        values.n = _last(values_off)
