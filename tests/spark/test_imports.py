"""What a Spark Python process imports to run the data source: only what it uses (issue 45, a query's fixed cost).

The streaming runner and the planner (driver side) and the Python workers (executors) unpickle the source, which
imports ``rxhubs`` and ``rxhubs.spark`` first; both load their public names on first use, so these processes
import neither reactivex nor the streams, the balancing loop or the events-to-Arrow conversion.
"""

from __future__ import annotations

import json
import subprocess
import sys

import rxhubs
import rxhubs.spark

_PROBE = """
import json, sys
import rxhubs.spark._datasource, rxhubs.spark._source, rxhubs.spark._batch, rxhubs.spark._arrow_read
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in ("reactivex", "rxhubs"))))
"""


def test_the_data_source_imports_neither_reactivex_nor_the_streams() -> None:
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, check=True).stdout
    modules = set(json.loads(out.splitlines()[-1]))
    assert "rxhubs.spark._source" in modules  # the probe ran
    unused = {m for m in modules if m.split(".")[0] == "reactivex" or m.startswith(
        ("rxhubs.sources", "rxhubs.balancing", "rxhubs._run", "rxhubs.operators",
         "rxhubs.spark._sink", "rxhubs.spark._micro_batch", "rxhubs.stores"))}
    assert not unused


def test_every_public_name_still_loads_on_first_use() -> None:
    for module in (rxhubs, rxhubs.spark):
        for name in module.__all__:
            assert getattr(module, name) is not None, f"{module.__name__}.{name}"
    from rxhubs import Event, Position, consume  # the `from` form goes through the same lookup
    from rxhubs.spark import SCHEMA, write

    assert Event.__name__ == "Event" and Position.earliest() and callable(consume)
    assert SCHEMA.startswith("body binary") and callable(write)


_CUT_PROBE = """
import array, json, sys
import pyarrow as pa
from rxhubs.spark._arrow_read import _within
seq = pa.Array.from_buffers(pa.int64(), 10, [None, pa.py_buffer(array.array("q", range(100, 110)))])  # as the reader
batch = pa.RecordBatch.from_arrays([seq, seq, seq, seq], names=["a", "b", "c", "sequenceNumber"])
cut = [_within(b, p, e) for b, p, e in ((batch, 100, 200), (batch, 103, 106), (batch.slice(4, 5), 102, 107),
                                         (batch, 200, 300))]
pandas = "pandas" in sys.modules  # (before to_pylist below)
print(json.dumps({"pandas": pandas, "cuts": [(b.column(3).to_pylist(), following) for b, following in cut]}))
"""


def test_a_task_cuts_its_rows_to_the_range_without_importing_pandas() -> None:
    # pyarrow's to_numpy imports pandas: ~0.5 s of a new Python worker's first task, 1-2 s under load (measured)
    out = subprocess.run([sys.executable, "-c", _CUT_PROBE], capture_output=True, text=True, check=True).stdout
    result = json.loads(out.splitlines()[-1])
    assert result["cuts"] == [
        [list(range(100, 110)), 110],  # the whole range: the batch as it is
        [[103, 104, 105], 110],  # a replay below, rows of the next range above: cut off
        [[104, 105, 106], 109],  # a sliced batch (an offset into the column's buffer)
        [[], 200],  # all of it a replay
    ]
    assert result["pandas"] is False
