"""The suite's schedule under pytest-xdist (``make test``: six workers on two cores), from tests/conftest.py.

Which tests share a worker (:func:`_scope`: the Spark lanes, the modules with a shared fixture), and which unit a
worker that asks for work is given (:class:`Queues`): the longest first, and two kinds side by side. About a
quarter of the suite's worker time goes to tests that mostly wait (on the SDK's own timeouts, a consumer's
retries, a fault's expiry: their CPU a fifth of their wall time or less, :data:`_WAITS`). Handed out in
collection order they ran together, late, and left the cores idle: six workers each in a test that waits (1.1
of the 2 cores busy for 100 s of the quiet run on 8ac2ae9, 1.0 in its last minute; 300 of its 1,630 core-seconds
idle). So they go to their share of the workers all along the run, beside the tests that work, and both kinds run
out about together.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest

#: Tests that use the run's one package build (tests/support/package.py): last in their lane, so that
#: tests/test_build.py, started first, has built it by then (the lane's other tests need no build).
_AFTER_THE_BUILD = ("tests/spark/test_discovery.py",)


def _weight(item: pytest.Item) -> tuple[int, bool]:
    """Heaviest first: Spark (a JVM each), then the other slow tests, then the rest (a stable sort)."""
    after_the_build = item.nodeid.startswith(_AFTER_THE_BUILD)
    if item.get_closest_marker("spark") is not None:
        return 0, after_the_build
    return (1 if item.get_closest_marker("slow") is not None else 2), after_the_build


def scheduler(config: pytest.Config, log: Any) -> Any:
    """pytest-xdist's scheduling by work unit, one test per unit except the groups of :func:`_scope`.

    (``--dist loadgroup`` would do with ``xdist_group`` marks, but pytest-xdist 3.8 cannot rename the nodes of
    pytest 9, so its groups are ignored.) Units go out longest first (:func:`_unit_seconds`), then in
    collection order (heaviest first, above), one at a time as workers free up, each worker given a unit that
    waits or one that works as :class:`Queues` says. (pytest-xdist's own order, most tests first, started
    tests/cli/test_cli_bad_input.py's 52 quick tests before the Spark lanes.)
    """
    from xdist.scheduler import LoadScopeScheduling

    config.option.loadscopereorder = False  # the queue is in collection order; sorted below

    class Scheduling(LoadScopeScheduling):
        _queues: Queues | None = None
        _held: dict[Any, list[str]]  # each worker's units handed out and not finished

        def _split_scope(self, nodeid: str) -> str:
            return _scope(config.rootpath, nodeid)

        def remove_node(self, node: Any) -> str | None:
            """A worker gone: its unfinished units back in the workqueue, the test it crashed in not run again.

            (pytest-xdist's own puts back every unit the worker was ever handed, the finished ones too; with a
            unit per test a finished one goes out again with nothing to run, its worker never reports, and
            the run hangs. And it would run the crashing test again, crashing a worker each time.)
            """
            workload = self.assigned_work.pop(node)
            pending = [(scope, nodeid) for scope, unit in workload.items() for nodeid, done in unit.items() if not done]
            if not pending:
                return None
            scope, crashed = pending[0]  # units run in the order handed out: the first unfinished one was running
            workload[scope][crashed] = True  # xdist reports it failed ("worker crashed while running")
            self.workqueue.update({scope: unit for scope, unit in workload.items() if not all(unit.values())})
            for other in self.assigned_work:
                self._reschedule(other)
            return crashed

        def _assign_work_unit(self, node: Any) -> None:
            if self._queues is None:  # the queue is complete when the first unit goes out
                self._queues, self._held = Queues(self.workqueue), {}
            if not self._queues:  # what is left came back from a worker that crashed: as it comes
                super()._assign_work_unit(node)
                return
            running, waiting = [], 0
            for other, held in list(self._held.items()):
                work = self.assigned_work.get(other)
                if work is None:  # a worker gone (its unfinished units are back in the workqueue)
                    del self._held[other]
                    continue
                held[:] = [scope for scope in held if not all(work[scope].values())]
                running += held
                waiting += other is not node and any(scope in self._queues.waiting for scope in held)
            scope = self._queues.pop(waiting, len(self.nodes), running)
            self.workqueue.move_to_end(scope, last=False)  # the unit the base class hands out next
            super()._assign_work_unit(node)
            self._held.setdefault(node, []).append(scope)

    return Scheduling(config, log)


class Queues:
    """The units not handed out yet, in two queues, each longest first: those that wait and those that work.

    A worker that asks is given the next unit that waits while fewer other workers than that kind's share hold one
    not finished, else the next that works; when a queue is empty, the other's next. The share is of the workers,
    as the units that wait are of the seconds not finished yet (queued, or handed out and not done), rounded up: the
    two kinds run out about together, those that wait a little first, and the run ends on short units that work.
    """

    def __init__(self, units: Mapping[str, Mapping[str, bool]]) -> None:
        ordered = sorted(units.items(), key=lambda unit: -_unit_seconds(unit[1]))  # stable: collection order
        self.seconds = {scope: _unit_seconds(nodeids) for scope, nodeids in ordered}
        self.waiting = {scope for scope, nodeids in ordered if _unit_waits(nodeids)}
        self.waits = [scope for scope, _ in ordered if scope in self.waiting][::-1]  # popped from the end
        self.works = [scope for scope, _ in ordered if scope not in self.waiting][::-1]
        self._queued = {"waits": sum(self.seconds[s] for s in self.waits),
                        "works": sum(self.seconds[s] for s in self.works)}

    def share(self, workers: int, running: Iterable[str] = ()) -> int:
        """How many workers should hold a unit that waits, given the scopes handed out and not finished."""
        waits, works = self._queued["waits"], self._queued["works"]
        for scope in running:
            if scope in self.waiting:
                waits += self.seconds[scope]
            else:
                works += self.seconds[scope]
        return math.ceil(workers * waits / (waits + works)) if waits else 0

    def pop(self, waiting: int, workers: int, running: Iterable[str] = ()) -> str:
        """The scope to hand out to a worker, given how many other workers hold a unit that waits."""
        kind = "waits" if self.waits and (not self.works or waiting < self.share(workers, running)) else "works"
        scope = (self.waits if kind == "waits" else self.works).pop()
        self._queued[kind] -= self.seconds[scope]
        return scope

    def __len__(self) -> int:
        return len(self.waits) + len(self.works)


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
    "tests/spark/test_write_eventhubs.py::test_a_dataframe_round_trips_through_the_hub_row_for_row": 36,
    "tests/bench/test_bench_smoke.py::test_scenario_runs_in_its_smoke_form_and_prints_figures[throughput]": 33,
    "tests/test_examples.py::test_example_runs[spark_parquet]": 33,
    "tests/bench/test_bench_smoke.py::test_scenario_runs_in_its_smoke_form_and_prints_figures[state]": 30,
    "tests/balancing/test_planner_properties.py::test_the_1024_partition_steps_converge_within_two_intervals_each": 29,
    "tests/spark/test_source.py::test_reads_everything_sent_then_resumes_without_loss_or_duplicates": 26,
    "tests/spark/test_source.py::test_kill_9_between_offsets_and_commit_replays_the_same_ranges": 26,
    "tests/spark/test_worker_start.py::test_a_streaming_query_starts_while_its_runner_gets_one_percent_of_a_cpu": 25,
    "tests/faults/test_state_kill.py::test_windowed_counts_survive_kills_and_handovers_exactly": 25,
    "tests/faults/test_store_silent.py::test_a_silent_store_path_changes_no_ownership_before_the_expiry_and_gives_it_up_after":
        25,
    "tests/tables/test_delta_cli.py::test_the_demo_runs_with_the_delta_sink_and_writes_no_duplicate": 21,
    "tests/cli/test_demo.py::test_demo_runs_end_to_end_and_loses_nothing": 19,
    "tests/faults/test_state_kill.py::test_control_without_committed_state_gets_wrong_counts_under_the_same_faults": 19,
    "tests/bench/test_bench_smoke.py::test_scenario_runs_in_its_smoke_form_and_prints_figures[publish]": 19,
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
    "tests/bench/test_bench_smoke.py::test_scenario_runs_in_its_smoke_form_and_prints_figures[rebalance]": 15,
    "tests/spark/test_arrow_frames.py::test_usual_events_equal_the_events_tables_whatever_the_cuts[compiled]": 15,
    "tests/spark/test_arrow_columns.py::test_received_messages_give_the_table_their_fields_give": 15,
    "tests/transport/test_frames.py::test_arbitrary_bytes_never_raise_anything_but_frame_error[python]": 14,
    "tests/sources/test_partitions_processes.py::test_blob_processes_kill_and_join_every_event_processed": 14,
    "tests/transport/test_frames.py::test_messages_equal_pyamqps_whatever_the_cuts[python]": 13,
    "tests/tables/test_delta_cli.py::test_consume_into_delta_writes_each_event_once_even_when_the_checkpoints_are_lost":
        13,
    "tests/transport/test_frames_events.py::test_events_equal_the_wrapped_messages_whatever_the_cuts[python]": 12,
    "tests/cli/test_cli_postgres.py::test_consume_into_postgresql_holds_exactly_the_hubs_events": 12,
    "tests/transport/test_frames.py::test_messages_equal_pyamqps_whatever_the_cuts[compiled]": 11,
    "tests/spark/test_arrow_frames.py::test_tables_equal_the_events_tables_whatever_the_cuts[python]": 10,
    "tests/spark/test_arrow_frames.py::test_usual_events_equal_the_events_tables_whatever_the_cuts[python]": 10,
    "tests/transport/test_frames_events.py::test_events_equal_the_wrapped_messages_whatever_the_cuts[compiled]": 10,
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

#: Tests that mostly wait: their CPU (``--cpu-durations``) a fifth of their wall time or less in a run of their
#: folders with ``-n 2`` at load 4-7 (2026-11-29, 23:31-23:49), with their wall time in the quiet full run on
#: 8ac2ae9 (/tmp/t9.jsonl there), by node id, without parameters, or by module (each of its tests), as
#: :data:`_SECONDS`. Every test over 2.5 s that waits so; a key is in one table only.
_WAITS: dict[str, float] = {
    "tests/emulator/test_official_live_tests.py::test_the_official_live_tests_that_need_tls_pass_unmodified_against_the_emulator":
        85,
    "tests/emulator/test_official_identity_samples.py::test_the_official_samples_that_use_default_azure_credential_run_unmodified":
        69,
    "tests/operate/test_lag_http.py::test_rxhubs_consume_serves_its_lag_and_run_workers_too[2]": 45,
    "tests/operate/test_lag_http.py::test_rxhubs_consume_serves_its_lag_and_run_workers_too[1]": 42,
    "tests/emulator/test_retention.py::test_a_reader_left_behind_by_the_retention_goes_on_at_the_first_retained_event":
        24,
    "tests/sources/test_shaped_batches_emulator.py::test_ten_events_a_second_make_batches_of_about_fifty_with_one_checkpoint_write_each[min_batch_size=100]":
        22,
    "tests/bench/test_bench_smoke.py::test_scenario_runs_in_its_smoke_form_and_prints_figures[trickle]": 20,
    "tests/sources/test_shaped_batches_emulator.py::test_ten_events_a_second_make_batches_of_about_fifty_with_one_checkpoint_write_each[unshaped]":
        19,
    "tests/operate/test_reset_blob.py::test_a_sigstopped_consumer_resumed_after_a_forced_reset_reads_from_the_reset_position":
        17,
    "tests/emulator/test_official_live_tests.py::test_without_the_emulators_authority_in_the_bundle_the_same_tests_fail_at_the_handshake":
        16,
    "tests/faults/test_conflicts.py::test_bursts_of_412_conflicts_no_crash_ownership_converges_nothing_lost": 15,
    "tests/operate/test_lag_http.py::test_prometheus_and_keda_read_the_known_backlog": 15,
    "tests/emulator/test_promote.py::test_positions_after_a_promotion_get_the_services_answers": 15,
    "tests/operate/test_keda.py::test_a_new_group_at_latest_scales_to_the_maximum_unless_seeded": 14,
    "tests/faults/test_emulator_restart.py::test_emulator_restart_with_durable_data_mid_run_nothing_lost": 13,
    "tests/faults/test_network_faults.py::test_a_link_and_a_management_call_opened_through_one_second_latency_each_way":
        13,
    "tests/emulator/test_identity_endpoint.py::test_without_the_secret_header_no_token_and_the_hub_refuses": 13,
    "tests/operate/test_keda.py::test_kedas_lag_equals_the_real_backlog[1]": 12,
    "tests/cli/test_cli_exactly_once.py::test_consume_into_sqlite_holds_exactly_the_hubs_events_across_a_restart": 12,
    "tests/faults/test_silent_path.py::test_a_blackholed_path_recovers_after_the_heal_with_nothing_lost": 12,
    "tests/faults/test_server_faults.py::test_server_busy_on_attach_flow_and_management_loses_nothing": 12,
    "tests/faults/test_server_faults.py::test_a_stolen_link_with_no_new_owner_is_reclaimed_and_the_others_flow_on": 12,
    "tests/faults/test_server_faults.py::test_a_forced_close_of_every_connection_loses_nothing": 12,
    "tests/faults/test_busy_management.py::test_a_refresh_of_the_partition_ids_that_hangs_does_not_hold_up_the_renewals":
        12,
    "tests/faults/test_stolen_link.py::test_a_stolen_link_ends_that_stream_only_and_the_partition_resumes_from_its_checkpoint":
        12,
    "tests/test_examples.py::test_example_runs[workers]": 12,
    "tests/faults/test_silent_path.py::test_a_silenced_path_is_noticed_and_reading_resumes_on_a_new_connection[public]":
        11,
    "tests/faults/test_server_faults.py::test_partitions_added_to_a_live_hub_are_owned_and_read": 11,
    "tests/operate/test_reset_blob.py::test_a_reset_dry_run_then_executed_moves_every_reader[g-time---to-datetime-20]":
        11,
    "tests/operate/test_reset_blob.py::test_live_owners_refuse_and_force_fences_a_paused_owner": 11,
    "tests/operate/test_keda.py::test_kedas_lag_equals_the_real_backlog[3]": 10,
    "tests/operate/test_keda.py::test_kedas_lag_equals_the_real_backlog[2]": 10,
    "tests/faults/test_silent_path.py::test_the_balancing_loop_survives_a_dead_management_path": 10,
    "tests/faults/test_network_faults.py::test_connections_cut_upstream_during_the_open_and_attach_handshake": 10,
    "tests/operate/test_reset_blob.py::test_a_reset_dry_run_then_executed_moves_every_reader[g-earliest---to-earliest-0]":
        10,
    "tests/operate/test_reset_blob.py::test_a_reset_dry_run_then_executed_moves_every_reader[g-shift---shift-by=-10-26]":
        10,
    "tests/faults/test_geo_promotion.py::test_a_restart_after_a_promotion_resumes_where_it_stopped_in_rxhubs_and_in_the_official_processor":
        10,
    "tests/operate/test_lag_http.py::test_the_stall_series_counts_the_dead_paths_this_process_noticed": 10,
    "tests/operate/test_lag_http.py::test_unknown_seconds_are_null_at_the_top_never_caught_up": 10,
    "tests/faults/test_cut_off_calls.py::test_cut_off_management_calls_collect_no_garbage_until_the_hub_closes": 10,
    "tests/cli/test_cli_start_flags.py::test_seed_checkpoint_writes_one_where_a_new_group_starts": 9,
    "tests/cli/test_cli_start_flags.py::test_checkpoint_out_of_range_says_where_a_checkpoint_ahead_of_the_hub_reads[latest-read_of_00]":
        9,
    "tests/cli/test_cli_start_flags.py::test_checkpoint_out_of_range_says_where_a_checkpoint_ahead_of_the_hub_reads[earliest-read_of_01]":
        9,
    "tests/cli/test_cli_start_flags.py::test_without_seed_checkpoint_a_new_group_at_latest_writes_none": 9,
    "tests/bench/test_bench_smoke.py::test_scenario_runs_in_its_smoke_form_and_prints_figures[receiver]": 9,
    "tests/faults/test_silent_path.py::test_a_silenced_path_is_noticed_and_reading_resumes_on_a_new_connection[direct]":
        8,
    "tests/faults/test_silent_path.py::test_a_management_call_on_a_dead_path_is_retried_on_a_fresh_connection": 8,
    "tests/faults/test_silent_path.py::test_a_management_call_that_never_answers_fails_retriably": 8,
    "tests/faults/test_network_faults.py::test_one_second_latency_each_way": 8,
    "tests/faults/test_network_faults.py::test_one_second_latency_each_way_keeps_ownership_with_a_3_s_expiry_and_slow_store_calls":
        8,
    "tests/test_examples.py::test_example_runs[shaped_batches]": 8,
    "tests/emulator/test_promote.py::test_a_promotion_closes_connections_and_gives_every_event_an_offset_of_the_new_segment":
        8,
    "tests/faults/test_silent_path.py::test_an_idle_hub_through_the_proxy_keeps_its_connections": 7,
    "tests/faults/test_network_faults.py::test_rst_on_every_connection_public_receive_path": 7,
    "tests/faults/test_network_faults.py::test_20_kb_per_second[run0]": 7,
    "tests/operate/test_lag_http.py::test_other_paths_and_methods_are_refused_and_a_store_outage_is_a_503": 7,
    "tests/operate/test_lag_http.py::test_a_taken_port_is_a_clear_error": 7,
    "tests/faults/test_corrupt_records.py::test_corrupt_sqlite_rows_are_unowned_or_skipped_nothing_lost": 7,
    "tests/faults/test_sink_failure.py::test_a_failed_write_is_not_checkpointed_and_a_restarted_pipeline_delivers_everything":
        7,
    "tests/cli/test_cli_publish.py::test_consume_with_an_eventhub_sink_publishes_every_event_then_checkpoints": 7,
    "tests/emulator/test_aio_client.py::test_oversized_event_rejected_and_unknown_hub": 7,
    "tests/emulator/test_cli.py::test_keys_websockets_and_any_case_consumer_groups": 7,
    "tests/emulator/test_retention.py::test_retain_events_moves_the_beginning_and_reads_start_there": 7,
    "tests/emulator/test_promote.py::test_the_segment_is_kept_over_a_restart_and_old_offsets_stay_refused": 7,
    "tests/emulator/test_tls.py::test_amqp_over_secure_websockets_from_the_command_line": 7,
    "tests/faults/test_network_faults.py::test_rst_on_every_connection": 6,
    "tests/faults/test_network_faults.py::test_a_connection_cut_mid_frame_while_events_flow": 6,
    "tests/operate/test_reset_blob.py::test_bad_input_is_one_line_exit_2_and_nothing_written": 5,
    "tests/faults/test_malformed_frames.py::test_a_damaged_event_frame_costs_its_partition_one_reconnect[truncate]": 6,
    "tests/faults/test_malformed_frames.py::test_a_damaged_event_frame_costs_its_partition_one_reconnect[oversize]": 6,
    "tests/faults/test_malformed_frames.py::test_a_damaged_event_frame_costs_its_partition_one_reconnect[flip]": 6,
    "tests/faults/test_malformed_frames.py::test_a_damaged_event_frame_costs_its_partition_one_reconnect[section]": 6,
    "tests/faults/test_corrupt_records.py::test_corrupt_ownership_and_checkpoint_blobs_are_unowned_or_skipped_nothing_lost":
        6,
    "tests/emulator/test_aio_client.py::test_owner_level_steals_and_refuses": 6,
    "tests/emulator/test_aio_client.py::test_restart_with_data_dir_keeps_every_event": 6,
    "tests/emulator/test_durability.py::test_kill_9_loses_no_acknowledged_event": 6,
    "tests/emulator/test_retention.py::test_time_retention_expires_old_events_even_on_an_idle_hub": 6,
    "tests/sources/test_backfill.py::test_missing_capture_files_are_a_gap_error_naming_the_sequence_numbers": 6,
    "tests/transport/test_native.py::test_heartbeats_keep_an_idle_link_that_is_read": 6,
    "tests/faults/test_geo_promotion.py::test_checkpoints_reset_after_a_promotion_writes_offsets_the_official_processor_resumes_from":
        5,
    "tests/test_examples.py::test_example_runs[operate_reset_and_lag]": 5,
    "tests/emulator/test_sync_client.py::test_send_modes": 5,
    "tests/emulator/test_aio_client.py::test_start_positions": 5,
    "tests/emulator/test_faults.py::test_server_busy_at_attach_refuses_producers_and_consumers_until_cleared": 5,
    "tests/emulator/test_identity_endpoint.py::test_default_azure_credential_sends_and_reads_with_the_endpoints_tokens":
        5,
    "tests/operators/test_checkpoint_turns.py::test_a_burst_of_writes_goes_in_turns_and_none_times_out": 5,
    "tests/faults/test_geo_promotion.py::test_a_promotion_while_consuming_loses_nothing_and_repeats_nothing": 4,
    "tests/test_examples.py::test_example_runs[balanced_consumers]": 4,
    "tests/test_examples.py::test_example_runs[publish_hub_to_hub]": 4,
    "tests/emulator/test_sync_client.py::test_hub_properties": 4,
    "tests/test_examples.py::test_example_runs[processor]": 4,
    "tests/emulator/test_aio_client.py::test_at_most_five_readers_per_partition_and_group": 4,
    "tests/emulator/test_aio_client.py::test_properties_and_send_modes": 4,
    "tests/emulator/test_official_samples.py::test_sample_runs_against_the_emulator[sync_samples/send.py]": 4,
    "tests/emulator/test_faults.py::test_server_busy_on_flow_detaches_receivers_and_holds_deliveries_until_it_ends": 4,
    "tests/emulator/test_faults.py::test_a_receiver_cut_by_server_busy_no_longer_holds_the_partition": 4,
    "tests/emulator/test_faults.py::test_added_partitions_are_live_and_durable_over_a_restart": 4,
    "tests/otel/test_real_time.py::test_batch_spans_link_the_azure_sdk_producers_message_spans": 4,
    "tests/emulator/test_delivery_frames.py::test_sdk_consumers_at_two_positions_read_every_field_as_sent": 4,
    "tests/emulator/test_durability.py::test_torn_tail_record_is_ignored_on_recovery": 4,
    "tests/emulator/test_identity_endpoint.py::test_the_aio_credential_works_the_same": 4,
    "tests/operators/test_publish_pipelined.py::test_partitions_send_together_natively_each_in_order_and_acked_before_its_checkpoint":
        4,
    "tests/sources/test_backfill.py::test_backfill_from_the_start_reads_every_event_once_in_order_then_live": 4,
    "tests/sources/test_backfill_windows.py::test_windowed_counts_across_a_stop_in_the_backfill_and_the_switch_match_the_plain_events":
        4,
    "tests/transport/test_native_send.py::test_without_the_compiled_encoder_sends_go_through_the_sdk_and_say_so_once":
        4,
    "tests/faults/test_network_faults.py::test_an_event_slower_than_the_idle_timeout_through_20_kb_per_second": 3,
    "tests/faults/test_async_work.py::test_a_poison_record_stops_only_its_partition[stop-partition]": 3,
    "tests/cli/test_checkpoints_watch.py::test_watch_shows_a_checkpoint_written_while_it_runs_and_ctrl_c_exits_0": 3,
    "tests/emulator/test_sync_client.py::test_unknown_hub": 3,
    "tests/emulator/test_tls.py::test_the_official_clients_send_and_receive_over_tls_with_the_ca_file": 3,
    "tests/emulator/test_retention.py::test_a_durable_log_keeps_its_retention_across_a_restart": 3,
    "tests/sources/test_backfill.py::test_a_checkpoint_taken_in_the_backfill_resumes_in_the_backfill": 3,
    "tests/testing/test_fault_proxy.py::test_the_sdk_through_the_proxy_then_reset": 3,
    "tests/transport/test_liveness.py": 2.6,
    "tests/emulator/test_conformance.py": 2.4,
    "tests/transport/test_azure_receiver_contract_public.py": 2,
    "tests/sources/test_stream_contract_azure_public.py": 1.7,
    "tests/transport/test_azure_receiver_contract.py": 1.6,
    "tests/transport/test_azure_hub.py": 0.7,
    "tests/emulator/test_official_live_tests.py::test_the_official_samples_that_need_tls_run_unmodified_against_the_emulator":
        30,
}


def _seconds_of(nodeid: str) -> tuple[float, bool]:
    """About how long a test runs (:data:`_SECONDS`, :data:`_WAITS`), and whether it mostly waits."""
    for key in (nodeid, nodeid.split("[", 1)[0], nodeid.split("::", 1)[0]):
        if key in _SECONDS:
            return _SECONDS[key], False
        if key in _WAITS:
            return _WAITS[key], True
    return _OTHER_SECONDS, False


def _unit_seconds(nodeids: Iterable[str]) -> float:
    """About how long a work unit (node ids) runs: the sum over its tests."""
    return sum(_seconds_of(nodeid)[0] for nodeid in nodeids)


def _unit_waits(nodeids: Iterable[str]) -> bool:
    """A unit that mostly waits: most of its seconds are of tests that wait."""
    waiting = working = 0.0
    for nodeid in nodeids:
        seconds, waits = _seconds_of(nodeid)
        if waits:
            waiting += seconds
        else:
            working += seconds
    return waiting > working




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
