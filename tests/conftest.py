"""Suite-wide fixtures. Real components are started by fixture plugins, on free loopback ports:

* ``rxhubs.emulator.pytest_plugin``: ``eventhubs_emulator`` (session) and ``emulator_factory``;
* ``tests.support.azurite``: ``azurite`` (session, can be stopped and restarted) and ``blob_container``;
* ``tests.support.postgres``: ``postgres`` (session: a PostgreSQL 15 server) and ``pg_database``.

``make test`` runs the suite in parallel processes (pytest-xdist, ``-n 6``): a "session" is then one worker's,
so each worker starts its own emulator and Azurite, on its own free ports, and ``tmp_path`` is per worker too.
Nothing in the suite may use a fixed port or write into the work tree. Tests are handed out one at a time as
workers free up, longest first; a few groups run on one worker each (:func:`_scope`).
"""

from __future__ import annotations

import doctest
import functools
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

# No wall-clock limits in tests: hypothesis' per-example deadline (200 ms by default) is one, and on a loaded
# machine (`-n 6` on two cores) an example that takes 0.2 ms can take 300 ms once and fail the run.
settings.register_profile("rxhubs", deadline=None)
settings.load_profile("rxhubs")

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
    pytest 9, so its groups are ignored.) Units go out longest first (:func:`_unit_seconds`), then in
    collection order (heaviest first, above), one at a time as workers free up. (pytest-xdist's own order,
    most tests first, started tests/cli/test_cli_bad_input.py's 52 quick tests before the Spark lanes.)
    """
    from xdist.scheduler import LoadScopeScheduling

    config.option.loadscopereorder = False  # the queue is in collection order; sorted below

    class Scheduling(LoadScopeScheduling):
        _sorted = False

        def _split_scope(self, nodeid: str) -> str:
            return _scope(config.rootpath, nodeid)

        def _assign_work_unit(self, node: Any) -> None:
            if not self._sorted:  # the queue is complete when the first unit goes out
                units = sorted(self.workqueue.items(), key=lambda unit: -_unit_seconds(unit[1]))
                self.workqueue.clear()
                self.workqueue.update(units)
                self._sorted = True
            super()._assign_work_unit(node)

    return Scheduling(config, log)


#: Seconds the longest tests took at ``-n 4`` on the 2-core machine (2026-11-26), by node id, by node id
#: without its parameters, or by module (each of its tests): only to start the longest work units first.
#: Any other test counts :data:`_OTHER_SECONDS`.
_SECONDS: dict[str, float] = {
    "tests/spark/test_discovery.py": 80,
    "tests/chaos/test_chaos_run.py": 70,
    "tests/bench/test_bench_smoke.py::test_scenario_runs_in_its_smoke_form_and_prints_figures[spark-source]": 67,
    "tests/bench/test_bench_smoke.py::test_scenario_runs_in_its_smoke_form_and_prints_figures[silent]": 43,
    "tests/bench/test_bench_smoke.py::test_scenario_runs_in_its_smoke_form_and_prints_figures[spark]": 40,
    "tests/bench/test_bench_smoke.py::test_scenario_runs_in_its_smoke_form_and_prints_figures[handover]": 35,
    "tests/bench/test_bench_smoke.py::test_scenario_runs_in_its_smoke_form_and_prints_figures": 14,
    "tests/test_build.py::test_wheel_and_sdist_install_into_a_clean_venv_and_run_an_example": 58,
    "tests/test_examples.py::test_example_runs[spark_streaming_source]": 39,
    "tests/test_examples.py::test_example_runs[spark_parquet]": 33,
    "tests/test_examples.py::test_example_runs": 8,
    "tests/spark/test_source.py": 10,
    "tests/spark/test_dataframe.py": 3,
    "tests/faults/test_exactly_once_kill.py": 34,
    "tests/faults/test_state_kill.py": 27,
    "tests/faults/test_store_silent.py::"
    "test_a_silent_store_path_changes_no_ownership_before_the_expiry_and_gives_it_up_after": 24,
    "tests/emulator/test_official_samples.py": 4,
    "tests/cli/test_demo.py::test_demo_runs_end_to_end_and_loses_nothing": 16,
    # measured 2026-11-29 at -n 2 under load 20-32 (other helpers' runs), divided by 3 to compare with the above
    "tests/tables/test_delta_read.py::test_no_process_that_reads_a_table_aborts_at_its_exit": 150,
    "tests/bench/test_scale_real.py::test_real_processes_join_and_leave_without_loss_or_double_owners": 53,
    "tests/bench/test_bench_smoke.py::test_scenario_runs_in_its_smoke_form_and_prints_figures[throughput]": 100,
    "tests/bench/test_bench_smoke.py::test_scenario_runs_in_its_smoke_form_and_prints_figures[rebalance]": 43,
    "tests/bench/test_bench_smoke.py::test_scenario_runs_in_its_smoke_form_and_prints_figures[workers]": 35,
    "tests/bench/test_bench_smoke.py::test_scenario_runs_in_its_smoke_form_and_prints_figures[state]": 33,
    "tests/bench/test_bench_smoke.py::test_scenario_runs_in_its_smoke_form_and_prints_figures[publish]": 28,
    "tests/bench/test_bench_smoke.py::test_scenario_runs_in_its_smoke_form_and_prints_figures[soak]": 21,
    "tests/bench/test_bench_smoke.py::test_scenario_runs_in_its_smoke_form_and_prints_figures[exactly-once]": 19,
    "tests/bench/test_bench_smoke.py::test_scenario_runs_in_its_smoke_form_and_prints_figures[trickle]": 18,
    "tests/bench/test_bench_cli.py::test_rebalance_scenario_reports_convergence_against_the_official_rules_and_draws_the_plots":
        27,
    "tests/bench/test_bench_cli.py::test_stores_scenario_reports_both_workloads": 21,
    "tests/cli/test_cli_resources.py": 12,
    "tests/workers/test_run_workers.py::test_a_killed_worker_is_restarted_and_nothing_is_lost": 12,
    # 2026-11-29, quiet (-n 2): the SDK's own live tests over TLS (mostly waiting on the SDK's retries)
    "tests/emulator/test_official_live_tests.py::test_the_official_live_tests_that_need_tls_pass_unmodified_against_the_emulator":
        255,
    "tests/emulator/test_official_live_tests.py": 20,
}
_OTHER_SECONDS = 0.5


def _unit_seconds(nodeids: Any) -> float:
    """About how long a work unit (node ids) runs: the sum of :data:`_SECONDS` over its tests."""
    total = 0.0
    for nodeid in nodeids:
        keys = (nodeid, nodeid.split("[", 1)[0], nodeid.split("::", 1)[0])
        total += next((_SECONDS[k] for k in keys if k in _SECONDS), _OTHER_SECONDS)
    return total


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
