"""``--cpu-durations=N``: the N tests that used the most CPU, the processes they started included.

On a two-core machine the suite is CPU-bound (user CPU is about twice the wall time), so ``--durations``, which
reports wall time, ranks a test that waits under load as high as one that works. This plugin reports CPU seconds
per test (set-up, call and tear-down together): the CPU of the pytest process (every thread: an in-process
emulator too) plus that of every process it started, alive or ended, the way ``time`` counts a command:

* the processes it waited for (``RUSAGE_CHILDREN``), which include what their own children used;
* the processes still running below it (a session's JVM, an Azurite), their own CPU and their ended children's;
* the processes whose parent ended without waiting for them (pyspark leaves its JVM so): with the option on, the
  pytest process makes itself their subreaper (Linux), so they become its children when orphaned; it never
  reaps them, their exit statuses are no one else's, and a zombie still shows its CPU.

A test is charged with the growth of that total while it ran (its set-up to its tear-down), so a session
fixture's process is charged to the tests that made it work, and its start to the first test that asked for it.
Under pytest-xdist each worker measures its own process tree (never another worker's) and the controller prints
the ranking. Everything is counted, so the figures add up to about the run's CPU.

    .venv/bin/python -m pytest tests/tables -n 2 --cpu-durations=20
"""

from __future__ import annotations

import ctypes
import os
import resource
import sys
from collections.abc import Generator
from typing import Any

import psutil
import pytest

_KEY = "cpu_seconds"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("terminal reporting").addoption(
        "--cpu-durations", type=int, default=None, metavar="N",
        help="show the N tests that used the most CPU, their processes included (0: all)",
    )


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("cpu_durations") is not None and sys.platform == "linux":
        ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: orphans below stay below, and counted


def _tree_cpu(me: psutil.Process) -> float:
    """CPU seconds of this process, of the processes it reaped, and of every live descendant (with its reaped)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = own.ru_utime + own.ru_stime + reaped.ru_utime + reaped.ru_stime
    for child in me.children(recursive=True):
        try:
            times = child.cpu_times()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue  # it ended and was reaped in between: its parent's reaped figures hold it
        total += times.user + times.system + times.children_user + times.children_system
    return total


_START = pytest.StashKey[float]()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.config.getoption("cpu_durations") is not None:
        item.stash[_START] = _tree_cpu(psutil.Process(os.getpid()))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    if call.when == "teardown" and _START in item.stash:  # before the last report is made: it carries the figure
        spent = _tree_cpu(psutil.Process(os.getpid())) - item.stash[_START]
        item.user_properties.append((_KEY, round(spent, 2)))
    yield


_seen: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "teardown":  # the last report of a test: its properties hold the figure by now
        for key, value in report.user_properties:
            if key == _KEY:
                _seen[report.nodeid] = float(value)


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    count = config.getoption("cpu_durations")
    if count is None or not _seen:
        return
    ranked = sorted(_seen.items(), key=lambda kv: -kv[1])
    shown = ranked if count == 0 else ranked[:count]
    total = sum(_seen.values())
    terminalreporter.write_sep("=", f"most CPU: {len(shown)} of {len(ranked)} tests ({total:.0f} s in all tests)")
    for nodeid, seconds in shown:
        terminalreporter.write_line(f"{seconds:9.2f}s cpu  {nodeid}")
