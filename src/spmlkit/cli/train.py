"""``spmlkit train`` (and the options ``extract`` shares with it): one run through :func:`~spmlkit.training.train`."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from ._common import console, hparam, plugin_refs, print_whole_words

__all__ = ["add_run_options", "add_parser", "resolve_from_args", "run"]

#: command-line option -> RunConfig field, for options that map one to one
_OPTIONS = {
    "dataset": "dataset", "root": "root", "prepared": "prepared", "variant": "dataset_variant", "method": "method",
    "lr": "lr", "batch_size": "batch_size", "epochs": "epochs", "seed": "seed", "observation": "observation",
    "val": "val_variant", "val_frac": "val_frac", "patience": "patience", "stop_drop": "stop_drop",
    "backbone": "backbone", "image_size": "image_size", "device": "device", "amp": "amp",
    "num_workers": "num_workers", "optimizer": "optimizer", "head_lr_mult": "head_lr_mult",
    "linear_init_epochs": "linear_init_epochs", "weight_decay": "weight_decay", "out": "out",
    "pretrained": "pretrained", "lgconv": "lgconv", "head": "head", "subset": "subset", "features": "dataset",
    "batch_statistics": "batch_statistics", "decode": "decode", "compile": "compile", "loggers": "loggers",
    "deterministic": "deterministic", "image_head": "image_head", "init_weights": "init_weights",
    "bottleneck": "bottleneck",
}


def _default(setting: str) -> str:
    """A setting's default as help text shows it: ``RunConfig``'s field default."""
    from ..training.config import default_setting

    value = default_setting(setting)
    return "none" if value is None else f"{value:g}" if isinstance(value, float) else str(value)


def _by_kind(setting: str) -> str:
    """The default of a setting that feature runs and image runs set apart (lr, epochs, batch size)."""
    from ..training.defaults import FEATURE_DEFAULTS

    feature = FEATURE_DEFAULTS[setting]
    return (f"default: {feature:g} on feature datasets, {_default(setting)} on images, or the preset's "
            "(`spmlkit presets`)")


#: what every `train` and `extract` default stands under: the layers of resolve_config
_LAYERS = ("Settings resolve in this order, later winning: the defaults shown here, the dataset's own defaults, the "
           "(method, dataset) preset when there is one, --config FILE, then the options given here.")


def add_run_options(p: argparse.ArgumentParser, *, extract: bool = False) -> None:
    """The options of `train`; `extract` (``extract=True``) takes only those that choose its data,
    its backbone and its machine. None means "not given": presets and config files decide."""
    data = p.add_argument_group("data")
    data.add_argument("--preset", help="a paper's settings, e.g. em_apl/voc2012 or em_apl/yeast (`spmlkit presets` "
                                       "lists them; default: the (method, dataset) preset when one exists)")
    data.add_argument("--config", metavar="FILE",
                      help="YAML/TOML/JSON file of settings, flat or in sections (overridden by options given here; "
                           "default: none)")
    data.add_argument("--dataset", help="yeast | digits-mosaic | voc2012 | voc2007 | coco2014 | nuswide | cub, a MULAN "
                                        "set (`spmlkit datasets`), or a feature folder written by `spmlkit extract` "
                                        f"or `spmlkit prepare table` (default: {_default('dataset')})")
    if not extract:
        data.add_argument("--features", metavar="DIR",
                          help="a feature folder written by `spmlkit extract` or `spmlkit prepare table` (the same as "
                               "--dataset DIR; default: none)")
    data.add_argument("--root", metavar="DIR", help="image datasets: the dataset's folder as downloaded and unpacked "
                                                   "(default: none)")
    data.add_argument("--prepared", metavar="DIR",
                      help="a folder written by `spmlkit prepare`, enough on its own: it names its dataset (default: "
                           "<root>/spmlkit-prepared/<dataset>)")
    data.add_argument("--variant", help="dataset variant, e.g. coco2014: pu_mlc (PU-MLC's image list; default: none)")
    data.add_argument("--subset", type=int, metavar="N",
                      help="only the first N rows of the official train list, for quick checks (default: all)")
    model = p.add_argument_group("network (image datasets)")
    model.add_argument("--backbone", help="torchvision:<name> | timm:<name> | small:cnn "
                                          f"(default: {_default('backbone')})")
    model.add_argument("--no-pretrained", dest="pretrained", action="store_false", default=None,
                       help="start from random weights instead of ImageNet's (nothing is downloaded; "
                            "default: pretrained)")
    model.add_argument("--lgconv", action="store_true", default=None,
                       help="add PU-MLC's local-global convolutions (default: off)")
    model.add_argument("--image-head", choices=("linear", "label_query"),
                       help="the classifier: linear (pooling + one linear layer, the SPML papers') or label_query "
                            "(the LAC and MIME code's label-query transformer; the mime presets use it) (default: the "
                            "method's own: label_query for plc and lac, linear for the others)")
    model.add_argument("--image-size", type=int, metavar="PIXELS",
                       help=f"images are resized to PIXELS x PIXELS (default: {_default('image_size')})")
    machine = p.add_argument_group("machine")
    machine.add_argument("--device", help=f"auto | cpu | cuda | cuda:N (default: {_default('device')}: a GPU when "
                                          "there is one for image runs, the CPU for feature runs)")
    machine.add_argument("--num-workers", type=int, metavar="N",
                         help="image loader processes (default: automatic, from the CPUs available; 0: in the main "
                              "process); results do not depend on it")
    if extract:
        machine.add_argument("--batch-size", type=int, metavar="N",
                             help="images per forward pass (default: the dataset's batch size, at least 64)")
        machine.add_argument("--seed", type=int,
                             help=f"seeds a backbone's random weights with --no-pretrained (default: {_default('seed')})")
        return
    method = p.add_argument_group("method")
    method.add_argument("--method", help=f"the method to train (`spmlkit methods` lists them; default: {_default('method')}, "
                                         "assume negative)")
    method.add_argument("--hparam", type=hparam, action="append", metavar="NAME=VALUE",
                        help="a method hyperparameter, repeatable, e.g. --hparam alpha=0.2 (default: the method's, or "
                             "the preset's; `spmlkit methods` lists them)")
    method.add_argument("--observation", help="which training labels are seen: single_positive | pos=K,neg=M | ratio=R "
                                              "| full | given (the data's own labels) (default: the data set's own: "
                                              f"given for your own data, else {_default('observation')})")
    method.add_argument("--val", choices=("clean", "observed"),
                        help=f"labels the epoch is selected on: the validation rows' clean or observed labels "
                             f"(default: {_default('val_variant')}; observed for your own data)")
    method.add_argument("--val-frac", type=float, metavar="FRACTION",
                        help=f"share of the train list held out for validation, 0 for none (default: "
                             f"{_default('val_frac')})")
    method.add_argument("--head", choices=("linear", "mlp"),
                        help=f"feature datasets: the network on the features (default: {_default('head')})")
    method.add_argument("--bottleneck", type=int, metavar="WIDTH",
                        help="width of MIME's Gaussian bottleneck before the classifier, 0 for none (default: the "
                             "method's own: 256 for mime, none for the others)")
    method.add_argument("--batch-statistics", choices=("global", "process"),
                        help="under torchrun: loss statistics over the whole global batch or each process's slice "
                             "(default: the method's; PU-MLC: process)")
    opt = p.add_argument_group("optimisation and schedule")
    opt.add_argument("--lr", type=float, help=f"learning rate ({_by_kind('lr')})")
    opt.add_argument("--batch-size", type=int, metavar="N", help=f"training examples per step ({_by_kind('batch_size')})")
    opt.add_argument("--epochs", type=int, metavar="N", help=f"passes over the training rows ({_by_kind('epochs')})")
    opt.add_argument("--seed", type=int, help="seeds the initial weights and the batch order; every seed sees the same "
                                              f"split and observed labels (default: {_default('seed')})")
    opt.add_argument("--patience", type=int, metavar="N",
                     help="stop after N epochs without a validation gain, 0 for EM's rule (default: train every epoch)")
    opt.add_argument("--stop-drop", type=float, metavar="DROP",
                     help="stop when validation mAP falls this far below the best, e.g. 0.02 as GR (default: never)")
    opt.add_argument("--optimizer", choices=("adam", "adamw", "adamax", "sgd"),
                     help=f"the optimiser (default: {_default('optimizer')}; adamw is the LAC code's, adamax MIME's)")
    opt.add_argument("--init-weights", metavar="CHECKPOINT",
                     help="start from an earlier run's weights (its best.pt), e.g. lac from a plc run (default: none)")
    opt.add_argument("--head-lr-mult", type=float, metavar="FACTOR",
                     help=f"image runs: the head's learning rate over the backbone's (default: {_default('head_lr_mult')})")
    opt.add_argument("--weight-decay", type=float, help=f"L2 weight decay (default: {_default('weight_decay')})")
    opt.add_argument("--linear-init-epochs", type=int, metavar="N",
                     help="LinearInit: N head-only epochs on frozen features first (default: "
                          f"{_default('linear_init_epochs')})")
    machine.add_argument("--amp", choices=("auto", "none", "bf16", "fp16"),
                         help="mixed precision of image runs (default: auto: bf16 on a GPU, none on the CPU)")
    machine.add_argument("--decode", choices=("cpu", "gpu"),
                         help="where training JPEGs are decoded: cpu (PIL in the loader processes) or gpu "
                              "(nvJPEG, resized on the GPU; CUDA only) (default: cpu)")
    machine.add_argument("--compile", action="store_true", default=None,
                         help="torch.compile the model: faster steps after a compilation of a minute or more "
                              "(default: off)")
    machine.add_argument("--deterministic", action="store_true", default=None,
                         help="CUDA: deterministic algorithms and no TF32, so two runs with one seed are bit-identical "
                              "(slower; default: off); CPU runs always are")
    p.add_argument_group("output").add_argument(
        "--out", metavar="DIR", help="the run folder (default: runs/<dataset>/<method>/seed<seed>)")


def add_parser(sub: Any) -> None:
    p = sub.add_parser("train", help="train one method on a feature dataset (yeast, an `extract` folder) or images",
                       description="Train one method and evaluate its selected epoch on the test list. " + _LAYERS,
                       epilog="Examples: spmlkit train (Yeast, the default) | spmlkit train --method em_apl "
                              "--hparam alpha=0.2 | spmlkit train --preset em_apl/voc2012 --root DIR | "
                              "spmlkit train --dry-run")
    add_run_options(p)
    this = p.add_argument_group("this run")
    this.add_argument("--resume", action="store_true",
                     help="continue the run in --out from its last finished epoch, with its own saved settings")
    this.add_argument("--overwrite", action="store_true", help="replace a run already in --out (default: refuse)")
    this.add_argument("--stop-after", type=int, metavar="N",
                     help="stop this invocation after N epochs; --resume continues it (default: train to the end)")
    this.add_argument("--logger", dest="loggers", action="append", metavar="NAME",
                     help="also log every epoch's metrics to tensorboard | mlflow | wandb | a registered logger; "
                          "repeatable (default: metrics.csv only)")
    this.add_argument("--dry-run", action="store_true",
                     help="print the resolved settings (as config.yaml would hold them) and exit: nothing is "
                          "trained or written")
    this.add_argument("--quiet", action="store_true",
                     help="no settings summary, progress or epoch lines: the table of epochs and the result at the "
                          "end only (default: all of them)")
    p.set_defaults(func=run)


def resolve_from_args(args: argparse.Namespace):
    """Dataset defaults < preset < config file < explicit command-line options < the run being
    resumed (``--resume``: its saved ``config.yaml``, so the run continues with its own settings)."""
    from ..experiments.presets import resolve_config
    from ..training.run_dir import RunDirectory
    from ..training.run_paths import typed_paths

    values = {field: getattr(args, opt) for opt, field in _OPTIONS.items() if getattr(args, opt, None) is not None}
    if plugin_refs(args):  # kept in the run's settings, so that --resume loads them again
        values["plugins"] = plugin_refs(args)
    values = typed_paths(values)  # ./data/x/ -> data/x: as a resumed run's paths read back
    if getattr(args, "hparam", None):
        values["hparams"] = dict(args.hparam)
    file_values = RunDirectory.config_file_settings(args.config) if args.config else {}

    def resolve(resume_values: dict | None = None):
        config = resolve_config(values, preset=args.preset, file_values=file_values,
                                file_name=f"config file {args.config}", resume_values=resume_values)
        if config.output.out is None:
            config.output.out = str(Path("runs") / _folder_name(config.data.dataset, config.data.prepared)
                                    / config.method.name / f"seed{config.optimisation.seed}")
        return config

    config = resolve()
    saved = Path(config.output.out) / "config.yaml"
    if getattr(args, "resume", False) and saved.is_file():
        config = resolve(RunDirectory(saved.parent).saved_settings())  # its paths: relative to the run folder
    return config


def _check_decode(config: Any) -> None:
    """``--decode gpu`` needs CUDA: refused here, before a run folder is made, with what to use instead."""
    if config.machine.decode != "gpu":
        return
    import torch

    if config.machine.device == "cpu" or not torch.cuda.is_available():
        where = "--device cpu was asked for" if config.machine.device == "cpu" else "this machine has no CUDA device"
        raise ValueError(f"--decode gpu decodes JPEGs on a CUDA GPU, but {where}; use --decode cpu (the default)")


def _cost(res: Any) -> str:
    """What a run took: its seconds and its peak memory, e.g. "41.2 s, peak memory 1.2 GB (GPU)".

    The GPU's peak is the one that limits a CUDA run (batch size, image size), so it is the one
    shown when there is one; otherwise the host's, which is the process's peak resident set
    (docs/architecture.md, "Peak memory"). A run that measured neither shows its time alone."""
    text = f"{res.seconds:.1f} s"
    if res.peak_gpu_memory_bytes is not None:
        return f"{text}, peak memory {_bytes(res.peak_gpu_memory_bytes)} (GPU)"
    if res.peak_host_memory_bytes is not None:
        return f"{text}, peak memory {_bytes(res.peak_host_memory_bytes)} (host process)"
    return text


def _bytes(n: int) -> str:
    """Decimal units, one decimal from a gigabyte on: 734 MB, 1.2 GB."""
    return f"{n / 1e9:.1f} GB" if n >= 1e9 else f"{n / 1e6:.0f} MB"


def _folder_name(dataset: str, prepared: str | None = None) -> str:
    """The default run folder's data-set part: a named set's name, a folder's own name as it resolves
    (``--dataset ..`` is the parent's name, never ``..``), as a plain file name (spmlkit/file_names.py).
    A user's data, whose data set is its form (``folder``, ``csv``), is named after the prepared
    folder it is read from: ``--prepared prepared/photos`` trains into ``runs/photos/...``, so that
    two data sets of one form do not share ``runs/folder/...``."""
    from ..data.registry import DATASETS, resolve_dataset
    from ..file_names import file_stem

    if prepared and resolve_dataset(dataset).form == "user-form":
        dataset = prepared
    return file_stem(Path(dataset).name if dataset in DATASETS else Path(dataset).expanduser().resolve().name or "root")


#: how the headline names a method's own fixed threshold
WHOSE_THRESHOLD = "the method's"


def f1_summary(test_metrics: dict[str, Any], method_threshold: float) -> str:
    """The F1 part of the headline, every F1 named by its threshold (docs/protocol.md, "Which
    threshold decides a label").

    First the threshold the run selected on validation (what `predict` and `export` use), then
    0.5; the method's own fixed threshold (EM's 0.75) only when no validated one exists: a weak
    model's F1 at 0.75 is often 0 % and says nothing about its ranking. A threshold at which every
    test label is predicted positive, or none is, is named degenerate: predicting every label
    positive scores a high F1 on data where most labels are (72 % on a set of photos), and says
    nothing about the model.
    """
    def pair(name: str) -> str | None:
        o, c = test_metrics.get(f"OF1@{name}"), test_metrics.get(f"CF1@{name}")
        return None if o is None or c is None else f"{100 * o:.2f}% / {100 * c:.2f}%"

    def said(name: str, *why: str) -> str:
        rate = test_metrics.get(f"predicted_positive@{name}")
        degenerate = {1.0: "degenerate: it predicts every test label positive",
                      0.0: "degenerate: it predicts no test label positive"}.get(rate)
        words = [*why, *([degenerate] if degenerate else [])]
        return f" ({'; '.join(words)})" if words else ""

    parts = []
    t_val = test_metrics.get("threshold_val_global")
    validated = t_val is not None and pair("val_global") is not None
    if validated:
        parts.append(f"{pair('val_global')} at {t_val:g}{said('val_global', 'selected on validation')}")
    if pair("0.5"):
        parts.append(f"{pair('0.5')} at 0.5{said('0.5')}")
    t = float(method_threshold)
    if not validated and t != 0.5 and pair(f"{t:g}"):
        parts.append(f"{pair(f'{t:g}')} at {t:g}{said(f'{t:g}', WHOSE_THRESHOLD)}")
    return f", F1 overall / per-class {', '.join(parts)}" if parts else ""


def _kind(config: Any) -> str:
    from ..training.run_data import is_feature_run

    return "features" if is_feature_run(config) else "images"


def settings_summary(config: Any, kind: str) -> list[str]:
    """The resolved settings that apply to this kind of run, one line per section: what a person
    checks before a long run starts (the whole of it is ``config.yaml``, or ``--dry-run``)."""

    def shown(value: Any) -> str:
        if isinstance(value, dict):
            return "{" + ", ".join(f"{k}={shown(v)}" for k, v in value.items()) + "}"
        return "none" if value is None else f"{value:g}" if isinstance(value, float) else str(value)

    return [f"  {section}: " + " ".join(f"{k}={shown(v)}" for k, v in values.items())
            for section, values in config.to_dict(kind).items() if section != "output"]


def resume_command(out: str | Path) -> str:
    """The one command that continues the run in ``out`` (its saved settings need no other option)."""
    import shlex

    return f"spmlkit train --resume --out {shlex.quote(str(out))}"


def run(args: argparse.Namespace) -> int:
    import sys

    import yaml
    from rich.table import Table

    from ..errors import user_input
    from ..training import train
    from ..training.loggers import EpochLines, EpochProgress
    from ..training.run_dir import RunDirectory

    out = console()
    out.quiet = os.environ.get("RANK", "0") != "0"  # under torchrun, one process reports
    from ..training.device import resolve_device
    from ..training.plan import requested_device

    with user_input():
        config = resolve_from_args(args)
        _check_decode(config)
        kind = _kind(config)
        device = resolve_device(requested_device(config, kind))  # what device=auto comes to
    if args.dry_run:  # valid YAML as a whole: the settings, and what was (not) done as a comment
        out.print(yaml.safe_dump(config.to_dict(kind), sort_keys=False).rstrip(), soft_wrap=True, markup=False,
                  highlight=False)
        out.print(f"# dry run: nothing trained or written (the run folder would be {config.output.out})",
                  soft_wrap=True, markup=False, highlight=False)
        return 0
    epochs = config.schedule.epochs
    print_whole_words(out, f"[bold]spmlkit train[/bold]: {config.method.name} on {config.data.dataset} "
                           f"({config.data.observation}), {epochs} epoch{'s' if epochs != 1 else ''}, batch {config.optimisation.batch_size}, "
                           f"lr {config.optimisation.lr:g}, on {device} -> {config.output.out}")
    if not args.quiet:
        for line in settings_summary(config, kind):
            print_whole_words(out, line, indent="      ", markup=False, highlight=False)
    if args.resume:
        done = RunDirectory(config.output.out).finished_epochs()
        print_whole_words(out, f"resuming {config.output.out} after epoch {done} of {epochs}")
    table = Table(title=f"{config.method.name} on {config.data.dataset}")
    for col in ("epoch", "train loss", "val mAP (%)", "pseudo-labels", "images/s", "seconds"):
        table.add_column(col, justify="right")
    lines = EpochLines()
    progress = None if args.quiet else EpochProgress(out, epochs=epochs)
    finished: list[int] = []

    def on_epoch(rec: dict[str, float]) -> None:
        finished.append(int(rec["epoch"]))
        table.add_row(*lines.cells(rec))
        if progress is not None:
            progress.finish()
            if len(finished) == 1:
                out.print(lines.header(), highlight=False)
            out.print(lines.row(rec), highlight=False)

    try:
        res = train(config, resume=args.resume, overwrite=args.overwrite, stop_after=args.stop_after,
                    on_epoch=on_epoch, on_epoch_start=progress and progress.start,
                    on_step=progress and progress.advance)
    except KeyboardInterrupt:
        if progress is not None:
            progress.finish()
        folder = RunDirectory(config.output.out)
        if folder.last.is_file():
            print(f"spmlkit train: interrupted after epoch {folder.finished_epochs()} of {epochs}; continue with: "
                  f"{resume_command(config.output.out)}", file=sys.stderr)
        else:
            print("spmlkit train: interrupted before its first epoch was saved; nothing was kept, run the same "
                  "command again to start", file=sys.stderr)
        return 130
    if progress is None:
        out.print(table)
    resumed = f"resumed after epoch {res.resumed_from}; " if res.resumed_from else ""
    if not res.finished:
        last = res.history[-1]["epoch"] if res.history else 0
        print_whole_words(out, f"stopped after epoch {last} as asked; continue with: {resume_command(res.out)}")
        return 0
    # a mAP on observed labels says so (docs/protocol.md, "Your own data"): it is not one on full labels
    val = f"val mAP {100 * res.val_map:.2f}%" + (" (observed labels)" if config.data.val_variant == "observed" else "")
    if res.test_map == res.test_map:  # a labelled test set: mAP and F1, each F1 named by its threshold
        from ..methods import get_method

        test = f"test mAP {100 * res.test_map:.2f}%" + f1_summary(res.test_metrics,
                                                                  get_method(config.method.name).threshold)
        print_whole_words(out, f"{resumed}best epoch {res.best_epoch}: {val}, {test}  ({_cost(res)}); outputs in "
                               f"{res.out}")
        return 0
    # users' data without a labelled test set: say plainly what the numbers above are, and are not
    if config.data.val_frac == 0:
        selected = "no validation split, so the last epoch was kept"
    elif config.data.val_variant == "observed":
        selected = "model selected on the observed labels of the validation split"
    else:
        selected = "model selected on the clean labels of the validation split"
    print_whole_words(out, f"{resumed}best epoch {res.best_epoch}: {val}  ({_cost(res)}); outputs in {res.out}")
    out.print(f"no labelled test set: no clean metric exists; {selected}")
    return 0
