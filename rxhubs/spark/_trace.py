"""Where a Spark query's time goes: timed marks from every Python process of a query (a profiling aid).

With ``RXHUBS_SPARK_TRACE=<file>`` in the environment, the source's Python code in every process of a query
(the driver's streaming runner or planner, the executors' Python workers) appends one JSON line per mark to that
file: ``{"t": wall-clock seconds, "pid", "what", ...}``. On local Spark the driver's environment reaches all of
them. ``python -m rxhubs.bench._spark_profile`` sets it and turns the lines into the cost model of docs/spark.md.
Without the variable a mark costs one environment look-up; nothing is written.

Example:
    >>> with span("example", partition="0"):
    ...     pass
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator
from typing import Any

__all__ = ["ENV", "mark", "process_started", "span", "task_mark"]

#: The environment variable naming the trace file.
ENV = "RXHUBS_SPARK_TRACE"


def mark(what: str, **fields: Any) -> None:
    """Append one line for ``what`` (with ``fields``) to the trace file, when tracing is on; never raises."""
    path = os.environ.get(ENV)
    if not path:
        return
    line = json.dumps({"t": time.time(), "pid": os.getpid(), "what": what, **fields}, default=str)
    try:
        with open(path, "a", encoding="utf-8") as out:  # one short write per line: lines from processes stay whole
            out.write(line + "\n")
    except OSError:
        pass


@contextlib.contextmanager
def span(what: str, **fields: Any) -> Iterator[None]:
    """Mark ``what`` with its duration in seconds (``s``) and its start (``t0``) once the block ends."""
    if not os.environ.get(ENV):
        yield
        return
    start, wall = time.perf_counter(), time.time()
    try:
        yield
    finally:
        mark(what, t0=wall, s=time.perf_counter() - start, **fields)


def process_started() -> float | None:
    """When this process started (wall-clock seconds), from ``/proc`` on Linux; None elsewhere.

    Example:
        >>> started = process_started()
        >>> started is None or started <= time.time()
        True
    """
    try:
        with open("/proc/self/stat", encoding="ascii") as stat:
            ticks = int(stat.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime", encoding="ascii") as uptime:
            now = time.time(), float(uptime.read().split()[0])
        return now[0] - (now[1] - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None


_tasks = [0]


def task_mark(partition: Any, started: float, **fields: Any) -> None:
    """Mark one read task: its range, when it started, and how many tasks this Python worker ran before it."""
    _tasks[0] += 1
    if os.environ.get(ENV):
        mark("task", partition=partition.partition, start=partition.start, end=partition.end, t0=started,
             worker_started=process_started(), worker_task=_tasks[0], **fields)
