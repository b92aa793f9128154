"""Record batches from the frame reader's column buffers, and the general way for the events it leaves over.

:class:`~rxhubs.spark._arrow_frames_py.FrameColumns` writes the usual events' columns into byte buffers;
:func:`record_batch` wraps them as a ``pyarrow.RecordBatch`` of :func:`~rxhubs.spark.arrow_schema`
(``pyarrow.Array.from_buffers``: no copy, no Python object per event). An event of another shape goes through
:func:`slow_row` (decoded into a pyamqp ``Message``) or :func:`message_row` (a message the SDK decoded), which
compute its row with :class:`~rxhubs.spark._columns.Columns`, the rules of every other path: the tables are
the same whichever way an event went (``tests/spark/test_arrow_frames.py``).

:func:`frame_columns` makes a builder of the compiled build; without it (no compiler at install, or
``RXHUBS_NO_EXTENSIONS=1``) it returns None, says so once at INFO on ``rxhubs.spark.source``, and the source
reads through the receiver and :func:`~rxhubs.spark.to_arrow` instead.
"""

from __future__ import annotations

import array
import functools
import importlib
import logging
from types import ModuleType
from typing import Any

from rxhubs._batch import EventBatch
from rxhubs._extensions import load_compiled
from rxhubs._models import PartitionContext
from rxhubs.spark._columns import Columns, to_micros
from rxhubs.spark._schema import arrow_schema
from rxhubs.transport._frame_errors import FrameError
from rxhubs.transport._frames import NO_EXTENSIONS_VARIABLE, compiled_reader

__all__ = ["arrow_path", "compiled_builder", "frame_columns", "message_row", "record_batch", "slow_row"]

_log = logging.getLogger("rxhubs.spark.source")
_CONTEXT = PartitionContext("", "", "", "")
_said = False


def _load() -> tuple[ModuleType | None, str]:
    """The compiled builder module and why it is (not) used (both halves must be builds of today's sources)."""
    import os

    if os.environ.get(NO_EXTENSIONS_VARIABLE, "").strip() not in ("", "0"):
        return None, f"{NO_EXTENSIONS_VARIABLE} is set"
    values, why = load_compiled("rxhubs.spark._arrow_values_c", "rxhubs.spark._arrow_values_py", "the Arrow builder")
    if values is None:
        return None, why
    return load_compiled("rxhubs.spark._arrow_frames_c", "rxhubs.spark._arrow_frames_py", "the Arrow builder")


def compiled_builder() -> ModuleType | None:
    """The compiled ``_arrow_frames_c`` module, or None (see the module docstring).

    Example:
        >>> compiled_builder() is None or compiled_builder().FrameColumns.__name__ == "FrameColumns"
        True
    """
    module, _ = _load()
    return module


def arrow_path() -> str:
    """One line naming how the Spark source builds its Arrow batches, and why.

    Example:
        >>> arrow_path().startswith(("frames to Arrow", "events to Arrow"))
        True
    """
    module, why = _load()
    if module is not None:
        return f"frames to Arrow (compiled Arrow builder: {str(module.__file__).rsplit('/', 1)[-1]})"
    return f"events to Arrow, pure Python ({why})"


def frame_columns() -> Any | None:
    """A compiled :class:`FrameColumns` builder, or None (logged once: the source then reads events)."""
    global _said
    module = compiled_builder()
    if not _said:
        _said = True
        _log.info("Spark source: %s", arrow_path())
    return None if module is None else module.FrameColumns(slow_row)


def message_row(message: Any) -> tuple[Any, ...]:
    """The row of one pyamqp ``Message`` (the arguments of ``FrameColumns.append_row``), by ``Columns``' rules.

    Raises :class:`FrameError` for a message no row can be made of (no sequence number, an offset that is not
    ASCII...): the service never sends one.
    """
    from rxhubs.transport._convert_messages import received_messages

    c = Columns()
    try:
        c.add(EventBatch(_CONTEXT, tuple(received_messages([message]))))
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
        raise FrameError(f"an event the Spark source cannot read ({exc!r})") from exc
    micros = c.micros[0]
    if micros.__class__ is not int:
        micros = to_micros(micros)
    if micros is None or not -(2**63) <= micros < 2**63 or not -(2**63) <= c.sequence_numbers[0] < 2**63:
        raise FrameError("an event the Spark source cannot read (a sequence number or time out of range)")
    return (
        c.bodies[0], c.offsets[0], c.sequence_numbers[0], micros, c.publishers[0], c.partition_keys[0],
        list(zip(c.properties.keys, c.properties.values, strict=True)),
        list(zip(c.system_properties.keys, c.system_properties.values, strict=True)),
    )


def slow_row(data: bytes, pos: int, end: int) -> tuple[Any, ...]:
    """The row of the payload ``data[pos:end]``, decoded into a message first (raises ``Unsupported`` as that does)."""
    reader = compiled_reader() or importlib.import_module("rxhubs.transport._frames_py")
    return message_row(reader.decode_message(data, pos, end))


def _string(rows: int, offsets: Any, data: Any, valid: Any = None) -> Any:
    import pyarrow as pa

    buffers = [None if valid is None else pa.py_buffer(valid), pa.py_buffer(offsets), pa.py_buffer(data)]
    return pa.Array.from_buffers(pa.string(), rows, buffers)


@functools.lru_cache(maxsize=32)
def _constant(text: str, rows: int) -> Any:
    """A string column of ``rows`` times ``text`` (kept: batches of a task repeat it; ``pa.repeat`` imports pandas)."""
    import pyarrow as pa

    data = text.encode()
    offsets = array.array("i", range(0, (rows + 1) * len(data), len(data))) if data else bytes(4 * (rows + 1))
    return pa.Array.from_buffers(pa.string(), rows, [None, pa.py_buffer(offsets), pa.py_buffer(data * rows)])


def _map(rows: int, parts: tuple[Any, ...]) -> Any:
    import pyarrow as pa

    offsets, keys, keys_off, values, values_off, valid, count = parts
    row_offsets = pa.Array.from_buffers(pa.int32(), rows + 1, [None, pa.py_buffer(offsets)])
    keys_array = _string(count, keys_off, keys)
    return pa.MapArray.from_arrays(row_offsets, keys_array, _string(count, values_off, values, valid))


def record_batch(taken: tuple[int, tuple[Any, ...]], partition: str, consumer_group: str, eventhub_name: str) -> Any:
    """``FrameColumns.take()``'s buffers as a ``pyarrow.RecordBatch`` with :func:`~rxhubs.spark.arrow_schema`."""
    import pyarrow as pa

    rows, parts = taken
    body, body_off, off, off_off, seq, enq, pk, pk_off, pk_valid, pub, pub_off, pub_valid, props, system = parts
    schema = arrow_schema()
    columns = [
        pa.Array.from_buffers(pa.binary(), rows, [None, pa.py_buffer(body_off), pa.py_buffer(body)]),
        _constant(partition, rows),
        _string(rows, off_off, off),
        pa.Array.from_buffers(pa.int64(), rows, [None, pa.py_buffer(seq)]),
        pa.Array.from_buffers(schema.field("enqueuedTime").type, rows, [None, pa.py_buffer(enq)]),
        _string(rows, pub_off, pub, pub_valid),
        _string(rows, pk_off, pk, pk_valid),
        _map(rows, props),
        _map(rows, system),
        _constant(consumer_group, rows),
        _constant(eventhub_name, rows),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=schema)
