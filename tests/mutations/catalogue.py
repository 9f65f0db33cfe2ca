"""Behaviours broken on purpose, each with the tests that must then fail (docs/mutations.md).

A mutation is a few exact text replacements in a copy of the tree (never in the checkout:
tests/mutations/run.py applies them). Each replaced text must occur exactly once in its file, so
that a mutation whose code has moved is reported as stale rather than silently doing nothing;
``tests/test_mutations.py`` checks that on every run of the suite, and that every test named here
exists. ``because``: words that every failure must contain, where the test says why it fails in
its own words (an assertion message), so that a test failing for an unrelated reason is not
counted as noticing.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["Edit", "Mutation", "MUTATIONS", "ROOT"]

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Edit:
    """Replace ``old`` (which must occur exactly once) by ``new`` in the file ``path``."""

    path: str
    old: str
    new: str

    def problem(self, root: Path) -> str | None:
        """Why this edit cannot be applied to the tree at ``root``; None when it can."""
        file = root / self.path
        if not file.is_file():
            return f"{self.path} does not exist"
        count = file.read_text().count(self.old)
        if count != 1:
            return f"{self.path} holds the text to replace {count} times, not once: {self.old[:80]!r}"
        return None

    def apply(self, root: Path) -> None:
        why = self.problem(root)
        if why is not None:
            raise ValueError(f"stale mutation: {why}")
        file = root / self.path
        file.write_text(file.read_text().replace(self.old, self.new))


@dataclass(frozen=True)
class Mutation:
    """One behaviour broken on purpose: its name, what it breaks, how, and the tests (pytest ids,
    a function meaning all its parameters) that must fail because of it."""

    name: str
    behaviour: str
    edits: tuple[Edit, ...]
    tests: tuple[str, ...]
    because: str = ""

    def apply(self, root: Path) -> None:
        for edit in self.edits:
            edit.apply(root)


def _m(name: str, behaviour: str, edits: list[Edit], tests: list[str], because: str = "") -> Mutation:
    return Mutation(name, behaviour, tuple(edits), tuple(tests), because)


MUTATIONS: tuple[Mutation, ...] = (
    _m("no-process-group",
       "under torchrun no process group forms: each process trains the whole run alone (rank 0 alone "
       "writes the run folder, so nothing collides and every number equals a one-process run's)",
       [Edit("src/spmlkit/training/distributed.py",
             "        if world_size <= 1 and not launched:\n            return cls()",
             "        if True:\n            return cls()"),
        Edit("src/spmlkit/training/distributed.py",
             "        return self.rank == 0\n",
             "        return self.rank == 0 and os.environ.get('RANK', '0') == '0'\n"),
        Edit("src/spmlkit/training/distributed.py",
             "        if not self.enabled:\n            return fn()\n",
             "        if not self.enabled:\n            return fn() if self.is_main else None\n")],
       ["tests/test_distributed.py::test_two_processes_equal_one_with_the_same_global_batch",
        "tests/test_distributed.py::test_a_recipe_with_crops_a_schedule_and_an_ema_in_two_processes_equals_one",
        "tests/test_distributed.py::test_pu_mlc_with_global_statistics_equals_one_process_up_to_its_amplified_rounding",
        "tests/test_distributed.py::test_em_apl_pseudo_labels_were_made_from_the_gathered_predictions",
        "tests/test_distributed.py::test_a_two_process_run_stopped_and_resumed_equals_an_uninterrupted_one"],
       because="not trained by the processes compared"),
    _m("thresholds-on-test",
       '"validation" thresholds selected on the test set',
       [Edit("src/spmlkit/training/evaluation.py",
             "        t_global = thresholds.select_thresholds(val_probs, val_targets, per_class=False)\n"
             "        t_class = thresholds.select_thresholds(val_probs, val_targets, per_class=True)",
             "        t_global = thresholds.select_thresholds(test_probs, test_targets, per_class=False)\n"
             "        t_class = thresholds.select_thresholds(test_probs, test_targets, per_class=True)")],
       ["tests/test_evaluation.py::test_evaluate_test_reports_fixed_and_validation_thresholds"]),
    _m("compile-ignored",
       "--compile silently ignored: the step runs eagerly",
       [Edit("src/spmlkit/training/trainer.py", "    if config.machine.compile:", "    if False:")],
       ["tests/test_pipeline_devices.py::test_a_compiled_run_trains_and_keeps_plain_checkpoints",
        "tests/test_cuda.py::test_compile_equals_eager_and_reports_its_speedup"]),
    _m("autocast-unused",
       "bf16 autocast asked for but not used: the forward runs in float32",
       [Edit("src/spmlkit/training/device.py", '    if amp == "none":\n', '    if amp in ("none", "bf16"):\n')],
       ["tests/test_pipeline_devices.py::test_a_run_records_the_dtype_its_forward_ran_in",
        "tests/test_cuda.py::test_bf16_autocast_step_is_close_to_fp32s_and_a_bf16_run_learns"]),
    _m("mulan-cache-unread",
       "the parsed MULAN arrays are kept but never read: every load parses the ARFF files again",
       [Edit("src/spmlkit/data/mulan.py", "    arrays = None if changed else _read_parsed(spec, folder / _PARSED)\n",
             "    arrays = None\n")],
       ["tests/test_mulan.py::test_parsed_arrays_are_kept_and_follow_the_files"],
       because="parsed the ARFF files again"),
    _m("peak-kib",
       "peak host memory reported 1024 times too small (Linux's KiB taken as bytes)",
       [Edit("src/spmlkit/training/device.py", "else int(peak) * 1024), gpu", "else int(peak)), gpu")],
       ["tests/test_peak_memory.py::test_a_sweep_keeps_each_runs_peak_in_the_store",
        "tests/test_peak_memory.py::test_each_run_of_a_batched_group_records_the_groups_peak"],
       because="is not the process's"),
    _m("ycbcr-as-rgb",
       "YCbCr images decoded as if their channels were R, G and B",
       [Edit("src/spmlkit/data/image_decode.py", "    source = image.mode\n",
             "    source = image.mode\n    if source == 'YCbCr':\n"
             "        return Image.frombytes('RGB', image.size, image.tobytes()).convert(mode)\n")],
       ["tests/test_image_decode.py::test_bilevel_cmyk_ycbcr_hsv_and_lab"]),
    _m("field-metrics-zero",
       "every metric of the field recorded as 0",
       [Edit("src/spmlkit/training/evaluation.py", "    return out\n\n\ndef unobserved_analysis",
             "    field = ('ranking_loss', 'one_error', 'coverage', 'example_ap', 'hamming_loss', 'example_f1',\n"
             "             'micro_f1', 'macro_f1')\n"
             "    out.update({k: 0.0 for k in out if k.split('@')[0] in field})\n"
             "    return out\n\n\ndef unobserved_analysis")],
       ["tests/test_predict_thresholds.py::test_a_run_records_the_metrics_of_the_field"],
       because="differ from scikit-learn's"),
    _m("option-help-placeholder",
       'an option\'s help set to "?"',
       [Edit("src/spmlkit/cli/train.py",  # the help text left standing beside the call, unused
             '    opt.add_argument("--seed", type=int, help="seeds the initial',
             '    opt.add_argument("--seed", type=int, help="?") or dict(help="seeds the initial')],
       ["tests/test_what_a_person_sees.py::test_every_option_says_what_it_does[train]"],
       because="options whose help says nothing"),
    _m("option-help-no-default",
       'an option\'s help says "no default" instead of naming it',
       [Edit("src/spmlkit/cli/train.py",
             'f"split and observed labels (default: {_default(\'seed\')})")',
             '"split and observed labels (no default)")')],
       ["tests/test_what_a_person_sees.py::test_every_train_option_that_takes_a_value_names_its_default"],
       because="names no default"),
    _m("command-unquoted",
       "the command a record keeps is the words joined with spaces, not a command a shell takes back",
       [Edit("src/spmlkit/training/provenance.py", "    return shlex.join(argv)", '    return " ".join(argv)')],
       ["tests/test_what_a_person_sees.py::test_sweep_records_carry_versions_command_and_device"],
       because="spmlkit sweep my grid.yaml"),
    _m("benchmark-jobs-ignored",
       "benchmark --jobs ignored: the default number of workers is used whatever the user typed",
       [Edit("src/spmlkit/cli/experiments.py",
             "    jobs = args.jobs if args.jobs is not None else default_jobs(datasets)",
             "    jobs = default_jobs(datasets)")],
       ["tests/test_benchmark.py::test_parallel_workers_give_the_same_numbers"],
       because="--jobs was not followed"),
    _m("check-one-thread",
       "prepare --check decodes on one thread whatever its workers",
       [Edit("src/spmlkit/data/formats/check.py", "    with ThreadPoolExecutor(max(1, count)) as pool:",
             "    with ThreadPoolExecutor(1) as pool:")],
       ["tests/test_image_decode.py::test_the_check_decodes_in_threads_and_reports_in_list_order"],
       because="not decoded by 3 threads at once"),
    _m("allocator-off-linux",
       "the allocator changed off Linux while reporting that it was not",
       [Edit("src/spmlkit/allocator.py",
             '    if not sys.platform.startswith("linux"):\n        return False\n    try:',
             "    try:"),
        Edit("src/spmlkit/allocator.py",
             "    return bool(mallopt(_M_MMAP_THRESHOLD, limit)) & bool(mallopt(_M_TRIM_THRESHOLD, limit))",
             "    took = bool(mallopt(_M_MMAP_THRESHOLD, limit)) & bool(mallopt(_M_TRIM_THRESHOLD, limit))\n"
             '    return took if sys.platform.startswith("linux") else False')],
       ["tests/test_allocator.py::test_elsewhere_nothing_changes"],
       because="changed off Linux"),
    _m("group-one-by-one",
       "train_group trains its runs one after another (each run's own loop), not as one group",
       [Edit("src/spmlkit/training/trainer.py",
             "    t0, started_at = time.perf_counter(), utc_now()\n    first = plan_run(configs[0], data=data)",
             "    return [train(config, data=data) for config in configs]\n"
             "    t0, started_at = time.perf_counter(), utc_now()\n    first = plan_run(configs[0], data=data)")],
       ["tests/test_batched.py::test_batched_runs_equal_their_solo_runs",
        "tests/test_batched.py::test_batched_runs_equal_their_solo_runs_for_other_settings",
        "tests/test_batched.py::test_runs_that_stop_early_leave_the_group_and_the_others_go_on",
        "tests/test_batched.py::test_batched_records_equal_solo_records"],
       because="did not train as one group"),
    _m("group-steps-one-by-one",
       "a group's runs take their steps one after another inside the group's loop",
       [Edit("src/spmlkit/training/loop.py",
             "    batched = None if len(runs) == 1 else BatchedSteps([run.step for run in runs])\n",
             "    if len(runs) > 1:  # each run's epoch of steps alone, one run after the other\n"
             "        parts = [train_epoch(group, [run], epoch, on_step) for run in runs]\n"
             "        return {**parts[0], 'losses': [part['losses'][0] for part in parts]}\n"
             "    batched = None\n")],
       ["tests/test_batched.py::test_batched_runs_equal_their_solo_runs[an-hparams0]",
        "tests/test_batched.py::test_batched_runs_equal_their_solo_runs_for_other_settings[values0]"],
       because="did not train as one group"),
    _m("image-subset-unapplied",
       "an image run with --subset trains on the whole train list (and so reads the bad images outside it)",
       [Edit("src/spmlkit/training/run_data.py",
             "    if config.data.subset is not None:\n        if config.data.subset > data.num_train:",
             "    if config.data.subset is not None and data.kind == 'features':\n"
             "        if config.data.subset > data.num_train:")],
       ["tests/test_faults_user_errors.py::test_bad_images_outside_the_subset_do_not_stop_training"],
       because="training stopped"),
    _m("sweep-claims-everything",
       "a sweep claims the whole grid at its first claim, so a second sweep on the store finds nothing to run",
       [Edit("src/spmlkit/experiments/sweep/claims.py", "            group, key = [first], group_key(first)\n",
             "            rest = list(self._candidates)\n            self._left -= len(rest)\n"
             "            group, key = [first, *rest], group_key(first)\n")],
       ["tests/test_sweep_processes.py::test_two_sweeps_on_one_store_split_the_grid"],
       because="one sweep ran the whole grid"),
    _m("suite-no-workers",
       "the suite's sweep trains every run in its own process: no worker is started",
       [Edit("src/spmlkit/experiments/sweep/backends.py",
             "    return InProcess(threads) if jobs == 1 else WorkerPool(jobs, threads, datasets=datasets)",
             "    return InProcess(threads)")],
       ["tests/test_suite_workers.py::test_the_mulan_suite_starts_one_single_threaded_worker_per_cpu"],
       because="not one single-threaded worker per CPU"),
    _m("worker-threads-unset",
       "a worker trains with the threads it inherited, not the one thread it was given",
       [Edit("src/spmlkit/experiments/sweep/processes.py",
             "self._pool.submit(self.task, runs, self._runs_dir, self.threads)",
             "self._pool.submit(self.task, runs, self._runs_dir, None)")],
       ["tests/test_suite_workers.py::test_the_mulan_suite_starts_one_single_threaded_worker_per_cpu"],
       because="not one single-threaded worker per CPU"),
    _m("docs-plain-fence-command-broken",
       "a command in a docs code block without a language tag no longer runs (an option renamed)",
       [Edit("docs/leaderboard.md", "spmlkit benchmark --suite mulan --out results/mulan ",
             "spmlkit benchmark --suite mulan --output results/mulan ")],
       ["tests/test_readme.py::test_every_command_runs_or_says_why_not[leaderboard.md]"],
       because="exited 2"),
    _m("docs-command-unexplained",
       "a docs command that is not run here stops saying why (its comment dropped)",
       [Edit("docs/leaderboard.md", "    # the 12 MULAN sets: a download, then about 30 min on 2 CPUs", "")],
       ["tests/test_readme.py::test_every_command_runs_or_says_why_not[leaderboard.md]"],
       because="does not say why"),
    _m("partition-seed-ignored",
       "the tabular protocol draws every trial's partition from seed 0: five trials of one partition",
       [Edit("src/spmlkit/protocol/partition.py", "np.random.RandomState(seed).permutation(n)",
             "np.random.RandomState(0).permutation(n)")],
       ["tests/test_partition.py::test_each_seed_is_its_own_trial"]),
    _m("smile-coverage-unscaled",
       "SMILE's convention of coverage no longer divided by the number of labels",
       [Edit("src/spmlkit/metrics/smile_convention.py", "coverage = float((deepest[labelled].sum() / n - 1.0) / c)",
             "coverage = float(deepest[labelled].sum() / n - 1.0)")],
       ["tests/test_smile_metrics.py::test_values_worked_out_by_hand"]),
    _m("reproduce-z-unfloored",
       "a published std printed as 0.000 divides the difference as it stands (z infinite)",
       [Edit("src/spmlkit/experiments/reproduce.py", "max(self.published_std, STD_FLOOR)", "self.published_std")],
       ["tests/test_reproduce.py::test_z_divides_by_the_published_std_floored_at_half_the_printed_digit"]),
    _m("heartbeat-renews-nothing",
       "the heartbeat's renewal leaves a lease's expiry where it was",
       [Edit("src/spmlkit/experiments/store.py", "(time.time() + duration, owner)", "(time.time(), owner)")],
       ["tests/test_sweep_leases.py::test_renewal_keeps_a_lease_alive",
        "tests/test_sweep_leases.py::test_the_heartbeat_renews_the_lease_of_a_run_longer_than_the_lease"]),
    _m("smile-group-shares-one-generator",
       "a batched group of SMILE runs draws every run's Beta samples from the first run's generator",
       [Edit("src/spmlkit/methods/smile.py", "generator=m._generator(c.device))", "generator=self._generator(c.device))")],
       ["tests/test_losses_smile.py::test_r_runs_of_the_method_in_one_call_equal_their_separate_steps",
        "tests/test_batched.py::test_smile_runs_that_share_their_batches_equal_their_solo_runs_bit_for_bit"]),
    _m("smile-group-rows-sorted",
       "a batched SMILE group computes its batches' rows in sorted order, not in the order a solo run "
       "computes them, so a group that shares its batches no longer equals its solo runs bit for bit",
       [Edit("src/spmlkit/methods/smile.py", "    order = first.argsort()\n",
             "    order = torch.arange(len(rows), device=flat.device)\n")],
       ["tests/test_batched.py::test_smile_runs_that_share_their_batches_equal_their_solo_runs_bit_for_bit"]),
    _m("smile-hamming-at-method-threshold",
       "the smile.* columns' Hamming loss decided at the method's threshold (0.75 for EM and EM-APL) instead of "
       "at 0.5, as SMILE's and CRISP's tables decide it",
       [Edit("src/spmlkit/metrics/smile_convention.py",
             "def convention_columns(scores: ArrayLike, targets: ArrayLike) -> dict[str, float]:",
             "def convention_columns(scores: ArrayLike, targets: ArrayLike, threshold: float = 0.5) -> dict[str, float]:"),
        Edit("src/spmlkit/metrics/smile_convention.py", "    values = smile_metrics(scores, targets)\n",
             "    values = smile_metrics(scores, targets, threshold=threshold)\n"),
        Edit("src/spmlkit/training/evaluation.py", "out.update(metrics.convention_columns(test_probs, test_targets))",
             "out.update(metrics.convention_columns(test_probs, test_targets, threshold=threshold))")],
       ["tests/test_smile_metrics.py::test_the_hamming_loss_is_at_one_half_whatever_the_methods_threshold"],
       because="computed at the method's threshold"),
    _m("reproduce-sample-std",
       "a reproduction's \"ours ± std\" with the sample std over the trials instead of the population std",
       [Edit("src/spmlkit/experiments/reproduce.py", "ours_std=float(ours.std())", "ours_std=float(ours.std(ddof=1))")],
       ["tests/test_reproduce.py::test_reproduce_runs_the_grid_selects_on_validation_and_writes_the_tables_beside_the_paper"],
       because="not the population std"),
    _m("label-query-keys-unplaced",
       "the label-query decoder's keys without their position encoding (LAC's and MIME's image heads)",
       [Edit("src/spmlkit/models/label_query.py", "key=memory + pos, value=memory", "key=memory, value=memory")],
       ["tests/test_lac.py::test_the_decoders_queries_find_the_map_by_its_positions_by_hand"],
       because="did not read the map by its positions"),
    _m("leaderboard-iun-ranked",
       "the leaderboard takes only methods trained on full labels for references: iun (one positive and every "
       "negative) is ranked as a single-positive method",
       [Edit("src/spmlkit/experiments/benchmark.py",
             "return tuple(m for m in spec.methods if m in METHODS and METHODS[m].sees_more_labels)",
             "return tuple(m for m in spec.methods if m in METHODS and METHODS[m].labels == 'full')")],
       ["tests/test_leaderboard.py::test_the_references_come_from_the_methods_declaration_unless_every_label_is_observed"],
       because="not the methods that see more labels"),
    _m("leaderboard-references-under-full",
       "the leaderboard leaves bce and iun unranked as references even under observation full, where every "
       "method sees every label",
       [Edit("src/spmlkit/experiments/benchmark.py", '    if spec.observation_used == "full":\n        return ()\n',
             "    if False:\n        return ()\n")],
       ["tests/test_leaderboard.py::test_the_references_come_from_the_methods_declaration_unless_every_label_is_observed"],
       because="under observation full"),
    _m("crisp-share-counts-negatives",
       "CRISP's annotated share r_j counts observed negatives (-1) as annotations of the class",
       [Edit("src/spmlkit/losses/crisp.py", "torch.as_tensor((obs == 1).mean(axis=0)",
             "torch.as_tensor((obs != 0).mean(axis=0)")],
       ["tests/test_crisp.py::test_observed_negatives_are_no_annotation_of_a_class"],
       because="observed negatives counted"),
    _m("smile-beta-swapped",
       "SMILE's loss draws Beta(1 - D, D) instead of Beta(D, 1 - D): its two concentrations swapped",
       [Edit("src/spmlkit/methods/smile.py", "draw = beta_rsample(distribution + BETA_EPSILON, 1 - distribution + BETA_EPSILON,",
             "draw = beta_rsample(1 - distribution + BETA_EPSILON, distribution + BETA_EPSILON,")],
       ["tests/test_losses_smile.py::test_the_losss_beta_draw_is_beta_of_d_and_one_minus_d"],
       because="concentrations are swapped"),
    _m("lac-queue-wraps-late",
       "LAC's memory queue starts over at its front one step late: not when pointer + n equals its size exactly",
       [Edit("src/spmlkit/losses/consistency.py", "end = n if pointer + n >= size else pointer + n",
             "end = n if pointer + n > size else pointer + n")],
       ["tests/test_lac.py::test_queue_starts_over_when_pointer_plus_n_is_its_size_exactly"],
       because="did not start over"),
)
