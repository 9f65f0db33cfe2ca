"""The ``spmlkit`` command line: one entry point, one sub-command per job.

Errors a user can fix (bad option values, missing files, unknown names) are printed as one
clear line and exit with status 2 instead of a traceback; ``--debug`` shows the traceback.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any, Sequence

__all__ = ["main"]


class UserError(Exception):
    """An error caused by the input; printed without a traceback."""


def _csv(kind: type) -> Any:
    def parse(text: str) -> tuple:
        try:
            return tuple(kind(t) for t in text.split(",") if t.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a comma-separated list of {kind.__name__}, got {text!r}")

    return parse


def _hparam(text: str) -> tuple[str, Any]:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    key, value = text.split("=", 1)
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError:
        parsed = value
    return key.strip(), parsed


def _console():
    """A rich console; wide enough for tables when output goes to a file or pipe."""
    from rich.console import Console

    console = Console()
    return console if console.is_terminal else Console(width=160)


# ---------------------------------------------------------------------------- commands
def cmd_methods(args: argparse.Namespace) -> int:
    from rich.table import Table

    from .methods import METHODS

    table = Table(title="spmlkit methods")
    for col in ("method", "loss", "labels", "label-state algorithm", "description", "paper"):
        table.add_column(col)
    for m in METHODS.values():
        table.add_row(m.name, m.loss, m.labels, m.labeling or "", m.description, m.paper)
    _console().print(table)
    return 0


def cmd_losses(args: argparse.Namespace) -> int:
    from rich.table import Table

    from . import losses

    table = Table(title="spmlkit losses  (losses.create(name, **hparams))")
    table.add_column("name")
    table.add_column("hyperparameters (defaults)")
    table.add_column("description")
    for name, desc in losses.available().items():
        hp = ", ".join(f"{k}={v!r}" for k, v in losses.hyperparameters(name).items())
        table.add_row(name, hp, desc)
    _console().print(table)
    return 0


def cmd_benchmark(args: argparse.Namespace) -> int:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
    from rich.table import Table

    from .experiments.benchmark import BenchmarkSpec, run_benchmark, summarize, write_outputs
    from .methods import METHODS

    methods = tuple(args.methods) if args.methods else tuple(METHODS)
    spec = BenchmarkSpec(
        dataset=args.dataset, methods=methods, seeds=tuple(args.seeds), lrs=tuple(args.lrs),
        observation=args.observation, epochs=args.epochs, batch_size=args.batch_size,
        head=args.head, val_variant=args.val, subset=args.subset,
    )
    console = _console()
    console.print(
        f"[bold]spmlkit benchmark[/bold]: {spec.dataset}, observation {spec.observation}, "
        f"{len(methods)} methods x {len(spec.lrs)} lrs x {len(spec.seeds)} seeds = {len(spec.jobs())} runs, "
        f"{args.jobs} worker(s)"
    )
    t0 = time.perf_counter()
    errors: list[dict[str, Any]] = []
    with Progress(
        TextColumn("[progress.description]{task.description}"), BarColumn(), MofNCompleteColumn(),
        TimeElapsedColumn(), TimeRemainingColumn(), console=console, transient=False,
        disable=args.quiet,
    ) as progress:
        task = progress.add_task("training", total=len(spec.jobs()))

        def on_result(r: dict[str, Any]) -> None:
            if "error" in r:
                errors.append(r)
            progress.update(task, advance=1, description=f"{r['method']:>8} lr={r['lr']:g} seed={r['seed']}")

        runs = run_benchmark(spec, jobs=args.jobs, on_result=on_result)
    rows = summarize(runs, methods)
    paths = write_outputs(args.out, spec, runs, rows)

    table = Table(title=f"{spec.dataset}: test mAP (%) of the lr selected on {spec.val_variant} val, "
                  f"mean ± std over {len(spec.seeds)} seeds")
    for col, justify in (("method", "left"), ("test mAP", "right"), ("gap closed", "right"), ("lr", "right"),
                         ("val mAP", "right"), ("description", "left")):
        table.add_column(col, justify=justify)
    for r in rows:
        label = {"bce": "full labels (BCE)", "iun": "1P + all N"}.get(r["method"], r["method"])
        gap = "" if math.isnan(r["gap_closed"]) else f"{100 * r['gap_closed']:+.0f}%"
        style = "bold" if r["method"] in ("bce", "an") else None
        table.add_row(label, f"{r['test_map']:.2f} ± {r['test_map_std']:.2f}", gap, f"{r['lr']:g}",
                      f"{r['val_map']:.2f}", r["description"], style=style)
    console.print(table)
    console.print("gap closed = (method - AN) / (full BCE - AN)")
    for e in errors:
        console.print(f"[red]failed run[/red] {e['method']} lr={e['lr']:g} seed={e['seed']}: {e['error']}")
    console.print(f"wrote {', '.join(str(p) for p in paths.values())}  ({time.perf_counter() - t0:.1f} s)")
    return 1 if errors else 0


def cmd_train(args: argparse.Namespace) -> int:
    from .data import registry

    dataset = args.features or args.dataset
    if args.preset is None and args.config is None and registry.is_feature_dataset(dataset or "yeast"):
        return _train_features(args, dataset or "yeast")
    return _train_images(args)


def _train_features(args: argparse.Namespace, dataset: str) -> int:
    from rich.table import Table

    from .data import registry
    from .experiment import run_feature_experiment

    console = _console()
    ds = registry.load_features(dataset)
    if args.subset:
        ds = ds.subset(args.subset, max(args.subset // 2, 1))
    method = args.method or "em_apl"
    observation = args.observation or "single_positive"
    table = Table(title=f"{method} on {ds.name} ({observation})")
    for col in ("epoch", "train loss", "val mAP (%)", "pseudo-labels", "seconds"):
        table.add_column(col, justify="right")

    def on_epoch(rec: dict[str, float]) -> None:
        n_pseudo = rec.get("pseudo_negatives", 0) + rec.get("corrections", 0)
        table.add_row(str(int(rec["epoch"])), f"{rec['train_loss']:.4f}", f"{100 * rec['val_map']:.2f}",
                      f"{int(n_pseudo)}", f"{rec['epoch_seconds']:.2f}")

    res = run_feature_experiment(
        ds, method, lr=args.lr or 3e-3, seed=args.seed or 0, observation=observation,
        epochs=args.epochs or 20, batch_size=args.batch_size or 64, hparams=dict(args.hparam or []),
        head=args.head, val_variant=args.val or "clean", patience=args.patience, on_epoch=on_epoch,
    )
    console.print(table)
    console.print(
        f"best epoch {res.best_epoch}: val mAP {100 * res.val_map:.2f}%, "
        f"test mAP {100 * res.test_map:.2f}%  ({res.seconds:.1f} s)"
    )
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "result.json").write_text(json.dumps({**res.summary(), "config": res.config, "history": res.history}, indent=1))
        console.print(f"wrote {out / 'result.json'}")
    return 0


#: command-line option -> TrainConfig field, for options that map one to one
_TRAIN_OPTIONS = {
    "dataset": "dataset", "root": "root", "prepared": "prepared", "method": "method", "lr": "lr",
    "batch_size": "batch_size", "epochs": "epochs", "seed": "seed", "observation": "observation",
    "val": "val_variant", "patience": "patience", "backbone": "backbone", "image_size": "image_size",
    "device": "device", "amp": "amp", "num_workers": "num_workers", "optimizer": "optimizer",
    "head_lr_mult": "head_lr_mult", "linear_init_epochs": "linear_init_epochs", "weight_decay": "weight_decay",
    "out": "out", "pretrained": "pretrained", "lgconv": "lgconv",
}


def resolve_train_config(args: argparse.Namespace):
    """Dataset defaults < preset < config file < explicit command-line options."""
    from .experiments.presets import DATASET_DEFAULTS, get_preset
    from .training.config import config_from_dict, load_config_file

    layers: list[tuple[str, dict[str, Any]]] = []
    preset = get_preset(args.preset) if args.preset else None
    file_values = load_config_file(args.config) if args.config else {}
    cli = {field: getattr(args, opt) for opt, field in _TRAIN_OPTIONS.items() if getattr(args, opt, None) is not None}
    if args.hparam:
        cli["hparams"] = dict(args.hparam)
    dataset = cli.get("dataset") or file_values.get("dataset") or (preset.dataset if preset else None) or "digits-mosaic"
    if dataset in DATASET_DEFAULTS:
        layers.append(("dataset defaults", DATASET_DEFAULTS[dataset]))
    if preset is not None:
        layers.append((f"preset {preset.name}", preset.config))
    if file_values:
        layers.append((f"config file {args.config}", file_values))
    layers.append(("command line", {**cli, "dataset": dataset}))
    config = None
    for where, values in layers:
        config = config_from_dict(values, base=config, where=where)
    if "out" not in cli and "out" not in file_values:
        config.out = str(Path("runs") / config.dataset / config.method / f"seed{config.seed}")
    return config


def _train_images(args: argparse.Namespace) -> int:
    from rich.table import Table

    from .training.images import train_images

    console = _console()
    config = resolve_train_config(args)
    console.print(f"[bold]spmlkit train[/bold]: {config.method} on {config.dataset} ({config.observation}), "
                  f"{config.backbone}{' (pretrained)' if config.pretrained else ''}, {config.epochs} epochs, "
                  f"batch {config.batch_size}, lr {config.lr:g} -> {config.out}")
    table = Table(title=f"{config.method} on {config.dataset}")
    for col in ("epoch", "train loss", "val mAP (%)", "pseudo-labels", "images/s", "seconds"):
        table.add_column(col, justify="right")

    def on_epoch(rec: dict[str, float]) -> None:
        n_pseudo = rec.get("pseudo_negatives", 0) + rec.get("corrections", 0)
        row = (str(int(rec["epoch"])), f"{rec['train_loss']:.4f}", f"{100 * rec['val_map']:.2f}", f"{int(n_pseudo)}",
               f"{rec['images_per_second']:.0f}", f"{rec['epoch_seconds']:.1f}")
        table.add_row(*row)
        if not args.quiet:
            console.print("  epoch " + " | ".join(row[:3]) + f" | {row[4]} img/s")

    res = train_images(config, resume=args.resume, stop_after=args.stop_after, on_epoch=on_epoch)
    console.print(table)
    if not res.finished:
        console.print(f"stopped after epoch {len(res.history)} as asked; continue with --resume --out {res.out}")
        return 0
    console.print(
        f"best epoch {res.best_epoch}: val mAP {100 * res.val_map:.2f}%, test mAP {100 * res.test_map:.2f}%; "
        f"{res.images_per_second:.0f} training images/s; outputs in {res.out}"
    )
    return 0


def cmd_prepare(args: argparse.Namespace) -> int:
    from rich.progress import Progress

    from .data.formats import prepare

    out = Path(args.out) if args.out else Path(args.root) / "spmlkit-prepared" / args.dataset
    options: dict[str, Any] = {}
    if args.variant:
        options["variant"] = args.variant
    if args.mode:
        options["mode"] = args.mode
    if args.no_expect_counts:
        options["expect_counts"] = False
    console = _console()
    with Progress(console=console, disable=not args.check) as progress:
        task = progress.add_task("checking images", total=None)
        result = prepare(args.dataset, args.root, out, check=args.check,
                         progress=lambda done, total: progress.update(task, completed=done, total=total), **options)
    console.print(f"prepared {result.dataset}: {len(result.train_images)} train / {len(result.test_images)} test "
                  f"images, {result.num_classes} classes -> {out}")
    if result.bad_images:
        console.print(f"[yellow]{len(result.bad_images)} unreadable images[/yellow] (listed in {out / 'bad_images.txt'})")
        return 1
    return 0


def cmd_extract(args: argparse.Namespace) -> int:
    from rich.progress import Progress

    from .extract import extract_features

    config = resolve_train_config(args)
    console = _console()
    with Progress(console=console, disable=args.quiet) as progress:
        task = progress.add_task(f"extracting {config.backbone} features", total=None)
        out = extract_features(config, args.features_out, dtype=args.dtype,
                               on_batch=lambda n: progress.advance(task, n))
    console.print(f"wrote features to {out}; train on them with `spmlkit train --features {out} --method ...`")
    return 0


def cmd_predict(args: argparse.Namespace) -> int:
    from rich.progress import Progress

    from .predict import find_images, predict_images

    console = _console()
    total = len(find_images(args.images))
    with Progress(console=console, disable=args.quiet) as progress:
        task = progress.add_task("predicting", total=total)
        preds = predict_images(args.checkpoint, args.images, batch_size=args.batch_size, threshold=args.threshold,
                               device=args.device, on_batch=lambda n: progress.advance(task, n))
    files = preds.write(args.out)
    console.print(f"scored {len(preds.images)} images ({len(preds.class_names)} classes, threshold "
                  f"{preds.threshold:g}) -> {', '.join(map(str, files))}")
    for path, err in preds.skipped.items():
        console.print(f"[yellow]skipped[/yellow] {path}: {err}")
    return 1 if preds.skipped else 0


def cmd_sweep(args: argparse.Namespace) -> int:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from .experiments.sweep import load_sweep, run_sweep

    spec = load_sweep(args.config)
    console = _console()
    failures: list[dict[str, Any]] = []
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, disable=args.quiet) as progress:
        task = progress.add_task(f"sweep {spec.name}", total=None)

        def on_start(total: int, done: int) -> None:
            progress.update(task, total=total, completed=done)
            console.print(f"sweep {spec.name}: {total} runs, {done} already finished in "
                          f"{args.store or spec.store}, {args.jobs} worker(s)")

        def on_result(rec: dict[str, Any]) -> None:
            if rec["status"] == "failed":
                failures.append(rec)
            progress.update(task, advance=1, description=f"{rec['method']:>8} {rec['dataset']} seed={rec['seed']}")

        result = run_sweep(spec, jobs=args.jobs, store_path=args.store, max_runs=args.max_runs, retry_failed=args.retry_failed,
                           on_result=on_result, on_start=on_start)
    for rec in failures:
        console.print(f"[red]failed[/red] {rec['run_id']} {rec['method']} lr={rec['lr']:g} seed={rec['seed']}: "
                      f"{rec['error'].splitlines()[0]}")
    console.print(f"ran {result.ran} run(s) ({result.failed} failed), skipped {result.skipped} finished; "
                  f"store: {result.store}. Next: `spmlkit report --store {result.store}`")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from .experiments import report
    from .experiments.plots import make_all_figures
    from .experiments.store import ResultsStore

    store_path = Path(args.store)
    if not store_path.is_file():
        raise FileNotFoundError(f"results store {store_path} not found; run `spmlkit sweep` first")
    df = ResultsStore(store_path).to_dataframe()
    ok = df[df["status"] == "ok"] if not df.empty else df
    if ok.empty:
        raise ValueError(f"{store_path} holds no finished runs to report")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    console = _console()
    agg = report.select_and_aggregate(ok, metric=args.metric)
    written: list[Path] = []
    for observation, part in agg.groupby("observation", sort=True):
        table = report.paper_table(part, reference=args.reference)
        stem = out / ("table" if agg["observation"].nunique() == 1 else f"table_{_slug(observation)}")
        title = f"{args.metric} (%), mean ± std over seeds, configuration selected on validation mAP; {observation}"
        writers = {"md": lambda t: f"**{title}**\n\n" + report.to_markdown(t),
                   "tex": lambda t: report.to_latex(t, caption=title),
                   "csv": report.to_csv}
        for fmt in args.formats:
            path = stem.with_suffix(f".{fmt}")
            path.write_text(writers[fmt](table))
            written.append(path)
        console.print(f"[bold]{title}[/bold]")
        console.print(report.to_markdown(table))
    agg.drop(columns=["run_ids"], errors="ignore").to_csv(out / "selected_configs.csv", index=False)
    written.append(out / "selected_configs.csv")
    thresholds = report.threshold_table(ok)
    if not thresholds.empty:
        (out / "thresholds.csv").write_text(thresholds.to_csv(index=False))
        md = "| " + " | ".join(thresholds.columns) + " |\n|" + "---|" * len(thresholds.columns) + "\n"
        md += "".join("| " + " | ".join(map(str, row)) + " |\n" for row in thresholds.itertuples(index=False))
        (out / "thresholds.md").write_text(
            "**F1 (%) at fixed thresholds and at thresholds selected on validation**\n\n" + md)
        written += [out / "thresholds.csv", out / "thresholds.md"]
    if not args.no_figures:
        written += make_all_figures(ok, out / "figures")
    console.print(f"wrote {len(written)} files to {out}")
    return 0


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in str(text)).strip("_")


def cmd_presets(args: argparse.Namespace) -> int:
    from rich.table import Table

    from .experiments.presets import list_presets

    table = Table(title="spmlkit presets  (spmlkit train --preset NAME --root DIR)")
    for col in ("preset", "target (published)", "source", "batch", "lr", "epochs", "hyperparameters", "notes"):
        table.add_column(col)
    for p in list_presets():
        if args.dataset and p.dataset != args.dataset:
            continue
        t = p.target
        target = "" if t is None else f"{t.mean:.2f}" + ("" if t.std is None else f" ± {t.std:.2f}")
        hp = ", ".join(f"{k}={v}" for k, v in p.config.get("hparams", {}).items())
        table.add_row(p.name, target, "" if t is None else t.source, str(p.config.get("batch_size")),
                      f"{p.config.get('lr'):g}", str(p.config.get("epochs")), hp, p.notes)
    _console().print(table)
    return 0


# ---------------------------------------------------------------------------- parser
def _add_train_options(p: argparse.ArgumentParser) -> None:
    """Options shared by `train` and `extract`; None means "not given" (presets/config decide)."""
    p.add_argument("--preset", help="a paper preset, e.g. em_apl/voc2012 (see `spmlkit presets`)")
    p.add_argument("--config", help="YAML/TOML/JSON file of settings (overridden by options given here)")
    p.add_argument("--dataset", help="yeast | digits-mosaic | voc2012 | voc2007 | coco2014 | nuswide | cub")
    p.add_argument("--root", help="dataset root as downloaded (image datasets)")
    p.add_argument("--prepared", help="a folder written by `spmlkit prepare`")
    p.add_argument("--method", help="method name (see `spmlkit methods`)")
    p.add_argument("--hparam", type=_hparam, action="append", metavar="NAME=VALUE",
                   help="method hyperparameter, repeatable (e.g. --hparam alpha=0.2)")
    p.add_argument("--observation", help="single_positive | pos=K,neg=M | ratio=R | full")
    p.add_argument("--val", choices=("clean", "observed"), help="validation labels for model selection")
    p.add_argument("--lr", type=float)
    p.add_argument("--batch-size", type=int)
    p.add_argument("--epochs", type=int)
    p.add_argument("--seed", type=int)
    p.add_argument("--patience", type=int, help="early stopping patience in epochs")
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
    p.add_argument("--num-workers", type=int)
    p.add_argument("--out", help="run folder (default runs/<dataset>/<method>/seed<seed>)")


def build_parser() -> argparse.ArgumentParser:
    from . import __version__

    parser = argparse.ArgumentParser(
        prog="spmlkit", description="Multi-label learning when most labels are missing (SPML and relatives)."
    )
    parser.add_argument("--version", action="version", version=f"spmlkit {__version__}")
    parser.add_argument("--debug", action="store_true", help="show full tracebacks on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("methods", help="list the methods (recipes) and their papers")
    p.set_defaults(func=cmd_methods)
    p = sub.add_parser("losses", help="list the losses with their hyperparameters")
    p.set_defaults(func=cmd_losses)

    p = sub.add_parser("benchmark", help="compare every method on a feature dataset (paper-style table)")
    p.add_argument("--dataset", default="yeast", help="feature dataset (default: yeast, shipped with the river package)")
    p.add_argument("--methods", type=_csv(str), help="comma-separated methods (default: all; see `spmlkit methods`)")
    p.add_argument("--seeds", type=_csv(int), default=(0, 1, 2), help="comma-separated seeds (default 0,1,2)")
    p.add_argument("--lrs", type=_csv(float), default=(1e-3, 3e-3, 1e-2), help="lr grid, selected on val (default 1e-3,3e-3,1e-2)")
    p.add_argument("--observation", default="single_positive",
                   help="single_positive | pos=K,neg=M | ratio=R | full (default single_positive)")
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--head", choices=("linear", "mlp"), default="linear")
    p.add_argument("--val", choices=("clean", "observed"), default="clean", help="validation labels for model selection")
    p.add_argument("--subset", type=int, help="use only the first N training rows (quick check)")
    p.add_argument("--jobs", type=int, default=2, help="parallel worker processes (default 2)")
    p.add_argument("--out", default="spmlkit-results/benchmark", help="output folder for CSV/JSON/Markdown")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_benchmark)

    p = sub.add_parser("train", help="train one method: on a feature dataset (yeast, `extract` output) or on images")
    _add_train_options(p)
    p.add_argument("--features", help="a feature folder written by `spmlkit extract` (feature trainer)")
    p.add_argument("--head", choices=("linear", "mlp"), default="linear", help="feature trainer head")
    p.add_argument("--subset", type=int, help="feature trainer: only the first N training rows")
    p.add_argument("--resume", action="store_true", help="continue the run in --out from its last checkpoint")
    p.add_argument("--stop-after", type=int, help="stop this invocation after N epochs (resume later)")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("prepare", help="read a dataset from its official layout into spmlkit's prepared form")
    p.add_argument("dataset", choices=("voc2012", "voc2007", "coco2014", "nuswide", "cub"))
    p.add_argument("--root", required=True, help="folder where the dataset was downloaded and unpacked")
    p.add_argument("--out", help="output folder (default: <root>/spmlkit-prepared/<dataset>)")
    p.add_argument("--check", action="store_true", help="open every image and report unreadable ones")
    p.add_argument("--variant", help="coco2014: spml (default) or pu_mlc (all images, JSON order)")
    p.add_argument("--mode", help="nuswide: formatted (EM authors' lists) or raw (official distribution)")
    p.add_argument("--no-expect-counts", action="store_true", help="nuswide: do not insist on the published counts")
    p.set_defaults(func=cmd_prepare)

    p = sub.add_parser("extract", help="extract backbone features once (memory-mapped) for the feature trainer")
    _add_train_options(p)
    p.add_argument("--features-out", required=True, help="output folder for the features")
    p.add_argument("--dtype", choices=("float32", "float16"), default="float32")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=cmd_extract)

    p = sub.add_parser("predict", help="score images with a trained run")
    p.add_argument("--checkpoint", required=True, help="run folder (uses best.pt) or a checkpoint file")
    p.add_argument("--images", nargs="+", required=True, help="image files and/or folders (searched recursively)")
    p.add_argument("--out", default="predictions", help="output path without suffix: writes .csv and .json")
    p.add_argument("--threshold", type=float, help="decision threshold (default: the method's, 0.5 or 0.75 for EM)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--device", default="cpu")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=cmd_predict)

    p = sub.add_parser("sweep", help="run a grid of methods x hyperparameters x seeds into a results store")
    p.add_argument("config", help="sweep file (YAML/TOML/JSON), see spmlkit.experiments.sweep")
    p.add_argument("--jobs", type=int, default=1, help="parallel worker processes, one run each")
    p.add_argument("--store", help="results database (default: the sweep file's `store`)")
    p.add_argument("--max-runs", type=int, help="stop after this many runs (resume later)")
    p.add_argument("--retry-failed", action="store_true", help="run recorded failures again")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=cmd_sweep)

    p = sub.add_parser("report", help="paper-style tables and the papers' analysis figures from a results store")
    p.add_argument("--store", required=True, help="results database written by `spmlkit sweep`")
    p.add_argument("--out", default="report", help="output folder")
    p.add_argument("--reference", help="show published numbers beside ours: EM, OPML, GR or PU-MLC")
    p.add_argument("--metric", default="test_map", help="metric column to tabulate (default test_map)")
    p.add_argument("--formats", type=_csv(str), default=("md", "tex", "csv"), help="table formats (md,tex,csv)")
    p.add_argument("--no-figures", action="store_true")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("presets", help="list the paper presets and the published numbers they target")
    p.add_argument("--dataset", help="only presets of this dataset")
    p.set_defaults(func=cmd_presets)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except (UserError, ValueError, FileNotFoundError, ModuleNotFoundError) as exc:
        if args.debug:
            raise
        print(f"spmlkit {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
