"""``spmlkit train`` (and the options ``extract`` shares with it): one run through :func:`~spmlkit.training.train`."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from ._common import console, hparam

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
    "deterministic": "deterministic",
}


def add_run_options(p: argparse.ArgumentParser) -> None:
    """Options shared by `train` and `extract`; None means "not given" (presets/config decide)."""
    p.add_argument("--preset", help="a preset, e.g. em_apl/voc2012 or em_apl/yeast (see `spmlkit presets`)")
    p.add_argument("--config", help="YAML/TOML/JSON file of settings (overridden by options given here)")
    p.add_argument("--dataset", help="yeast | digits-mosaic | voc2012 | voc2007 | coco2014 | nuswide | cub")
    p.add_argument("--features", help="a feature folder written by `spmlkit extract` (same as --dataset DIR)")
    p.add_argument("--root", help="dataset root as downloaded (image datasets)")
    p.add_argument("--prepared", help="a folder written by `spmlkit prepare` (enough on its own)")
    p.add_argument("--variant", help="dataset variant, e.g. coco2014: pu_mlc (PU-MLC's image list)")
    p.add_argument("--method", help="method name (see `spmlkit methods`)")
    p.add_argument("--hparam", type=hparam, action="append", metavar="NAME=VALUE",
                   help="method hyperparameter, repeatable (e.g. --hparam alpha=0.2)")
    p.add_argument("--observation", help="single_positive | pos=K,neg=M | ratio=R | full | given")
    p.add_argument("--val", choices=("clean", "observed"), help="validation labels for model selection")
    p.add_argument("--val-frac", type=float, help="share of the train list held out for validation (0: none)")
    p.add_argument("--lr", type=float)
    p.add_argument("--batch-size", type=int)
    p.add_argument("--epochs", type=int)
    p.add_argument("--seed", type=int)
    p.add_argument("--patience", type=int, help="stop after N epochs without improvement (0: EM's rule)")
    p.add_argument("--stop-drop", type=float, help="stop when val mAP falls this far below the best (0.02: GR)")
    p.add_argument("--head", choices=("linear", "mlp"), help="feature runs: the head on the features")
    p.add_argument("--subset", type=int, help="only the first N rows of the official train list")
    p.add_argument("--backbone", help="torchvision:resnet50 | timm:<name> | small:cnn")
    p.add_argument("--no-pretrained", dest="pretrained", action="store_false", default=None,
                   help="do not load ImageNet weights (offline use)")
    p.add_argument("--lgconv", action="store_true", default=None, help="PU-MLC's local-global convolutions")
    p.add_argument("--image-size", type=int)
    p.add_argument("--optimizer", choices=("adam", "sgd"))
    p.add_argument("--head-lr-mult", type=float)
    p.add_argument("--weight-decay", type=float)
    p.add_argument("--linear-init-epochs", type=int, help="LinearInit: head-only epochs on frozen features first")
    p.add_argument("--device", help="auto | cpu | cuda | cuda:N")
    p.add_argument("--amp", choices=("auto", "none", "bf16", "fp16"))
    p.add_argument("--num-workers", type=int,
                   help="image loader processes (default: automatic, from the CPUs available; 0: in the main "
                        "process); results do not depend on it")
    p.add_argument("--decode", choices=("cpu", "gpu"),
                   help="where training JPEGs are decoded: cpu (PIL in the loader processes, the default) or gpu "
                        "(nvJPEG, resized on the GPU; CUDA only)")
    p.add_argument("--compile", action="store_true", default=None,
                   help="torch.compile the model (faster steps after a compilation of a minute or more)")
    p.add_argument("--deterministic", action="store_true", default=None,
                   help="CUDA: deterministic algorithms and no TF32, so two runs with one seed are bit-identical "
                        "(slower); CPU runs always are")
    p.add_argument("--batch-statistics", choices=("global", "process"),
                   help="under torchrun: loss statistics over the whole global batch or each process's slice "
                        "(default: the method's; PU-MLC: process)")
    p.add_argument("--out", help="run folder (default runs/<dataset>/<method>/seed<seed>)")


def add_parser(sub: Any) -> None:
    p = sub.add_parser("train", help="train one method on a feature dataset (yeast, an `extract` folder) or images")
    add_run_options(p)
    p.add_argument("--resume", action="store_true", help="continue the run in --out from its last checkpoint")
    p.add_argument("--overwrite", action="store_true", help="replace a run already in --out")
    p.add_argument("--stop-after", type=int, help="stop this invocation after N epochs (resume later)")
    p.add_argument("--logger", dest="loggers", action="append", metavar="NAME",
                   help="also log every epoch's metrics to tensorboard | mlflow | wandb | a registered logger; "
                        "repeatable")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=run)


def resolve_from_args(args: argparse.Namespace):
    """Dataset defaults < preset < config file < explicit command-line options < the run being
    resumed (``--resume``: its saved ``config.yaml``, so the run continues with its own settings)."""
    from ..experiments.presets import resolve_config
    from ..training.run_dir import RunDirectory
    from ..training.run_paths import typed_paths

    values = {field: getattr(args, opt) for opt, field in _OPTIONS.items() if getattr(args, opt, None) is not None}
    values = typed_paths(values)  # ./data/x/ -> data/x: as a resumed run's paths read back
    if args.hparam:
        values["hparams"] = dict(args.hparam)
    file_values = RunDirectory.config_file_settings(args.config) if args.config else {}

    def resolve(resume_values: dict | None = None):
        config = resolve_config(values, preset=args.preset, file_values=file_values,
                                file_name=f"config file {args.config}", resume_values=resume_values)
        if config.output.out is None:
            config.output.out = str(Path("runs") / Path(config.data.dataset).name / config.method.name
                                    / f"seed{config.optimisation.seed}")
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


def f1_summary(test_metrics: dict[str, Any], method_threshold: float) -> str:
    """The F1 part of the headline, every F1 named by its threshold (docs/protocol.md, "Which
    threshold decides a label").

    First the threshold the run selected on validation (what `predict` and `export` use), then
    0.5; the method's own fixed threshold (EM's 0.75) only when no validated one exists: a weak
    model's F1 at 0.75 is often 0 % and says nothing about its ranking.
    """
    def pair(name: str) -> str | None:
        o, c = test_metrics.get(f"OF1@{name}"), test_metrics.get(f"CF1@{name}")
        return None if o is None or c is None else f"{100 * o:.2f}% / {100 * c:.2f}%"

    parts = []
    t_val = test_metrics.get("threshold_val_global")
    validated = t_val is not None and pair("val_global") is not None
    if validated:
        parts.append(f"{pair('val_global')} at {t_val:g} (selected on validation)")
    if pair("0.5"):
        parts.append(f"{pair('0.5')} at 0.5")
    t = float(method_threshold)
    if not validated and t != 0.5 and pair(f"{t:g}"):
        parts.append(f"{pair(f'{t:g}')} at {t:g} (the method's)")
    return f", F1 overall / per-class {', '.join(parts)}" if parts else ""


def run(args: argparse.Namespace) -> int:
    from rich.table import Table

    from ..errors import user_input
    from ..training import train

    out = console()
    out.quiet = os.environ.get("RANK", "0") != "0"  # under torchrun, one process reports
    with user_input():
        config = resolve_from_args(args)
        _check_decode(config)
    out.print(f"[bold]spmlkit train[/bold]: {config.method.name} on {config.data.dataset} ({config.data.observation}), "
              f"{config.schedule.epochs} epochs, batch {config.optimisation.batch_size}, lr {config.optimisation.lr:g} -> {config.output.out}")
    table = Table(title=f"{config.method.name} on {config.data.dataset}")
    for col in ("epoch", "train loss", "val mAP (%)", "pseudo-labels", "images/s", "seconds"):
        table.add_column(col, justify="right")

    def on_epoch(rec: dict[str, float]) -> None:
        n_pseudo = rec.get("pseudo_negatives", 0) + rec.get("corrections", 0)
        row = (str(int(rec["epoch"])), f"{rec['train_loss']:.4f}", f"{100 * rec['val_map']:.2f}", f"{int(n_pseudo)}",
               f"{rec['images_per_second']:.0f}", f"{rec['epoch_seconds']:.2f}")
        table.add_row(*row)
        if not args.quiet:
            out.print("  epoch " + " | ".join(row[:3]) + f" | {row[4]} img/s")

    res = train(config, resume=args.resume, overwrite=args.overwrite, stop_after=args.stop_after, on_epoch=on_epoch)
    out.print(table)
    if not res.finished:
        out.print(f"stopped after epoch {len(res.history)} as asked; continue with --resume --out {res.out}")
        return 0
    if res.test_map == res.test_map:  # a labelled test set: mAP and F1, each F1 named by its threshold
        from ..methods import get_method

        test = f"test mAP {100 * res.test_map:.2f}%" + f1_summary(res.test_metrics,
                                                                  get_method(config.method.name).threshold)
        out.print(f"best epoch {res.best_epoch}: val mAP {100 * res.val_map:.2f}%, {test}  ({_cost(res)}); "
                  f"outputs in {res.out}")
        return 0
    # users' data without a labelled test set: say plainly what the numbers above are, and are not
    if config.data.val_frac == 0:
        selected = "no validation split, so the last epoch was kept"
    elif config.data.val_variant == "observed":
        selected = "model selected on the observed labels of the validation split"
    else:
        selected = "model selected on the clean labels of the validation split"
    out.print(f"best epoch {res.best_epoch}: val mAP {100 * res.val_map:.2f}%  ({_cost(res)}); "
              f"outputs in {res.out}")
    out.print(f"no labelled test set: no clean metric exists; {selected}")
    return 0
