"""What a person sees around the numbers: progress within an epoch, named epoch columns, the
settings at the start, --dry-run, failures that leave nothing behind, the resume hints, a run's
full record, help that answers (issue 23)."""

import io
import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml
from rich.console import Console

from spmlkit.output_dir import RUN, claim_output_dir
from spmlkit.cli import build_parser, main
from spmlkit.training import provenance
from spmlkit.training.loggers import EpochLines, EpochProgress

pytestmark = pytest.mark.usefixtures("one_thread")

QUICK = ["--dataset", "yeast", "--subset", "300", "--epochs", "3", "--device", "cpu"]


# ----------------------------------------------------------------------------- progress
def _plain(clock_values):
    screen = Console(file=io.StringIO(), width=200)
    it = iter(clock_values)
    return screen, EpochProgress(screen, epochs=20, live=False, clock=lambda: next(it))


def test_a_log_gets_a_plain_progress_line_every_30_seconds():
    # clock: start at 0; steps end at 10, 20, 31, 45, 62 s
    screen, progress = _plain([0.0, 10.0, 20.0, 31.0, 45.0, 62.0])
    progress.start(3, 1000)
    for _ in range(5):
        progress.advance(100)
    assert screen.file.getvalue().splitlines() == [
        # 300 of 1000 images in 31 s: 9.7 img/s, 700 left: 72 s
        "  epoch 3/20: 300/1000 images (30%), 10 img/s, 1 min 12 s left",
        # 500 in 62 s: 8.06 img/s, 500 left: 62 s
        "  epoch 3/20: 500/1000 images (50%), 8 img/s, 1 min 02 s left",
    ]


def test_an_epoch_shorter_than_30_seconds_writes_no_progress_line():
    screen, progress = _plain([0.0, 5.0, 29.9])
    progress.start(1, 200)
    progress.advance(100)
    progress.advance(100)
    progress.finish()
    assert screen.file.getvalue() == ""


def test_a_terminal_gets_a_bar_with_images_per_second_and_time_left():
    screen = Console(file=io.StringIO(), force_terminal=True, width=120)
    progress = EpochProgress(screen, epochs=5)
    assert progress.live
    progress.start(2, 640)
    progress.advance(64)
    progress._bar.refresh()
    shown = screen.file.getvalue()
    progress.finish()
    assert "epoch 2/5" in shown and "64/640" in shown and "img/s" in shown and "left" in shown
    assert progress._bar is None


def test_epoch_lines_name_their_columns():
    lines = EpochLines()
    record = {"epoch": 7, "train_loss": -0.0273, "val_map": 0.75861, "pseudo_negatives": 12.0, "corrections": 3.0,
              "images_per_second": 108.4, "epoch_seconds": 2.3149}
    assert lines.header() == "epoch  train loss  val mAP (%)  pseudo-labels   img/s  seconds"
    assert lines.row(record) == "    7     -0.0273        75.86             15     108     2.31"
    assert len(lines.row(record)) == len(lines.header())


def test_train_prints_its_settings_then_one_named_row_per_epoch(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", *QUICK, "--method", "an", "--out", str(out)]) == 0
    printed = capsys.readouterr().out.splitlines()
    history = json.loads((out / "result.json").read_text())["history"]
    assert printed[0].startswith("spmlkit train: an on yeast (single_positive), 3 epochs, batch 64, lr 0.003, on cpu ->")
    assert "  data: dataset=yeast subset=300 observation=single_positive val_frac=0.2 val_variant=clean " \
           "partition=official standardize=True" in printed
    assert "  schedule: epochs=3 patience=none min_delta=0 stop_drop=none epoch_metrics=False" in printed
    assert not any("backbone" in line for line in printed)  # a feature run's summary has no image settings
    start = printed.index(EpochLines().header())
    assert printed[start + 1 : start + 4] == [EpochLines().row(h) for h in history]


def test_long_paths_are_never_broken_by_the_console(tmp_path, capsys):
    out = tmp_path / ("a-rather-long-folder-name-" * 8) / "run"
    assert main(["train", *QUICK, "--method", "an", "--out", str(out), "--quiet"]) == 0
    lines = capsys.readouterr().out.splitlines()
    # the path is longer than the console's 160 columns: it stands whole on a line of its own, the
    # line before it broken between words
    assert str(out) in lines and any(line.endswith("; outputs in") for line in lines)


# ----------------------------------------------------------------------------- --dry-run
def test_train_dry_run_prints_the_resolved_config_and_writes_nothing(tmp_path, monkeypatch, capsys):
    from spmlkit.experiments.presets import resolve_config

    assert main(["train", "--method", "em", "--lr", "0.01", "--dry-run"]) == 0
    shown = yaml.safe_load(capsys.readouterr().out)
    expected = resolve_config({"method": "em", "lr": 0.01})
    expected.output.out = "runs/yeast/em/seed0"
    assert shown == expected.to_dict("features")
    assert "backbone" not in shown["model"] and shown["optimisation"]["lr"] == 0.01
    assert list(Path.cwd().iterdir()) == []  # the working folder (a fresh one per test) stays empty


def test_sweep_dry_run_counts_a_large_grid_and_lists_its_first_runs(tmp_path, capsys):
    grid = tmp_path / "sweep" / "big.yaml"
    grid.parent.mkdir()
    grid.write_text("methods: [an, em]\nseeds: [0, 1, 2, 3, 4]\nlrs: [0.001, 0.003, 0.01]\n"
                    "hparams: {em: {alpha: [0.1, 0.2, 0.3]}}\n")
    assert main(["sweep", str(grid), "--dry-run"]) == 0
    printed = capsys.readouterr().out
    # an: 1 point, em: 3 alphas -> 4 points x 3 lrs x 5 seeds = 60 runs
    assert "sweep big: 60 runs = 1 dataset(s) x 1 observation(s) x 4 method/hyperparameter point(s) x 3 lr(s) x " \
           "1 batch size(s) x 5 seed(s)" in printed
    assert "the first 20 of 60 runs" in printed and "... and 40 more runs" in printed
    assert list(grid.parent.iterdir()) == [grid] and list(Path.cwd().iterdir()) == []  # no store, no run folder


# ----------------------------------------------------------------------------- failures
def test_a_run_failing_before_its_first_checkpoint_leaves_no_folder(tmp_path, monkeypatch, capsys):
    from spmlkit.training.run_data import RunData

    def offline(self, config):
        raise ValueError("the weights of torchvision:resnet50 cannot be downloaded (offline)")

    out = tmp_path / "mine" / "runs" / "yeast" / "an"
    with monkeypatch.context() as m:
        m.setattr(RunData, "build_model", offline)
        assert main(["train", *QUICK, "--method", "an", "--out", str(out)]) == 2
    assert "cannot be downloaded" in capsys.readouterr().err
    assert not (tmp_path / "mine").exists()  # the folders it made are gone too
    assert main(["train", *QUICK, "--method", "an", "--out", str(out), "--quiet"]) == 0  # no --overwrite needed


def test_a_folder_holding_only_a_config_is_replaced_without_overwrite(tmp_path):
    out = tmp_path / "run"
    claim_output_dir(out, RUN, option="--out")  # a process killed before its first epoch: the folder's marker
    (out / "config.yaml").write_text("data: {dataset: yeast}\n")  # and its config.yaml, nothing else
    assert main(["train", *QUICK, "--method", "an", "--out", str(out), "--quiet"]) == 0
    assert (out / "result.json").is_file()


def test_each_refusal_names_the_command_that_gets_out(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", *QUICK, "--method", "an", "--out", str(out), "--stop-after", "1", "--quiet"]) == 0
    assert f"continue with: spmlkit train --resume --out {out}" in capsys.readouterr().out
    assert main(["train", *QUICK, "--method", "an", "--out", str(out)]) == 2
    assert f"holds an unfinished run (1 epoch done); continue it with `spmlkit train --resume --out {out}`" \
           in capsys.readouterr().err
    assert main(["train", "--resume", "--out", str(out), "--quiet"]) == 0
    assert main(["train", *QUICK, "--method", "an", "--out", str(out)]) == 2
    assert "already holds a finished run; to replace it, run the same command with --overwrite" \
           in capsys.readouterr().err
    assert main(["train", "--resume", "--out", str(tmp_path / "nothing")]) == 2
    assert "run the same command without --resume to start it" in capsys.readouterr().err


def test_ctrl_c_says_how_to_resume_and_the_resumed_run_says_from_where(tmp_path, monkeypatch, capsys):
    from spmlkit.training import loop

    real = loop.end_of_epoch

    def interrupted_in_epoch_2(group, runs, epoch, *args):
        if epoch == 2:
            raise KeyboardInterrupt
        return real(group, runs, epoch, *args)

    out = tmp_path / "run"
    with monkeypatch.context() as m:
        m.setattr(loop, "end_of_epoch", interrupted_in_epoch_2)
        assert main(["train", *QUICK, "--method", "an", "--out", str(out)]) == 130
    assert (f"spmlkit train: interrupted after epoch 1 of 3; continue with: spmlkit train --resume --out {out}"
            in capsys.readouterr().err)
    assert main(["train", "--resume", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"resuming {out} after epoch 1 of 3" in printed and "resumed after epoch 1; best epoch" in printed


def test_ctrl_c_in_the_first_epoch_keeps_nothing(tmp_path, monkeypatch, capsys):
    from spmlkit.training import loop

    def interrupted(*args):
        raise KeyboardInterrupt

    out = tmp_path / "run"
    monkeypatch.setattr(loop, "end_of_epoch", interrupted)
    assert main(["train", *QUICK, "--method", "an", "--out", str(out)]) == 130
    assert "interrupted before its first epoch was saved; nothing was kept" in capsys.readouterr().err
    assert not out.exists()


# ----------------------------------------------------------------------------- the record
def test_result_json_says_where_its_numbers_came_from(tmp_path, monkeypatch):
    import platform
    import sys

    import torch

    import spmlkit

    repo = tmp_path / "project"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "x"], check=True)
    sha = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    monkeypatch.chdir(repo)
    monkeypatch.setattr(sys, "argv", ["/somewhere/bin/spmlkit", "train", "--out", "my run"])
    provenance.process_git_commit.cache_clear()
    try:
        assert main(["train", *QUICK, "--method", "an", "--out", "run", "--quiet"]) == 0
        record = json.loads((repo / "run" / "result.json").read_text())
        assert record["git_commit"] == sha
        assert record["command"] == "spmlkit train --out 'my run'"
        assert (record["spmlkit_version"], record["torch_version"], record["python_version"], record["device"]) == (
            spmlkit.__version__, torch.__version__, platform.python_version(), "cpu")
        assert record["started_at"] <= record["finished_at"] and record["finished_at"].endswith("+00:00")
        # outside a repository the commit is left out, silently
        monkeypatch.chdir(tmp_path)
        provenance.process_git_commit.cache_clear()
        assert main(["train", *QUICK, "--method", "an", "--out", "run2", "--quiet"]) == 0
        assert "git_commit" not in json.loads((tmp_path / "run2" / "result.json").read_text())
    finally:
        provenance.process_git_commit.cache_clear()


def test_config_yaml_holds_only_the_settings_of_the_runs_kind(tmp_path):
    from spmlkit.training.config import RunConfig, config_from_dict

    assert main(["train", *QUICK, "--method", "an", "--out", str(tmp_path / "f"), "--quiet"]) == 0
    saved = yaml.safe_load((tmp_path / "f" / "config.yaml").read_text())
    assert set(saved["data"]) == {"dataset", "subset", "observation", "val_frac", "val_variant", "partition",
                                  "standardize"}  # the tabular protocol's partition applies to feature runs
    assert set(saved["model"]) == {"head", "hidden", "dropout", "bottleneck", "bottleneck_samples"}  # MIME's too
    assert "num_workers" not in saved["machine"] and "linear_init_epochs" not in saved["schedule"]
    assert config_from_dict(saved).to_dict() == config_from_dict(saved, base=RunConfig()).to_dict()
    images = RunConfig(dataset="digits-mosaic").to_dict("images")
    assert "backbone" in images["model"] and "head" not in images["model"] and "standardize" not in images["data"]
    assert "partition" not in images["data"]


def test_sweep_records_carry_versions_command_and_device(monkeypatch):
    import platform
    import sys

    import torch

    import spmlkit

    from spmlkit.experiments.sweep import SweepSpec, expand
    from spmlkit.experiments.sweep.execute import execute_run

    run = expand(SweepSpec(name="t", settings={"epochs": 1, "subset": 200}))[0]
    # the command as the installed script saw it, with an argument a shell must quote
    monkeypatch.setattr(sys, "argv", ["/opt/env/bin/spmlkit", "sweep", "my grid.yaml", "--jobs", "2"])
    record = execute_run(run)
    assert record["status"] == "ok", record["error"]
    assert (record["torch_version"], record["python_version"], record["device"]) == (
        torch.__version__, platform.python_version(), "cpu")
    assert record["spmlkit_version"] == spmlkit.__version__
    assert record["command"] == "spmlkit sweep 'my grid.yaml' --jobs 2", record["command"]
    assert record["started_at"] <= record["finished_at"]


# ----------------------------------------------------------------------------- help
def _subparser(name):
    parser = build_parser()
    return next(a for a in parser._subparsers._group_actions if a.dest == "command").choices[name]


def _options(name):
    return {o: a for a in _subparser(name)._actions for o in a.option_strings if o not in ("-h", "--help")}


def _commands():
    return sorted(next(a for a in build_parser()._subparsers._group_actions if a.dest == "command").choices)


@pytest.mark.parametrize("command", _commands())
def test_every_option_says_what_it_does(command):
    """Every option of every command has help in words: at least two words of two letters or
    more, not empty and not a placeholder such as "?" or "TODO"."""
    unsaid = sorted(o for o, a in _options(command).items()
                    if len(re.findall(r"[A-Za-z]{2,}", a.help or "")) < 2 or "TODO" in (a.help or ""))
    assert not unsaid, f"spmlkit {command}: options whose help says nothing: {unsaid}"


def test_every_train_option_that_takes_a_value_names_its_default():
    from spmlkit.training.defaults import FEATURE_DEFAULTS

    options = _options("train")
    takes_value = {o: a for o, a in options.items() if a.nargs != 0 and o != "--debug"}
    # "default: VALUE" names it ("default: none" included); "no default" or a bare "default" does not
    no_default = sorted(o for o, a in takes_value.items() if not re.search(r"\bdefault: \S", a.help or ""))
    assert not no_default, f"spmlkit train options whose help names no default: {no_default}"
    assert f"default: {FEATURE_DEFAULTS['lr']:g} on feature datasets, 1e-05 on images" in options["--lr"].help
    assert "default: 20 on feature datasets, 10 on images" in options["--epochs"].help
    assert "default: 64 on feature datasets, 8 on images" in options["--batch-size"].help
    assert options["--quiet"].help and "default: yeast" in options["--dataset"].help


def test_extract_lists_only_its_own_options():
    options = set(_options("extract"))
    assert {"--dataset", "--root", "--prepared", "--backbone", "--no-pretrained", "--image-size", "--device",
            "--num-workers", "--batch-size", "--features-out", "--dtype"} <= options
    assert not options & {"--lr", "--epochs", "--method", "--hparam", "--patience", "--out", "--resume", "--amp",
                          "--optimizer", "--features"}


def test_debug_works_after_the_sub_command(capsys):
    assert main(["train", "--method", "nope", "--epochs", "1", "--dry-run"]) == 2
    assert "unknown method 'nope'" in capsys.readouterr().err
    for argv in (["--debug", "train", "--method", "nope", "--dry-run"], ["train", "--method", "nope", "--dry-run",
                                                                        "--debug"]):
        with pytest.raises(Exception, match="unknown method 'nope'"):
            main(argv)


def test_train_and_benchmark_default_to_the_same_dataset():
    from spmlkit.cli.train import resolve_from_args
    from spmlkit.training.config import DataConfig

    train_args = build_parser().parse_args(["train"])
    bench_args = build_parser().parse_args(["benchmark"])
    assert bench_args.datasets is None  # no --dataset: the benchmark takes train's default, DataConfig.dataset
    assert resolve_from_args(train_args).data.dataset == DataConfig.dataset == "yeast"
