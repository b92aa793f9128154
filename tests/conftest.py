"""Suite-wide fixtures. Real components are started by fixture plugins, on free loopback ports:

* ``rxhubs.emulator.pytest_plugin``: ``eventhubs_emulator`` (session) and ``emulator_factory``;
* ``tests.support.azurite``: ``azurite`` (session, can be stopped and restarted) and ``blob_container``;
* ``tests.support.postgres``: ``postgres`` (session: a PostgreSQL 15 server) and ``pg_database``.

``make test`` runs the suite in parallel processes (pytest-xdist, ``-n 4``): a "session" is then one worker's,
so each worker starts its own emulator and Azurite, on its own free ports, and ``tmp_path`` is per worker too.
Nothing in the suite may use a fixed port or write into the work tree. Tests are handed out one at a time as
workers free up, heaviest first; a few groups run on one worker each (:func:`_scope`).
"""

from __future__ import annotations

import doctest
import functools
import re
from pathlib import Path
from typing import Any

import pytest

pytest_plugins = ["rxhubs.emulator.pytest_plugin", "tests.support.azurite", "tests.support.postgres"]


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


def _weight(item: pytest.Item) -> int:
    """Heaviest first: Spark (a JVM each), then the other slow tests, then the rest (a stable sort)."""
    if item.get_closest_marker("spark") is not None:
        return 0
    return 1 if item.get_closest_marker("slow") is not None else 2


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """pytest-xdist's scheduling by work unit, one test per unit except the groups of :func:`_scope`.

    (``--dist loadgroup`` would do with ``xdist_group`` marks, but pytest-xdist 3.8 cannot rename the nodes of
    pytest 9, so its groups are ignored.) Units go out largest first, then in collection order (heaviest
    first, above), one at a time as workers free up.
    """
    from xdist.scheduler import LoadScopeScheduling

    class Scheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _scope(config.rootpath, nodeid)

    return Scheduling(config, log)


_SHARED_FIXTURE = re.compile(r"""scope\s*=\s*["'](module|class|package)["']""")


@functools.cache
def _shares_a_fixture(path: Path) -> bool:
    return path.suffix == ".py" and path.is_file() and bool(_SHARED_FIXTURE.search(path.read_text("utf-8")))


def _scope(root: Path, nodeid: str) -> str:
    """The tests that run on one worker, one after the other:

    * the Spark session's users (tests/spark/: one JVM, not one per worker);
    * the tests that start Spark drivers of their own, in two lanes (by their ids: the bench's Spark scenarios;
      the Spark examples and the fresh-driver discovery test), so that no more than three JVMs start at once
      (on two cores, more and Spark's Python workers miss their connect-back timeout);
    * the tests of a module with a module-scoped fixture (set up once, as the module expects).

    Any other test is a unit of its own.
    """
    module = nodeid.split("::", 1)[0]
    if "[spark" in nodeid and module == "tests/bench/test_bench_smoke.py":
        return "Spark drivers: bench"
    if "[spark" in nodeid or module == "tests/spark/test_discovery.py":
        return "Spark drivers: examples, discovery"
    if module.startswith("tests/spark/"):
        return "tests/spark/"
    return module if _shares_a_fixture(root / module) else nodeid
