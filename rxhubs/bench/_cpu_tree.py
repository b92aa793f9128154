"""CPU seconds of a process tree, from ``/proc`` (Linux): what a Spark query costs in cores, not in wall time.

The ``spark-source`` benchmark divides a local Spark query's events/s by the two cores of ``local[2]``; on the
development machine those two cores also run the emulator the query reads from, so the wall figure per core
understates what each core Spark used did. Counting the CPU of Spark's processes (the JVM and every Python
process it started: workers, the streaming runner, the planners) while a query runs gives the other reading:
events per CPU-second, the cost a cluster pays for the cores it keeps busy. A process's own CPU and that of its
children it waited for (``cutime``, ``cstime``) are both counted, so Python workers that exited during the
query still count through the process that reaped them.

Example:
    >>> import os
    >>> seconds = tree_cpu(os.getpid())
    >>> seconds is None or seconds > 0
    True
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["descendants", "find_descendant", "tree_cpu"]

_PROC = Path("/proc")


def _children() -> dict[int, list[int]]:
    """Each live process's children, by parent pid (from ``/proc/<pid>/stat``)."""
    children: dict[int, list[int]] = {}
    for entry in _PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # gone meanwhile
            continue
        parent = int(stat[stat.rindex(")") + 2:].split()[1])
        children.setdefault(parent, []).append(int(entry.name))
    return children


def descendants(root: int) -> list[int]:
    """``root`` and every live process below it."""
    children, out, todo = _children(), [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, ()))
    return out


def find_descendant(root: int, needle: str) -> int | None:
    """The highest process below ``root`` whose command line contains ``needle`` (None: none, or no ``/proc``)."""
    if not _PROC.is_dir():
        return None
    for pid in descendants(root)[1:]:  # a process comes before its own descendants in this order
        try:
            command = (_PROC / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if needle in command:
            return pid
    return None


def tree_cpu(root: int) -> float | None:
    """CPU seconds (user and system) of ``root`` and its live descendants, with the children each one reaped.

    None where there is no ``/proc`` (not Linux). Take it before and after the work and subtract.
    """
    if not _PROC.is_dir():
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in descendants(root):
        try:
            stat = (_PROC / str(pid) / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        total += sum(int(x) for x in fields[11:15])  # utime, stime, cutime, cstime
    return total / ticks
