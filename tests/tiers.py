"""Which tests are slow: the fast tier (`pytest -m "not slow"`) leaves them out; the full suite runs them.

A test is slow when it starts real parts or a whole simulated deployment (an sshd, tmux, the SGLang host
venv, a simulated server brought to ready, a subprocess of gpuops per case):
- it asks for one of SLOW_FIXTURES (an sshd, the SGLang host venv and what is built from it);
- its file is one of SLOW_FILES (tmux, or a deployment in every test);
- or it is named in SLOW_TESTS: each took 3 s or more (all its parameters together) on the 2-core CI
  machine under load. `pytest --durations=40` shows newcomers; add a test here (FILE::FUNCTION) when it
  takes that long. tests/test_tiers.py checks that every name here is a test that exists.
Kept here, not as marks in each file, so that a list of the slow tests reads in one place.
"""

from __future__ import annotations

from collections.abc import Iterable

SLOW_FIXTURES = frozenset({"sshd", "ssh_home", "world", "sglang_venv", "sglang_server_venv", "sglang_0510",
                           "bench_tokenizer", "tiny_qwen3"})

SLOW_FILES = frozenset({
    "test_at_80x24.py",
    "test_download_life.py",
    "test_screens_twice.py",
    "test_terminal.py",
    "test_terminal_screens.py",
})

SLOW_TESTS = frozenset({
    "test_bench.py::test_bad_input_exits_2_with_one_line",
    "test_bench.py::test_poll_metrics_follows_the_simulated_server",
    "test_bench.py::test_without_the_sglang_venv_the_run_fails_and_says_why",
    "test_bench_screens.py::test_launcher_validates_inline_and_starts_nothing",
    "test_bench_screens.py::test_live_sweep_from_the_deployment_screen_then_cancel",
    "test_bench_screens.py::test_readonly_refuses_benchmarks_with_a_notice",
    "test_bench_screens.py::test_runs_list_marks_and_compares_with_deltas_and_plots",
    "test_cli.py::test_a_verbs_bad_input_still_exits_2_with_one_line",
    "test_cli.py::test_broken_config_is_one_line_and_exit_2",
    "test_cli.py::test_the_dashboards_command_line_reads_as_the_whole_parser_reads_it",
    "test_cli.py::test_unreachable_host_is_reported_not_fatal",
    "test_config.py::test_the_dashboard_follows_config_toml_without_a_restart",
    "test_dashboard_repaint.py::test_a_host_going_stale_or_down_shows_it_at_the_next_tick",
    "test_dashboard_repaint.py::test_a_sparkline_is_redrawn_when_its_history_shows_something_new_and_only_then",
    "test_dashboard_repaint.py::test_an_unchanged_host_row_is_not_remade_a_changed_one_shows_at_the_next_tick",
    "test_fleet_dashboard.py::test_a_click_on_a_footer_key_presses_it",
    "test_fleet_dashboard.py::test_a_row_table_draws_what_a_data_table_draws",
    "test_fleet_dashboard.py::test_f_finds_hosts_by_name_at_once",
    "test_fleet_dashboard.py::test_o_cycles_the_sort_and_the_selection_stays_on_its_host",
    "test_fleet_dashboard.py::test_the_process_filter_and_the_host_filter_are_apart",
    "test_fleet_scale.py::test_hosts_that_never_answer_are_connected_to_a_bounded_number_at_once",
    "test_fleet_scale.py::test_retries_of_hosts_that_fail_take_turns_over_the_whole_inventory",
    "test_host_keys.py::test_a_known_hosts_of_only_a_cert_authority_says_so",
    "test_host_keys.py::test_alias_changed_key_same_type",
    "test_host_keys.py::test_changed_key_of_another_type_is_changed_not_a_reset",
    "test_host_keys.py::test_host_key_alias_is_the_lookup_name",
    "test_host_keys.py::test_revoked_key",
    "test_host_keys.py::test_unknown_key",
    "test_host_keys.py::test_user_known_hosts_file_from_ssh_config",
    "test_hostile_inputs.py::test_an_absurd_ssh_host_is_a_config_error",
    "test_hostile_inputs.py::test_sim_setup_refuses_a_hostile_name_before_writing_anything",
    "test_hostile_text.py::test_nothing_reaches_the_real_terminal",
    "test_hostile_text.py::test_the_cli_prints_names_as_literal_text",
    "test_hostile_text.py::test_the_process_table_keeps_a_script_of_many_lines_on_its_row",
    "test_hostile_text.py::test_the_storage_screen_its_dialog_and_notices_show_names_as_they_are",
    "test_journal.py::test_file_follow_partial_lines_truncation_rotation",
    "test_journal.py::test_journal_follow_appends_and_resumes_after_cursor",
    "test_journal.py::test_journal_local_process_killed_resumes_without_loss",
    "test_key_footer.py::test_the_footer_paints_what_textuals_footer_painted",
    "test_launch.py::test_stop_waits_for_the_whole_process_group",
    "test_layers.py::test_each_contract_fails_when_broken",
    "test_layers.py::test_mypy_is_clean_on_every_package_and_fails_on_a_type_error",
    "test_like_secrets.py::test_plan_like_never_shows_a_secret_and_the_plan_holds_none",
    "test_models_rm_race.py::test_cli_rm_deletes_a_model_holding_an_escaping_symlink",
    "test_models_rm_race.py::test_cli_rm_refuses_when_the_host_finds_a_parent_swapped",
    "test_models_rm_race.py::test_swapping_a_parent_for_a_symlink_during_delete_never_escapes",
    "test_models_rm_race.py::test_the_cli_under_the_same_race",
    "test_multinode_plan.py::test_plan_hosts_on_the_command_line",
    "test_node_checks.py::test_the_node_probe_tells_listening_refused_and_dropped_apart",
    "test_packaging.py::test_wheel_installs_only_under_the_gpuops_namespace",
    "test_paths_and_pipes.py::test_absurd_model_path_is_one_line",
    "test_paths_and_pipes.py::test_bench_compare_json_piped_to_head",
    "test_paths_and_pipes.py::test_every_path_argument_refuses_the_absurd",
    "test_paths_and_pipes.py::test_paths_that_must_not_climb",
    "test_paths_and_pipes.py::test_plan_piped_to_head",
    "test_paths_and_pipes.py::test_reader_gone_before_anything_is_written",
    "test_paths_and_pipes.py::test_sim_setup_refuses_home_itself",
    "test_paths_and_pipes.py::test_sim_setup_refuses_system_locations",
    "test_paths_and_pipes.py::test_sim_setup_runs_again_on_its_own_directory_and_into_an_empty_one",
    "test_paths_and_pipes.py::test_status_piped_to_head",
    "test_phases.py::test_throughput_benchmark",
    "test_pid_reuse.py::test_gpuops_stop_and_forget_leave_the_stranger_alone",
    "test_pipeline_redact.py::test_redact_equals_the_reference_on_mixes",
    "test_plan.py::test_cli_bad_input_is_exit_2_one_line",
    "test_plan.py::test_cli_plan_from_the_hf_cache_offline",
    "test_plan_screens.py::test_busy_gpus_are_shown_and_free_ones_offered",
    "test_plan_screens.py::test_model_picker_lists_the_hosts_models_shows_facts_and_plans",
    "test_plan_screens.py::test_plan_review_changes_tp_and_mtp_and_updates_the_verdict",
    "test_plan_screens.py::test_plan_review_edits_without_dead_ends_and_asks_before_deploying",
    "test_plan_screens.py::test_plan_review_like_a_previous_unit_shows_the_diff",
    "test_router_choice.py::test_a_host_with_only_sglang_router_runs_it_and_a_plan_naming_smg_is_refused",
    "test_router_probe.py::test_router_routes_reports_health_and_sees_a_killed_worker_lost",
    "test_rules.py::test_a_long_serving_log_raises_nothing_and_stays_ready",
    "test_sglang_sim.py::test_a_requests_prefill_is_logged_before_its_answer",
    "test_sglang_sim.py::test_concurrent_requests_are_served_in_parallel",
    "test_sglang_sim.py::test_flags_are_matched_like_sglang_versions_match_flag",
    "test_sglang_sim.py::test_gpu_memory_follows_the_phases_and_sigterm_frees_it",
    "test_sglang_sim.py::test_hang_at_dist_init",
    "test_sglang_sim.py::test_health_is_503_until_ready",
    "test_sglang_sim.py::test_hf_apparent_size_grows_and_resumes_after_kill",
    "test_sglang_sim.py::test_sigkill_leaves_no_counted_memory",
    "test_sglang_sim.py::test_spec_config_crash",
    "test_sglang_sim.py::test_systemctl_failed_unit",
    "test_sglang_sim.py::test_systemctl_start_journal_stop",
    "test_sglang_sim.py::test_unknown_flag_is_refused_like_argparse",
    "test_sim_multinode.py::test_node1_hangs_before_joining",
    "test_sim_multinode.py::test_node1_never_started_node0_sits_in_dist_init",
    "test_sim_multinode.py::test_node1_starts_late_both_reach_ready",
    "test_sim_multinode.py::test_store_unreachable_the_client_times_out",
    "test_sim_multinode.py::test_tp_not_divisible_by_nnodes",
    "test_sim_multinode.py::test_without_dist_init_addr_nodes_never_meet",
    "test_simhost.py::test_cli_sim_setup_scenario_and_pace",
    "test_simhost.py::test_dead_processes_are_dropped_and_their_memory_freed",
    "test_simhost.py::test_reporters_started_apart_sample_on_the_same_wall_clock_beat",
    "test_store.py::test_cli_status",
    "test_store.py::test_kill_9_at_any_moment_loses_nothing_recorded",
    "test_store_hardening.py::test_a_damaged_store_is_one_line_for_every_verb",
    "test_store_hardening.py::test_a_full_disk_at_open_is_one_line",
    "test_store_hardening.py::test_a_newer_schema_says_upgrade",
    "test_store_hardening.py::test_a_read_only_state_folder_is_one_line",
    "test_store_hardening.py::test_a_state_folder_that_is_a_file_is_one_line",
    "test_store_hardening.py::test_a_store_locked_too_long_is_one_line_and_nothing_changes",
    "test_store_hardening.py::test_stop_stops_the_server_on_a_full_disk_and_says_what_it_could_not_record",
    "test_telemetry_parse.py::test_redact_tries_its_patterns_only_where_they_can_match",
    "test_tiers.py::test_the_fast_tier_leaves_out_what_is_slow_and_keeps_the_rest",
    "test_triage_checks.py::test_cuda_driver_against_torchs_cuda",
    "test_triage_checks.py::test_p2p_nvml_refusal_and_sev_snp_fire",
    "test_triage_checks.py::test_p2p_passes",
    "test_triage_cli.py::test_triage_json_for_a_file_and_for_stdin",
    "test_triage_cli.py::test_triage_missing_file_is_exit_2",
    "test_triage_cli.py::test_triage_needs_a_log_or_a_deployment_and_a_known_one",
    "test_triage_cli.py::test_triage_shows_the_findings_with_their_evidence_and_fix",
    "test_triage_screen.py::test_a_crash_shows_its_finding_and_f_applies_the_fix_after_showing_the_diff",
    "test_triage_screen.py::test_a_stall_shows_its_banner_and_triage_runs_on_its_own",
    "test_triage_screen.py::test_readonly_refuses_the_fix",
    "test_triage_screen.py::test_triage_screen_ends_a_leftover_gpu_process_after_asking",
    "test_tui.py::test_command_palette_jumps_to_host",
    "test_tui.py::test_dashboard_lists_hosts_and_shows_unreachable",
    "test_tui.py::test_help_lists_the_screens_keys",
    "test_tui.py::test_jump_to_host_with_colon",
    "test_tui.py::test_theme_switch_is_remembered",
    "test_tui_correctness.py::test_a_deployment_screen_follows_the_run_another_gpuops_starts",
    "test_tui_correctness.py::test_a_stopped_or_crashed_deployment_shows_no_gpu_memory_of_another",
    "test_tui_correctness.py::test_ctrl_k_on_a_deployments_server_names_it_and_stops_it",
    "test_tui_correctness.py::test_readonly_offers_no_action_that_changes_a_host_and_its_key_says_why",
    "test_tui_correctness.py::test_sizes_are_said_in_one_unit_on_every_screen",
    "test_tui_correctness.py::test_swap_is_on_help_and_without_a_name_says_what_it_needs",
    "test_tui_correctness.py::test_the_model_picker_takes_an_id_typed_right_after_it_opens",
    "test_tui_correctness.py::test_the_phase_list_marks_the_phase_that_crashed_and_only_a_draft_that_exists",
    "test_tui_correctness.py::test_the_stall_banners_silence_keeps_counting",
    "test_tui_correctness.py::test_the_swaps_last_question_y_keeps_the_new_one_and_r_rolls_back",
    "test_watch_crash.py::test_a_server_found_exited_is_recorded_crashed_with_the_lines_it_wrote_last",
})


# The files the full suite's workers take first, the heaviest first (seconds of a full run on 3 workers of
# this 2-core machine under load, `--durations=0` summed by file): pytest-xdist's `--dist loadfile` hands
# out whole files in the order they are collected, so a long file collected last (test_real_sglang*,
# test_replicas, test_swap sort late) would be the run's tail while the other workers idle.
HEAVY_FIRST = (  # (seconds of each in a run of 21 min on 3 workers; the suite's tests sum to ~3,650 s)
    "test_real_sglang_nodes.py",  # 361
    "test_real_sglang.py",  # 304
    "test_real_sglang_refusals.py",  # 238
    "test_replicas.py",  # 237
    "test_multinode_plan.py",  # 209
    "test_one_truth.py",  # 182
    "test_store_hardening.py",  # 171
    "test_swap.py",  # 154
    "test_download_life.py",  # 133
    "test_bench_cli.py",  # 133
    "test_cli_verbs.py",  # 124
    "test_swap_tui.py",  # 80
    "test_deploy.py",  # 68
)


def run_order(nodeid: str) -> int:
    """Where a test's file comes in the full run: HEAVY_FIRST's files first, in its order, then the rest."""
    file = nodeid.partition("::")[0].rsplit("/", 1)[-1]
    return HEAVY_FIRST.index(file) if file in HEAVY_FIRST else len(HEAVY_FIRST)


def is_slow(nodeid: str, fixturenames: Iterable[str] = ()) -> bool:
    """NODEID as pytest names it (tests/test_x.py::test_y[param]); FIXTURENAMES: what the test asks for."""
    path, _, name = nodeid.partition("::")
    file = path.rsplit("/", 1)[-1]
    return (file in SLOW_FILES or f"{file}::{name.split('[', 1)[0]}" in SLOW_TESTS
            or not SLOW_FIXTURES.isdisjoint(fixturenames))
