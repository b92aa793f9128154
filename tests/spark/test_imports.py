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
