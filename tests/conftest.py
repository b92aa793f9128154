"""Suite-wide fixtures. Real components are started by fixture plugins, on free loopback ports:

* ``rxhubs.emulator.pytest_plugin``: ``eventhubs_emulator`` (session) and ``emulator_factory``;
* ``tests.support.azurite``: ``azurite`` (session, can be stopped and restarted) and ``blob_container``;
* ``tests.support.postgres``: ``postgres`` (session: a PostgreSQL 15 server) and ``pg_database``.

``make test`` runs the suite in parallel processes (pytest-xdist, ``-n 6``): a "session" is then one worker's,
so each worker starts its own emulator and Azurite, on its own free ports, and ``tmp_path`` is per worker too.
Nothing in the suite may use a fixed port or write into the work tree. Tests are handed out one at a time as
workers free up, longest first, those that mostly wait beside those that work; a few groups run on one worker
each (tests/support/schedule.py).
"""

from __future__ import annotations

import doctest
import os
import threading
from typing import Any

import pytest
from hypothesis import settings

from tests.support import spark_cds
from tests.support.schedule import _is_spark, _weight, scheduler

# No wall-clock limits in tests: hypothesis' per-example deadline (200 ms by default) is one, and on a loaded
# machine (`-n 6` on two cores) an example that takes 0.2 ms can take 300 ms once and fail the run.
settings.register_profile("rxhubs", deadline=None)
settings.load_profile("rxhubs")

# The JVMs the suite starts are short-lived (each worker's Spark session; the drivers of the examples, the bench
# scenarios, the discovery, Connect and cluster tests; spark-submit reads SPARK_SUBMIT_OPTS, a standalone master and
# worker SPARK_DAEMON_JAVA_OPTS): the JIT's optimizing compiler (C2) and the parallel collector's threads spent more
# CPU in them than they saved. With C1 alone and the serial collector tests/spark/test_source.py took 47 s of CPU
# instead of 73 s, its JVM included (--cpu-durations, at load 6). Nor do they verify the bytecode of Spark's own jars
# (the JDK's classes never are): the Spark examples spark_parquet and spark_capture took 37 s of CPU instead of 39 s
# (load 1). And once the suite has made it, they map Spark's classes from a class-data-sharing archive
# (tests/support/spark_cds.py; RXHUBS_SPARK_CDS=0: not). The suite's JVMs only: rxhubs sets no JVM option.
_JVM_OPTS = ("SPARK_SUBMIT_OPTS", "SPARK_DAEMON_JAVA_OPTS")
for _name in _JVM_OPTS:
    os.environ.setdefault(_name, spark_cds.SUITE_JVM_OPTS)
_CDS = spark_cds.archive() if os.environ.get("RXHUBS_SPARK_CDS", "1") != "0" else None


def _use_the_archive() -> bool:
    """Give the suite's JVMs the archive once it exists (a JVM whose options the user set is left alone)."""
    if _CDS is None or not _CDS.is_file():
        return False
    for name in _JVM_OPTS:
        if os.environ.get(name) == spark_cds.SUITE_JVM_OPTS:
            os.environ[name] = f"{spark_cds.SUITE_JVM_OPTS} {spark_cds.options(_CDS)}"
    return True


_cds_in_use = _use_the_archive()
_cds_build: list[Any] = []  # the background build this process started: [thread, outcome]


def _start_the_archive(nodeids: Any) -> None:
    """Make the archive in the background if it is missing and the run starts Spark JVMs (once per venv)."""
    if _CDS is None or _cds_in_use or _cds_build or not any(_is_spark(nodeid) for nodeid in nodeids):
        return
    outcome: list[str | None] = []
    thread = threading.Thread(target=lambda: outcome.append(spark_cds.build(_CDS)), name="spark-cds")
    thread.start()  # not a daemon: a run shorter than the build waits for it at its end rather than waste it
    _cds_build.extend([thread, outcome])


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node: Any, ids: list[str]) -> None:
    _start_the_archive(ids)


def pytest_collection_finish(session: pytest.Session) -> None:
    if not hasattr(session.config, "workerinput"):  # a run without xdist (the workers' controller has its hook)
        _start_the_archive(item.nodeid for item in session.items)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    global _cds_in_use
    if not _cds_in_use:
        _cds_in_use = _use_the_archive()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _cds_build:
        _cds_build[0].join()
        why = _cds_build[1][0] if _cds_build[1] else "no outcome"
        said = f"made, {_CDS}" if why is None else f"not made: {why}"
        terminalreporter.write_line(f"Spark class-data archive: {said}")

pytest_plugins = [
    "rxhubs.emulator.pytest_plugin", "tests.support.azurite", "tests.support.postgres", "tests.support.cpu_report",
    "tests.support.timeline",
]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Drop the examples that are all +SKIP; put the heaviest tests first (see the module doc)."""
    keep, drop = [], []
    for item in items:
        dt = getattr(item, "dtest", None)
        if dt is not None and dt.examples and all(e.options.get(doctest.SKIP) for e in dt.examples):
            drop.append(item)
        else:
            keep.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
    items[:] = sorted(keep, key=_weight)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """The suite's own order and grouping of tests (tests/support/schedule.py)."""
    return scheduler(config, log)
