"""``read_delta``: a Delta table's rows as a ``pyarrow.Table``, through deltalake's own engine.

Why not ``DeltaTable(uri).to_pyarrow_table()``: with deltalake 1.6.6 and pyarrow 26 it reads through pyarrow's
dataset scanner over a *Python* filesystem (``PyFileSystem(DeltaStorageHandler)``), so the bytes it reads are
Python objects (``arrow::py::PyBuffer``). The scanner's read-ahead state is released on Arrow's I/O threads,
sometimes after ``to_pyarrow_table()`` has returned; when that happens while the interpreter is finalizing, the
thread that drops the last buffer calls ``PyGILState_Ensure``, CPython ends it with ``pthread_exit``, the forced
unwind meets a ``noexcept`` destructor, and libstdc++ aborts the process: "terminate called without an active
exception", exit 134 (a core dump shows ``PyBuffer::~PyBuffer`` under ``ReadRangeCache`` and the scanner's
generators; apache/arrow#36389 and #34314 are the same family). Reading through deltalake's ``QueryBuilder``
(DataFusion, in Rust) creates no Python buffers and uses no Arrow C++ thread pool, so nothing is left to run at
exit; the result is cast back to the table's own Arrow schema (DataFusion answers with view types).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rxhubs.errors import ConfigurationError
from rxhubs.tables._delta_log import import_deltalake

__all__ = ["read_delta"]


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def read_delta(
    uri: str | Path,
    columns: Sequence[str] | None = None,
    *,
    storage_options: Mapping[str, str] | None = None,
) -> Any:
    """Read a Delta table's rows (at its latest version) into a ``pyarrow.Table``, safely for the process's exit.

    Use it instead of ``DeltaTable(uri).to_pyarrow_table()``, which can abort the process when it exits (see the
    module docstring): the rows come from deltalake's Rust engine and carry the table's own Arrow types.

    Args:
        uri: The table: a local path, or a URI deltalake knows (``abfss://``, ``s3://``, ...).
        columns: The columns to read, in this order (default: all of them).
        storage_options: deltalake's storage options (credentials for object stores).

    Returns:
        A ``pyarrow.Table`` (row order is not guaranteed: sort if it matters).

    Raises:
        ConfigurationError: deltalake is not installed, or ``columns`` names a column the table lacks.
        deltalake.exceptions.TableNotFoundError: there is no table at ``uri``.

    Example:
        >>> import tempfile, pyarrow as pa, deltalake
        >>> folder = tempfile.mkdtemp()
        >>> deltalake.write_deltalake(folder, pa.table({"partition": ["0", "1"], "sequenceNumber": [7, 9]}))
        >>> read_delta(folder, ["sequenceNumber"]).sort_by("sequenceNumber").column(0).to_pylist()
        [7, 9]
    """
    import pyarrow as pa

    deltalake = import_deltalake()
    table = deltalake.DeltaTable(str(uri), storage_options=dict(storage_options) if storage_options else None)
    schema = pa.schema(table.schema().to_arrow())
    names = list(schema.names if columns is None else columns)
    missing = [n for n in names if n not in schema.names]
    if missing:
        raise ConfigurationError(f"the Delta table {uri} has no column(s) {missing}; it has {schema.names}")
    wanted = pa.schema([schema.field(n) for n in names])
    if not names:
        return wanted.empty_table()
    sql = f"SELECT {', '.join(map(_quoted, names))} FROM t"
    reader = deltalake.QueryBuilder().register("t", table).execute(sql)
    return pa.table(reader).cast(wanted)
