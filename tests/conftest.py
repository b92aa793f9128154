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
import os
import re
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from tests.support import spark_cds

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


#: Tests that use the run's one package build (tests/support/package.py): last in their lane, so that
#: tests/test_build.py, started first, has built it by then (the lane's other tests need no build).
_AFTER_THE_BUILD = ("tests/spark/test_discovery.py",)


def _weight(item: pytest.Item) -> tuple[int, bool]:
    """Heaviest first: Spark (a JVM each), then the other slow tests, then the rest (a stable sort)."""
    after_the_build = item.nodeid.startswith(_AFTER_THE_BUILD)
    if item.get_closest_marker("spark") is not None:
        return 0, after_the_build
    return (1 if item.get_closest_marker("slow") is not None else 2), after_the_build


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


#: About how long each long test takes in a whole ``make test`` (``-n 6`` on the 2-core machine), by node id, by
#: node id without its parameters, or by module (each of its tests, where a module's others average over 1 s): only
#: to start the longest work units first. The 60 slowest of the quiet run on 347300e (setup and call, 2026-11-29)
#: as they were; every other test over 8 s from a run with ``--timeline`` at load 13-21, its wall divided by 2.9
#: (the Spark examples' lane took 2.9 times its quiet time there); keda's lag test and the emulator restart test
#: as measured after their fixes (9dcf8b3, 7974d63); the official live tests in seven subprocesses (76 s alone).
#: Any other test counts :data:`_OTHER_SECONDS`. Refresh them when the long tests change (CONTRIBUTING.md,
#: "Tests"): a test of 70 s counted 0.5 goes out last.
_SECONDS: dict[str, float] = {
    "tests/faults/test_exactly_once_kill.py::test_exactly_once_sinks_hold_every_event_once_under_kills_handovers_and_a_zombie[delta]":
        115,
    "tests/spark/test_discovery.py::test_a_fresh_session_reads_by_format_name_from_the_installed_wheel": 105,
    "tests/test_build.py::test_the_build_has_no_deprecation_warning": 103,
    "tests/emulator/test_official_live_tests.py::test_the_official_live_tests_that_need_tls_pass_unmodified_against_the_emulator":
        85,
    "tests/test_examples.py::test_example_runs[spark_backfill]": 88,
    "tests/spark/test_capture_read.py::test_capture_path_reads_every_event_once_in_a_batch_read_and_a_stream": 88,
    "tests/spark/test_connect.py::test_a_remote_session_reads_and_writes_through_a_local_connect_server": 82,
    "tests/chaos/test_chaos_run.py::test_a_short_chaos_run_injects_its_faults_and_passes": 79,
    "tests/tables/test_delta_read.py::test_no_process_that_reads_a_table_aborts_at_its_exit": 78,
    "tests/bench/test_bench_smoke.py::test_scenario_runs_in_its_smoke_form_and_prints_figures[spark]": 76,
    "tests/test_build.py::test_wheel_and_sdist_install_into_a_clean_venv_and_run_an_example": 74,
    "tests/bench/test_bench_smoke.py::test_scenario_runs_in_its_smoke_form_and_prints_figures[spark-source]": 71,
    "tests/bench/test_bench_smoke.py::test_scenario_runs_in_its_smoke_form_and_prints_figures[spark-write]": 69,
    "tests/test_examples.py::test_example_runs[spark_streaming_source]": 69,
    "tests/spark/test_worker_start.py::test_a_users_own_session_given_worker_python_starts_a_streaming_query_under_the_same_load":
        69,
    "tests/emulator/test_official_identity_samples.py::test_the_official_samples_that_use_default_azure_credential_run_unmodified":
        69,
    "tests/spark/test_write_eventhubs.py::test_a_stream_from_hub_a_to_hub_b_killed_9_and_restarted_from_its_checkpoint_loses_nothing":
        65,
    "tests/test_examples.py::test_example_runs[spark_write]": 63,
    "tests/spark/test_cluster.py::test_executors_of_a_standalone_cluster_write_and_batch_read": 56,
    "tests/bench/test_scale_real.py::test_real_processes_join_and_leave_without_loss_or_double_owners": 50,
    "tests/test_examples.py::test_example_runs[spark_capture]": 47,
    "tests/bench/test_bench_smoke.py::test_scenario_runs_in_its_smoke_form_and_prints_figures[silent]": 47,
    "tests/sources/test_backfill_processes.py::test_kill_and_handovers_during_the_backfill_lose_nothing_and_the_delta_table_holds_each_event_once":
        43,
    "tests/bench/test_bench_smoke.py::test_scenario_runs_in_its_smoke_form_and_prints_figures[handover]": 42,
    "tests/faults/test_exactly_once_kill.py::test_exactly_once_sinks_hold_every_event_once_under_kills_handovers_and_a_zombie[sqlite]":
        40,
    "tests/operate/test_lag_http.py::test_rxhubs_consume_serves_its_lag_and_run_workers_too[1]": 36,
    "tests/spark/test_write_eventhubs.py::test_a_dataframe_round_trips_through_the_hub_row_for_row": 36,
    "tests/operate/test_lag_http.py::test_rxhubs_consume_serves_its_lag_and_run_workers_too[2]": 35,
    "tests/bench/test_bench_smoke.py::test_scenario_runs_in_its_smoke_form_and_prints_figures[throughput]": 33,
    "tests/test_examples.py::test_example_runs[spark_parquet]": 33,
    "tests/operate/test_keda.py::test_kedas_lag_equals_the_real_backlog": 14,
    "tests/faults/test_emulator_restart.py::test_emulator_restart_with_durable_data_mid_run_nothing_lost": 14,
    "tests/emulator/test_official_live_tests.py::test_the_official_samples_that_need_tls_run_unmodified_against_the_emulator":
        30,
    "tests/bench/test_bench_smoke.py::test_scenario_runs_in_its_smoke_form_and_prints_figures[state]": 30,
    "tests/balancing/test_planner_properties.py::test_the_1024_partition_steps_converge_within_two_intervals_each": 29,
    "tests/spark/test_source.py::test_reads_everything_sent_then_resumes_without_loss_or_duplicates": 26,
    "tests/spark/test_source.py::test_kill_9_between_offsets_and_commit_replays_the_same_ranges": 26,
    "tests/spark/test_worker_start.py::test_a_streaming_query_starts_while_its_runner_gets_one_percent_of_a_cpu": 25,
    "tests/faults/test_state_kill.py::test_windowed_counts_survive_kills_and_handovers_exactly": 25,
    "tests/faults/test_store_silent.py::test_a_silent_store_path_changes_no_ownership_before_the_expiry_and_gives_it_up_after":
        25,
    "tests/emulator/test_retention.py::test_a_reader_left_behind_by_the_retention_goes_on_at_the_first_retained_event":
        24,
    "tests/sources/test_shaped_batches_emulator.py::test_ten_events_a_second_make_batches_of_about_fifty_with_one_checkpoint_write_each[min_batch_size=100]":
        23,
    "tests/tables/test_delta_cli.py::test_the_demo_runs_with_the_delta_sink_and_writes_no_duplicate": 21,
    "tests/bench/test_bench_smoke.py::test_scenario_runs_in_its_smoke_form_and_prints_figures[trickle]": 20,
    "tests/cli/test_demo.py::test_demo_runs_end_to_end_and_loses_nothing": 19,
    "tests/faults/test_state_kill.py::test_control_without_committed_state_gets_wrong_counts_under_the_same_faults": 19,
    "tests/bench/test_bench_smoke.py::test_scenario_runs_in_its_smoke_form_and_prints_figures[publish]": 19,
    "tests/sources/test_shaped_batches_emulator.py::test_ten_events_a_second_make_batches_of_about_fifty_with_one_checkpoint_write_each[unshaped]":
        19,
    "tests/tables/test_delta_faults.py::test_faults_at_every_step_of_a_commit_and_redelivery_keep_the_table_exact": 18,
    "tests/cli/test_cli_resources.py::test_consume_then_checkpoints_on_blob_leave_nothing_open": 18,
    "tests/bench/test_bench_smoke.py::test_scenario_runs_in_its_smoke_form_and_prints_figures[scale]": 18,
    "tests/tables/test_postgres_properties.py::test_the_table_is_exactly_what_was_delivered_whatever_fails[pg8000]": 18,
    "tests/bench/test_bench_smoke.py::test_scenario_runs_in_its_smoke_form_and_prints_figures[soak]": 17,
    "tests/bench/test_bench_smoke.py::test_scenario_runs_in_its_smoke_form_and_prints_figures[exactly-once]": 17,
    "tests/faults/test_azurite_outage.py::test_azurite_stopped_and_restarted_mid_run_balancing_and_checkpoints_recover":
        17,
    "tests/cli/test_cli_resources.py::test_consume_with_workers_shares_partitions_prints_the_summary_and_leaves_nothing_open":
        16,
    "tests/transport/test_frames.py::test_every_byte_boundary[python]": 16,
    "tests/emulator/test_official_live_tests.py::test_without_the_emulators_authority_in_the_bundle_the_same_tests_fail_at_the_handshake":
        15,
    "tests/bench/test_bench_smoke.py::test_scenario_runs_in_its_smoke_form_and_prints_figures[rebalance]": 15,
    "tests/spark/test_arrow_frames.py::test_usual_events_equal_the_events_tables_whatever_the_cuts[compiled]": 15,
    "tests/faults/test_conflicts.py::test_bursts_of_412_conflicts_no_crash_ownership_converges_nothing_lost": 15,
    "tests/emulator/test_promote.py::test_positions_after_a_promotion_get_the_services_answers": 15,
    "tests/spark/test_arrow_columns.py::test_received_messages_give_the_table_their_fields_give": 15,
    "tests/transport/test_frames.py::test_arbitrary_bytes_never_raise_anything_but_frame_error[python]": 14,
    "tests/sources/test_partitions_processes.py::test_blob_processes_kill_and_join_every_event_processed": 14,
    "tests/transport/test_frames.py::test_messages_equal_pyamqps_whatever_the_cuts[python]": 13,
    "tests/test_examples.py::test_example_runs[workers]": 13,
    "tests/faults/test_network_faults.py::test_a_link_and_a_management_call_opened_through_one_second_latency_each_way":
        13,
    "tests/operate/test_keda.py::test_a_new_group_at_latest_scales_to_the_maximum_unless_seeded": 13,
    "tests/tables/test_delta_cli.py::test_consume_into_delta_writes_each_event_once_even_when_the_checkpoints_are_lost":
        13,
    "tests/operate/test_reset_blob.py::test_a_sigstopped_consumer_resumed_after_a_forced_reset_reads_from_the_reset_position":
        13,
    "tests/emulator/test_identity_endpoint.py::test_without_the_secret_header_no_token_and_the_hub_refuses": 13,
    "tests/transport/test_frames_events.py::test_events_equal_the_wrapped_messages_whatever_the_cuts[python]": 12,
    "tests/cli/test_cli_postgres.py::test_consume_into_postgresql_holds_exactly_the_hubs_events": 12,
    "tests/transport/test_frames.py::test_messages_equal_pyamqps_whatever_the_cuts[compiled]": 11,
    "tests/spark/test_arrow_frames.py::test_tables_equal_the_events_tables_whatever_the_cuts[python]": 10,
    "tests/spark/test_arrow_frames.py::test_usual_events_equal_the_events_tables_whatever_the_cuts[python]": 10,
    "tests/transport/test_frames_events.py::test_events_equal_the_wrapped_messages_whatever_the_cuts[compiled]": 10,
    "tests/cli/test_cli_exactly_once.py::test_consume_into_sqlite_holds_exactly_the_hubs_events_across_a_restart": 10,
    "tests/tables/test_postgres_properties.py::test_the_table_is_exactly_what_was_delivered_whatever_fails[psycopg]":
        10,
    "tests/spark/test_entra_id.py::test_spark_writes_and_reads_with_entra_id_tokens_built_on_the_executors": 9,
    "tests/spark/test_schemas_column.py::test_a_column_of_decoded_values_with_null_and_a_reason_for_bad_rows": 9,
    "tests/bench/test_bench_smoke.py::test_scenario_runs_in_its_smoke_form_and_prints_figures[stores]": 9,
    "tests/bench/test_bench_cli.py::test_stores_scenario_reports_both_workloads": 9,
    "tests/spark/test_arrow_frames.py::test_arbitrary_bytes_never_raise_anything_but_frame_error[python]": 9,
    "tests/sources/test_partitions_processes.py::test_sqlite_processes_kill_and_join_every_event_processed": 9,
    "tests/sources/test_partitions_processes.py::test_async_work_in_flight_at_a_kill_loses_nothing": 9,
    "tests/bench/test_bench_cli.py::test_rebalance_scenario_reports_convergence_against_the_official_rules_and_draws_the_plots":
        8,
    "tests/bench/test_bench_smoke.py::test_scenario_runs_in_its_smoke_form_and_prints_figures[workers]": 8,
    "tests/spark/test_arrow_frames.py::test_any_message_shape_gives_the_events_table[python]": 8,
    "tests/spark/test_arrow_frames.py::test_arbitrary_bytes_never_raise_anything_but_frame_error[compiled]": 8,
    "tests/spark/test_source.py": 1.2,
    "tests/operate/test_keda.py": 2.0,
    "tests/cli/test_cli_bad_input.py": 1.2,
    "tests/bench/test_bench_smoke.py": 4.1,
    "tests/test_examples.py": 2.5,
    "tests/spark/test_write_spark.py": 4.2,
    "tests/spark/test_arrow_frames.py": 1.2,
    "tests/cli/test_cli_start_flags.py": 5.2,
    "tests/faults/test_geo_promotion.py": 2.5,
    "tests/faults/test_malformed_frames.py": 2.5,
    "tests/faults/test_network_faults.py": 3.1,
    "tests/faults/test_server_faults.py": 3.2,
    "tests/faults/test_silent_path.py": 3.9,
    "tests/operate/test_reset_blob.py": 3.0,
    "tests/operators/test_publish_emulator.py": 1.4,
    "tests/balancing/test_planner_properties.py": 1.1,
    "tests/cli/test_cli.py": 1.3,
    "tests/emulator/test_aio_client.py": 2.3,
    "tests/emulator/test_cli.py": 1.1,
    "tests/emulator/test_faults.py": 1.0,
    "tests/emulator/test_ingest.py": 1.7,
    "tests/operate/test_lag_http.py": 2.3,
    "tests/spark/test_arrow_read.py": 3.2,
    "tests/tables/test_postgres.py": 1.4,
    "tests/test_layout.py": 1.9,
}
_OTHER_SECONDS = 0.5


def _unit_seconds(nodeids: Any) -> float:
    """About how long a work unit (node ids) runs: the sum of :data:`_SECONDS` over its tests."""
    total = 0.0
    for nodeid in nodeids:
        keys = (nodeid, nodeid.split("[", 1)[0], nodeid.split("::", 1)[0])
        total += next((_SECONDS[k] for k in keys if k in _SECONDS), _OTHER_SECONDS)
    return total


#: Tests of tests/spark/ that start Spark processes of their own and never use the session's JVM (a Connect server
#: and its driver; a standalone cluster's master, worker and driver): they run in the bench's lane, one after the
#: other. Among the session's users they made that lane the suite's longest (its 83 tests about 1,400 s of a 1,750 s
#: run at load 10-23, 2026-11-29); by CPU (--cpu-durations) the three lanes now hold about the same: the
#: session's users ~180 s, the bench's ~160 s, the examples' ~165 s.
_OWN_DRIVERS = ("tests/spark/test_connect.py", "tests/spark/test_cluster.py")

_SHARED_FIXTURE = re.compile(r"""scope\s*=\s*["'](module|class|package)["']""")


@functools.cache
def _shares_a_fixture(path: Path) -> bool:
    return path.suffix == ".py" and path.is_file() and bool(_SHARED_FIXTURE.search(path.read_text("utf-8")))


@functools.cache
def _needs_spark(path: Path) -> bool:
    """A module marked ``spark``: its tests use the session's JVM or start one (the others are plain Python)."""
    return path.suffix == ".py" and path.is_file() and "pytest.mark.spark" in path.read_text("utf-8")


def _is_spark(nodeid: str) -> bool:
    """A test in one of the Spark lanes (:func:`_scope`): it starts a Spark JVM or uses the session's."""
    module = nodeid.split("::", 1)[0]
    return "[spark" in nodeid or module in (*_OWN_DRIVERS, *_AFTER_THE_BUILD) or module.startswith("tests/spark/")


def _scope(root: Path, nodeid: str) -> str:
    """The tests that run on one worker, one after the other:

    * the Spark session's users (the modules of tests/spark/ marked ``spark``: one JVM, not one per worker; the
      plain-Python modules there, Arrow builders and write marbles, are units of their own like any test);
    * the tests that start Spark drivers of their own, in two lanes (by their ids: the bench's Spark scenarios,
      the Connect and cluster tests, :data:`_OWN_DRIVERS`; the Spark examples and the
      fresh-driver discovery test, last: it waits for the package build), so that no more than three JVMs
      start at once (on two cores, more and Spark's Python workers miss their connect-back timeout);
    * the tests of a module with a module-scoped fixture (set up once, as the module expects).

    Any other test is a unit of its own.
    """
    module = nodeid.split("::", 1)[0]
    if ("[spark" in nodeid and module == "tests/bench/test_bench_smoke.py") or module in _OWN_DRIVERS:
        return "Spark drivers: bench"
    if "[spark" in nodeid or module == "tests/spark/test_discovery.py":
        return "Spark drivers: examples, discovery"
    if module.startswith("tests/spark/") and _needs_spark(root / module):
        return "tests/spark/"
    return module if _shares_a_fixture(root / module) else nodeid
