"""``rxhubs.tables.read_delta``: the table's rows and types, and no process that reads a table aborts at its exit."""

from __future__ import annotations

import subprocess
import sys
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
# normally (no os._exit). The children are forked from one parent that imported rxhubs.tables, which starts no
# thread (a fresh child's start and imports were a fifth or more of its CPU): each child imports deltalake and
# pyarrow itself, reads, prints, and ends as a script ends, through the interpreter's finalization (SystemExit),
# where the regression aborted. The parent prints each child's exit code (-6: killed by SIGABRT). With the
# regression put back (DeltaTable.to_pyarrow_table() in the children), 8 of 120 forked children aborted at load 11.
PARENT = """
import os, sys
import rxhubs.tables

assert "pyarrow" not in sys.modules and "deltalake" not in sys.modules  # nothing that starts threads, before a fork
path, count, width = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
running, codes, started = set(), [], 0
while started < count or running:
    while started < count and len(running) < width:
        pid = os.fork()
        if pid == 0:
            table = rxhubs.tables.read_delta(path)
            os.write(1, f"{table.num_rows} {sum(table.column('sequenceNumber').to_pylist())}\\n".encode())  # one write
            sys.exit(0)
        running.add(pid)
        started += 1
    pid, status = os.wait()
    running.discard(pid)
    codes.append(os.waitstatus_to_exitcode(status))
print("exit codes:", *codes, flush=True)
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
    done = subprocess.run([sys.executable, "-c", PARENT, str(tmp_path / "t"), str(CHILDREN), "8"],
                          capture_output=True, text=True, timeout=800, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    *rows, last = done.stdout.splitlines()
    codes = [int(code) for code in last.removeprefix("exit codes:").split()]
    failed = [code for code in codes if code != 0]
    assert len(codes) == CHILDREN, last
    assert failed == [], f"{len(failed)} of {CHILDREN} children failed (exit codes {failed}): {done.stderr[-1500:]}"
    assert rows == [expected] * CHILDREN  # each read every row
