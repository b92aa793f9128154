"""``rxhubs.tables.read_delta``: the table's rows and types, and no process that reads a table aborts at its exit."""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import deltalake
import pyarrow as pa
import pytest

from rxhubs.errors import ConfigurationError
from rxhubs.tables import read_delta

#: About 5% of children aborted per run with the regression (DeltaTable.to_pyarrow_table(); 12 in 240 children
#: over six ways of reading, measured at load 15-25): 50 children caught it about 92% of the time, 120 miss it
#: once in about 500 runs (0.95 ** 120).
CHILDREN = 120
FILES = 80

# What a user's script does: read a table (every column: the body's bytes are the most buffers), use it, end
# normally (no os._exit).
CHILD = """
import sys
from rxhubs.tables import read_delta
table = read_delta(sys.argv[1])
print(table.num_rows, sum(table.column("sequenceNumber").to_pylist()), flush=True)
"""


def _table(path: Path, files: int, rows: int = 20) -> pa.Table:
    """A table of ``files`` commits of ``rows`` rows each (many files: the scanner's read-ahead is busiest)."""
    whole = pa.table({
        "partition": pa.array([str(i % 4) for i in range(files * rows)]),
        "sequenceNumber": pa.array(range(files * rows), pa.int64()),
        "body": pa.array([f"event {i}".encode() for i in range(files * rows)], pa.binary()),
        "enqueuedTime": pa.array(range(files * rows), pa.timestamp("us", tz="UTC")),
    })
    for f in range(files):
        deltalake.write_deltalake(str(path), whole.slice(f * rows, rows), mode="append")
    return whole


def test_it_reads_every_row_with_the_tables_own_types(tmp_path: Path) -> None:
    whole = _table(tmp_path / "t", files=3)
    got = read_delta(tmp_path / "t").sort_by("sequenceNumber")
    assert got.schema == whole.schema  # not DataFusion's string_view / binary_view
    assert got.equals(whole)
    assert read_delta(str(tmp_path / "t"), ["sequenceNumber", "partition"]).column_names == [
        "sequenceNumber", "partition"]


def test_a_missing_column_is_a_configuration_error(tmp_path: Path) -> None:
    _table(tmp_path / "t", files=1)
    with pytest.raises(ConfigurationError, match="no column"):
        read_delta(tmp_path / "t", ["partition", "offset"])


@pytest.mark.slow
@pytest.mark.timeout(900)  # 120 children: 9 min at load 32
def test_no_process_that_reads_a_table_aborts_at_its_exit(tmp_path: Path) -> None:
    # DeltaTable.to_pyarrow_table() in the same children aborted 1 to 2 processes in 40 here ("terminate called
    # without an active exception", exit 134): see rxhubs/tables/_delta_read.py for the cause.
    whole = _table(tmp_path / "t", files=FILES)
    expected = f"{whole.num_rows} {sum(range(whole.num_rows))}"

    def child(_: int) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / "t")], capture_output=True, text=True,
                              timeout=300, check=False)

    with ThreadPoolExecutor(max_workers=8) as pool:
        done = list(pool.map(child, range(CHILDREN)))
    failed = [(d.returncode, d.stderr[-500:]) for d in done if d.returncode != 0]
    assert failed == [], f"{len(failed)} of {CHILDREN} children failed: {failed[:3]}"
    assert [d.stdout.strip() for d in done] == [expected] * CHILDREN  # each read every row
