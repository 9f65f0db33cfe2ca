"""``spmlkit prepare``, ``extract`` and ``predict``: data in, features and predictions out."""

from __future__ import annotations

import argparse
import math
import shlex
from pathlib import Path
from typing import Any

from ..data.registry import PREPARABLE
from ._common import console, csv_list, print_whole_words

__all__ = ["add_parsers"]


def add_parsers(sub: Any) -> None:
    from .train import add_run_options

    p = sub.add_parser(
        "prepare", help="read a benchmark from its official layout, or your own images, into spmlkit's prepared form",
        description="Benchmarks: spmlkit prepare voc2012 --root DIR. Your own images: spmlkit prepare folder --root "
                    "DIR (DIR/<label>/<image>) or spmlkit prepare csv --labels FILE --images DIR (columns image,"
                    "positives[,negatives], label names separated by ';'). Your own table of features: spmlkit "
                    "prepare table --table FILE (.csv/.tsv: feature columns and label columns or a positives "
                    "column; .npz: arrays X and Y), written as a feature folder.")
    p.add_argument("dataset", choices=(*_BENCHMARKS, *_USER_FORMS, _TABLE),
                   help="a benchmark, your own images: folder (a folder per label) or csv (a labels file), or your "
                        "own features: table")
    p.add_argument("--root", help="benchmarks: folder where the dataset was downloaded and unpacked; folder: the "
                                  "folder holding one folder per label, DIR/<label>/<image>")
    p.add_argument("--out", help="output folder (default: <root>/spmlkit-prepared/<dataset>[-<variant>]; csv: "
                                 "<images>/spmlkit-prepared/csv; table: <table's folder>/spmlkit-prepared/<table's "
                                 "name>)")
    p.add_argument("--check", action="store_true",
                   help="benchmarks: open every image and report unreadable ones; folder/csv/table: check everything "
                        "and list every problem, writing nothing (exit status 1 when there is one)")
    p.add_argument("--variant", help="coco2014: spml (default) or pu_mlc (all images, JSON order)")
    p.add_argument("--mode", help="nuswide: formatted (EM authors' lists) or raw (official distribution)")
    p.add_argument("--no-expect-counts", action="store_true", help="nuswide: do not insist on the published counts")
    p.add_argument("--cache-size", type=int, metavar="S",
                   help="also write every image resized to S x S (raw uint8 pixels, 3*S*S bytes each) into "
                        "OUT/image_cache; runs at --image-size <= S read it instead of decoding the original JPEGs "
                        "every epoch (S equal to the run's --image-size gives bit-identical inputs; "
                        'docs/protocol.md, "Pre-resized image cache")')
    own = p.add_argument_group("your own images (folder, csv)")
    own.add_argument("--labels", help="csv: the labels file (.csv or .tsv), header image,positives[,negatives]")
    own.add_argument("--images", help="csv: the folder the image paths of --labels are relative to")
    own.add_argument("--classes", help="csv, table: a file of class names, one per line (default: every name of "
                                       "the positives column, sorted)")
    own.add_argument("--test-root", help="a fully labelled test set as folders, DIR2/<label>/<image> (an image's "
                                         "labels: every folder it appears in)")
    own.add_argument("--test-labels", help="a fully labelled test set as a labels file (its positives column lists "
                                           "every label of an image)")
    own.add_argument("--test-images", help="the folder the paths of --test-labels are relative to (default: --root "
                                           "or --images)")
    table = p.add_argument_group("your own table of features (table)")
    table.add_argument("--table", metavar="FILE",
                       help="table: the training table, .csv/.tsv (a header row; every column a feature except the "
                            "labels and --ignore-columns) or .npz (arrays X [rows, features] and Y [rows, classes] of "
                            "1 observed positive, -1 observed negative, 0 unknown; optional class_names, "
                            "feature_names, and a test list X_test, Y_test)")
    table.add_argument("--test-table", metavar="FILE",
                       help="table: a fully labelled test table, .csv/.tsv or .npz (X, Y of 0/1), with the training "
                            "table's features (default: none, or X_test/Y_test of the .npz)")
    table.add_argument("--label-columns", type=csv_list(str), metavar="A,B,...",
                       help="table: the label columns of a CSV table, cells 1 (observed positive), -1 (observed "
                            "negative), 0 or empty (unknown); 0/1 in a test table (default: a positives column)")
    table.add_argument("--positives", metavar="COLUMN",
                       help="table: the CSV column of each row's observed positives, label names separated by ';' "
                            "(default: the column named positives); a test table's lists every label of a row")
    table.add_argument("--negatives", metavar="COLUMN",
                       help="table: the CSV column of each row's observed negatives (default: the column named "
                            "negatives, if any)")
    table.add_argument("--ignore-columns", type=csv_list(str), metavar="A,B,...",
                       help="table: CSV columns that are not features, e.g. an id; a test table need not have them "
                            "(default: none)")
    table.add_argument("--max-table-gb", type=float, metavar="GB",
                       help="table: the most data a table may hold, a CSV file's size or an .npz's arrays "
                            "uncompressed, in GB (default: 1, and an .npz at most 100 times its file's size; "
                            'docs/your-data.md, "How large a table may be")')
    p.set_defaults(func=run_prepare)

    p = sub.add_parser("extract", help="extract backbone features once (memory-mapped) for feature runs",
                       description="Features of an image data set's train and test lists, written as a feature "
                                   "folder that `spmlkit train --features` and `spmlkit benchmark --dataset` take: a "
                                   "benchmark's with its full labels, or your own prepared folder's (--prepared "
                                   "FOLDER) with its observed train labels and the full labels of its test set, if "
                                   "it has one.")
    add_run_options(p, extract=True)
    p.add_argument("--features-out", required=True, metavar="DIR", help="output folder for the features")
    p.add_argument("--dtype", choices=("float32", "float16"), default="float32",
                   help="how the features are stored (default: float32; float16 halves the file)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=run_extract)

    p = sub.add_parser("predict", help="score images with a trained run")
    p.add_argument("--checkpoint", required=True, help="run folder (uses best.pt) or a checkpoint file")
    p.add_argument("--images", nargs="+", required=True, help="image files and/or folders (searched recursively)")
    p.add_argument("--out", default="predictions", help="output path without suffix: writes .csv and .json")
    p.add_argument("--threshold", type=float, help="decision threshold in [0, 1] (default: the one the run selected "
                                                   "on its validation split; for a run that recorded none, the "
                                                   "method's: 0.5, or 0.75 for EM)")
    p.add_argument("--batch-size", type=int, default=32, help="images per forward pass (default 32)")
    p.add_argument("--device", default="cpu", help="cpu | cuda | cuda:N (default cpu)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=run_predict)


_BENCHMARKS = PREPARABLE  # the dataset registry's (data/registry.py), not a list of our own
_USER_FORMS = ("folder", "csv")
_TABLE = "table"
#: options of each kind of `prepare`: one given to the wrong kind is refused rather than ignored
_ONLY_FOR = {
    "variant": _BENCHMARKS, "mode": _BENCHMARKS, "no_expect_counts": _BENCHMARKS,
    "labels": ("csv",), "images": ("csv",), "classes": ("csv", _TABLE), "root": (*_BENCHMARKS, "folder"),
    "test_root": _USER_FORMS, "test_labels": _USER_FORMS, "test_images": _USER_FORMS,
    "table": (_TABLE,), "test_table": (_TABLE,), "label_columns": (_TABLE,), "positives": (_TABLE,),
    "negatives": (_TABLE,), "ignore_columns": (_TABLE,), "max_table_gb": (_TABLE,),
    "cache_size": (*_BENCHMARKS, *_USER_FORMS),
}
_REQUIRED = {"folder": ("root",), "csv": ("labels", "images"), _TABLE: ("table",)}


def run_prepare(args: argparse.Namespace) -> int:
    from rich.progress import Progress

    from ..data.formats import default_prepared_dir, prepare
    from ..errors import user_input

    with user_input():
        _check_prepare_options(args)
    if args.dataset == _TABLE:
        return _prepare_table(args)
    if args.dataset in _USER_FORMS:
        return _prepare_own(args)
    out = Path(args.out) if args.out else default_prepared_dir(args.dataset, args.root, args.variant)
    options: dict[str, Any] = {}
    if args.variant:
        options["variant"] = args.variant
    if args.mode:
        options["mode"] = args.mode
    if args.no_expect_counts:
        options["expect_counts"] = False
    screen = console()
    with Progress(console=screen, disable=not args.check) as progress, user_input():
        task = progress.add_task("checking images", total=None)
        result = prepare(args.dataset, args.root, out, check=args.check,
                         progress=lambda done, total: progress.update(task, completed=done, total=total), **options)
    screen.print(f"prepared {result.dataset}: {len(result.train_images)} train / {len(result.test_images)} test "
                 f"images, {result.num_classes} classes -> {out}")
    if args.cache_size is not None:
        _write_cache(screen, out, args.cache_size)
    if result.bad_images:
        screen.print(f"[yellow]{len(result.bad_images)} unreadable images[/yellow] (listed in {out / 'bad_images.txt'})")
        return 1
    return 0


def _check_prepare_options(args: argparse.Namespace) -> None:
    """Each kind of `prepare` takes its own options; a missing or misplaced one is named with its fix."""
    given = [name for name in _ONLY_FOR if getattr(args, name) not in (None, False)]
    wrong = [name for name in given if args.dataset not in _ONLY_FOR[name]]
    if wrong:
        flags = ", ".join("--" + name.replace("_", "-") for name in wrong)
        raise ValueError(f"{flags} do{'es' if len(wrong) == 1 else ''} not apply to `spmlkit prepare "
                         f"{args.dataset}`; {_usage(args.dataset)}")
    missing = [name for name in _REQUIRED.get(args.dataset, ("root",)) if getattr(args, name) is None]
    if missing:
        flags = " and ".join("--" + name.replace("_", "-") for name in missing)
        raise ValueError(f"`spmlkit prepare {args.dataset}` needs {flags}; {_usage(args.dataset)}")
    if args.max_table_gb is not None and not (math.isfinite(args.max_table_gb) and args.max_table_gb > 0):
        raise ValueError(f"--max-table-gb must be a positive number of GB, got {args.max_table_gb:g}")
    if args.cache_size is not None and args.cache_size < 1:
        raise ValueError(f"--cache-size must be a positive number of pixels (e.g. 448, the image size of the "
                         f"papers' runs), got {args.cache_size}")
    if args.cache_size is not None and args.check and args.dataset in _USER_FORMS:
        raise ValueError(f"`spmlkit prepare {args.dataset} --check` writes nothing, so it has no images to cache; "
                         "drop --cache-size, or drop --check to prepare the folder and its cache")


def _write_cache(screen: Any, out: Path, size: int) -> None:
    """``--cache-size``: resize every image of the prepared folder ``out`` once, with a progress bar."""
    from rich.progress import Progress

    from ..data.formats.image_cache import write_image_cache
    from ..errors import user_input

    with Progress(console=screen, disable=not screen.is_terminal) as progress, user_input():
        task = progress.add_task(f"resizing images to {size} x {size}", total=None)
        cache = write_image_cache(out, size, progress=lambda done, total: progress.update(task, completed=done,
                                                                                          total=total))
    rows = sum(cache.counts.values())
    screen.print(f"image cache: {rows} images at {size} x {size} ({rows * size * size * 3 / 1e9:.2f} GB) -> "
                 f"{cache.folder}; runs at --image-size {size} or less read it", markup=False, highlight=False)


def _usage(dataset: str) -> str:
    if dataset == "folder":
        return ("use: spmlkit prepare folder --root DIR [--out OUT] [--test-root DIR2 | --test-labels FILE "
                "[--test-images DIR2]] [--check]")
    if dataset == "csv":
        return ("use: spmlkit prepare csv --labels FILE --images DIR [--classes FILE] [--out OUT] [--test-labels "
                "FILE [--test-images DIR2] | --test-root DIR2] [--check]")
    if dataset == _TABLE:
        return ("use: spmlkit prepare table --table FILE [--label-columns A,B,... | --positives COLUMN [--negatives "
                "COLUMN]] [--ignore-columns A,...] [--classes FILE] [--test-table FILE] [--max-table-gb GB] "
                "[--out OUT] [--check]")
    return f"use: spmlkit prepare {dataset} --root DIR [--out OUT] [--check]"


def _prepare_own(args: argparse.Namespace) -> int:
    """`spmlkit prepare folder|csv`: read the user's images; with --check list every problem and write nothing."""
    from rich.progress import Progress

    from ..data.formats import read_csv_labels, read_folder
    from ..data.formats.user_data import default_user_out, write_user_data
    from ..errors import user_input

    screen = console()
    tests = {"test_root": args.test_root, "test_labels": args.test_labels, "test_images": args.test_images}
    with Progress(console=screen, disable=not screen.is_terminal) as progress, user_input():
        task = progress.add_task("opening images", total=None)

        def step(done: int, total: int) -> None:
            progress.update(task, completed=done, total=total)

        if args.dataset == "folder":
            out = Path(args.out) if args.out else default_user_out(Path(args.root).expanduser().resolve(), "folder")
            data = read_folder(args.root, out=out, progress=step, **tests)
        else:
            out = Path(args.out) if args.out else default_user_out(Path(args.images).expanduser().resolve(), "csv")
            data = read_csv_labels(args.labels, args.images, classes=args.classes, out=out, progress=step, **tests)
    if args.check:
        return _check_verdict(screen, data, out)
    with user_input():  # any problem: the first one as the error line, nothing written
        result = write_user_data(data, out)
    _report(screen, data)
    screen.print(f"prepared {result.dataset}: {data.summary()} -> {out}", markup=False, highlight=False)
    if args.cache_size is not None:
        _write_cache(screen, out, args.cache_size)
    screen.print(f"train with: spmlkit train --prepared {shlex.quote(str(out))} --method em_apl", markup=False,
                 highlight=False)
    return 0


def _prepare_table(args: argparse.Namespace) -> int:
    """`spmlkit prepare table`: a table of features and observed labels into a feature folder; with
    --check list every problem and write nothing."""
    from ..data.table import default_table_out, read_table, write_table
    from ..errors import user_input

    screen = console()
    out = Path(args.out) if args.out else default_table_out(args.table)
    with user_input():
        data = read_table(args.table, test_table=args.test_table, label_columns=args.label_columns or (),
                          positives=args.positives, negatives=args.negatives, classes=args.classes,
                          ignore_columns=args.ignore_columns or (),
                          max_bytes=None if args.max_table_gb is None else math.ceil(args.max_table_gb * 1e9))
    if args.check:
        return _check_verdict(screen, data, out)
    with user_input():  # any problem: the first one as the error line, nothing written
        write_table(data, out)
    _report(screen, data)
    where = shlex.quote(str(out))
    screen.print(f"prepared table: {data.summary()} -> {out}", markup=False, highlight=False)
    print_whole_words(screen, f"compare every method on it with: spmlkit benchmark --dataset {where}  (one method: "
                              f"spmlkit train --features {where} --method em_apl)", markup=False, highlight=False)
    return 0


def _check_verdict(screen: Any, data: Any, out: Path) -> int:
    """``prepare ... --check``: what was read, then every problem (exit 1) or none (exit 0); nothing written."""
    from rich.markup import escape

    _report(screen, data)
    if data.problems:
        screen.print(f"[red]{len(data.problems)} problem{'s' if len(data.problems) > 1 else ''}[/red] "
                     "(nothing written):", highlight=False)
        for problem in data.problems:
            screen.print(f"  {escape(problem)}", highlight=False)
        return 1
    screen.print(f"no problem found: {data.summary()}. Nothing written; run again without --check to write "
                 f"{out}", markup=False, highlight=False)
    return 0


def _report(screen: Any, data: Any) -> None:
    """What was read (notes) and what deserves a look (warnings), before the verdict."""
    from rich.markup import escape

    for note in data.notes:
        screen.print(note, markup=False, highlight=False)
    for warning in data.warnings:
        screen.print(f"[yellow]warning:[/yellow] {escape(warning)}", highlight=False)


def run_extract(args: argparse.Namespace) -> int:
    from rich.progress import Progress

    from ..data.feature_dir import feature_dir_warning
    from ..errors import user_input
    from ..extract import extract_features
    from .train import resolve_from_args

    with user_input():
        config = resolve_from_args(args)
    screen = console()
    # transient: a refusal before the first batch (weights that cannot be had offline) is its one line alone
    with Progress(console=screen, disable=args.quiet, transient=True) as progress:
        task = progress.add_task(f"extracting {config.model.backbone} features", total=None)
        out = extract_features(config, args.features_out, dtype=args.dtype,
                               on_batch=lambda n: progress.advance(task, n))
    where = shlex.quote(str(out))
    print_whole_words(screen, f"wrote features to {out}; compare every method on them with `spmlkit benchmark --dataset "
                              f"{where}`, or train one with `spmlkit train --features {where} --method ...`",
                      markup=False, highlight=False)
    warning = feature_dir_warning(out)
    if warning:
        print_whole_words(screen, f"warning: {out} holds {warning}. Its meta.json and every benchmark table of it say "
                                  "so; extract with pretrained weights (the default) where they can be downloaded or "
                                  "are cached", markup=False, highlight=False)
    return 0


#: how `predict` names where its threshold comes from (spmlkit.predict.decision_threshold)
THRESHOLD_SOURCES = {"given": "as given", "validation": "selected on the run's validation split",
                     "method": "the method's fixed one: the run recorded no validation-selected threshold"}


def run_predict(args: argparse.Namespace) -> int:
    from rich.progress import Progress

    from ..errors import user_input
    from ..io import check_outputs, inputs_kept
    from ..predict import Predictions, find_images, predict_images, run_inputs

    screen = console()
    with user_input():
        if args.threshold is not None and not 0 <= args.threshold <= 1:
            raise ValueError(f"--threshold must be a probability in [0, 1], got {args.threshold}")
        images = find_images(args.images)
        total = len(images)
        outputs = Predictions.files(args.out)
        check_outputs(outputs, images, "an image this command reads")  # before the first image is scored
        check_outputs(outputs, run_inputs(args.checkpoint), "a file of the run this command reads")
    with Progress(console=screen, disable=args.quiet) as progress:
        task = progress.add_task("predicting", total=total)
        with user_input():
            preds = predict_images(args.checkpoint, args.images, batch_size=args.batch_size,
                                   threshold=args.threshold, device=args.device,
                                   on_batch=lambda n: progress.advance(task, n))
    with user_input(), inputs_kept([*images, *run_inputs(args.checkpoint)], "an input of this command"):
        files = preds.write(args.out)
    screen.print(f"scored {len(preds.images)} images ({len(preds.class_names)} classes, threshold "
                 f"{preds.threshold:g} {THRESHOLD_SOURCES[preds.threshold_source]}) -> {', '.join(map(str, files))}")
    for path, err in preds.skipped.items():
        screen.print(f"[yellow]skipped[/yellow] {path}: {err}")
    return 1 if preds.skipped else 0
