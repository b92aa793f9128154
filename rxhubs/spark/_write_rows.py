"""A write task's Arrow record batch to the events it sends, grouped by target, without a Python row per row.

Spark hands the writer Arrow record batches (``DataSourceArrowWriter``). The columns are read as whole arrays:
the bodies as one list of ``bytes`` (a string column is read as binary: the same buffers, no encode in Python),
the targets (``partitionId`` or ``partitionKey``) dictionary-encoded and grouped with a stable sort, so each
group keeps the rows' order; the ``properties`` maps, when every row carries the same map (the common case: a
literal or a column of constants), become one shared dict checked column-wise, else one dict per distinct map.
Each group is an :class:`~rxhubs.transport._publisher.EventColumns` (its bodies and properties as columns, no
object per event) that the send path encodes (compiled where built) straight into transfer frames.

Example:
    >>> import pyarrow as pa
    >>> batch = pa.record_batch({"body": pa.array([b"a", b"b", b"c"]), "partitionId": pa.array(["1", "0", "1"])})
    >>> {t: (rows.tolist(), [e.body for e in events]) for t, (rows, events) in groups(batch, ("body", "partitionId",
    ...  None, False), 0, 0).items()}
    {('1', None): ([0, 2], [b'a', b'c']), ('0', None): ([1], [b'b'])}
"""

from __future__ import annotations

from typing import Any

from rxhubs.errors import ConfigurationError
from rxhubs.transport._publisher import EventColumns

__all__ = ["Groups", "Target", "groups", "shared_properties"]

#: Target of a row: (partition id, partition key), at most one set.
Target = tuple[str | None, str | None]
#: Target -> (the rows' positions in the task, their events in order, as columns).
Groups = dict[Target, tuple[Any, EventColumns]]

_NONE: dict[str, str] = {}


def groups(batch: Any, columns: tuple[str, str | None, str | None, bool], first_row: int, task: int) -> Groups:
    """The events of ``batch`` grouped by target; ``columns`` as :func:`~rxhubs.spark._write.check_write_schema`.

    Raises:
        ConfigurationError: A null body (naming its row in the task).
    """
    import numpy as np
    import pyarrow as pa

    body_col, pid_col, key_col, has_props = columns
    column = batch.column(body_col)
    if column.null_count:
        i = column.is_null().to_pylist().index(True)
        raise ConfigurationError(f"row {first_row + i} of write task {task}: body is null")
    bodies = (column.cast(pa.binary()) if pa.types.is_string(column.type) else column).to_pylist()
    props = properties_of(batch.column("properties")) if has_props else _NONE
    n = len(bodies)
    target_col = batch.column(pid_col).cast(pa.string()) if pid_col else batch.column(key_col) if key_col else None
    if target_col is None:
        return {(None, None): (np.arange(first_row, first_row + n), _events(bodies, props))}
    encoded = target_col.dictionary_encode()
    names = encoded.dictionary.to_pylist()
    codes = encoded.indices.fill_null(-1).to_numpy(zero_copy_only=False)
    order = np.argsort(codes, kind="stable")  # one group's rows stay in their order
    cuts = np.flatnonzero(np.diff(codes[order])) + 1
    out: Groups = {}
    for rows in np.split(order, cuts):
        if not len(rows):
            continue
        code = int(codes[rows[0]])
        name = names[code] if code >= 0 else None
        target: Target = (name, None) if pid_col else (None, name)
        picked = [bodies[i] for i in rows.tolist()]
        chosen = props if isinstance(props, dict) else [props[i] for i in rows.tolist()]
        out[target] = (rows + first_row, _events(picked, chosen))
    return dict(sorted(out.items(), key=lambda item: int(item[1][0][0])))  # groups in the order of their first row


def _events(bodies: list[bytes], props: Any) -> EventColumns:
    return EventColumns(bodies, props)


def properties_of(column: Any) -> dict[str, str] | list[dict[str, str]]:
    """One dict shared by every row when all rows carry the same map (no nulls), else a dict per row.

    Rows with equal maps share one dict object (the encoder encodes a shared map once per run of rows).

    Example:
        >>> import pyarrow as pa
        >>> properties_of(pa.array([[("k", "v")], [("k", "v")]], type=pa.map_(pa.string(), pa.string())))
        {'k': 'v'}
        >>> properties_of(pa.array([[("k", "v")], None], type=pa.map_(pa.string(), pa.string())))
        [{'k': 'v'}, {}]
    """
    same = shared_properties(column)
    if same is not None:
        return same
    shared: dict[tuple[tuple[str, str], ...], dict[str, str]] = {}
    out: list[dict[str, str]] = []
    for pairs in column.to_pylist():
        if not pairs:
            out.append(_NONE)
            continue
        key = tuple(pairs)
        out.append(shared.get(key) or shared.setdefault(key, dict(key)))
    return out


def shared_properties(column: Any) -> dict[str, str] | None:
    """The map every row of a ``map<string,string>`` column holds, when they all hold the same one; else None."""
    import numpy as np
    import pyarrow as pa

    n = len(column)
    if n == 0 or column.null_count:
        return None
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    offsets = column.offsets.to_numpy()
    lengths = np.diff(offsets)
    k = int(lengths[0])
    if not (lengths == k).all():
        return None
    if k == 0:
        return _NONE
    base = int(offsets[0])  # (a sliced column's keys and items are its parent's: cut them to its rows)
    keys, items = column.keys.slice(base, n * k), column.items.slice(base, n * k)
    if keys.null_count or items.null_count:
        return None
    first_keys, first_items = keys.slice(0, k), items.slice(0, k)
    index = pa.array(np.tile(np.arange(k), n))
    if not (keys.equals(first_keys.take(index)) and items.equals(first_items.take(index))):
        return None
    return dict(zip(first_keys.to_pylist(), first_items.to_pylist(), strict=True))
