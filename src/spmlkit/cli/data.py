"""``spmlkit prepare``, ``extract`` and ``predict``: data in, features and predictions out."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ._common import console

__all__ = ["add_parsers"]


def add_parsers(sub: Any) -> None:
    from .train import add_run_options

    p = sub.add_parser("prepare", help="read a dataset from its official layout into spmlkit's prepared form")
    p.add_argument("dataset", choices=("voc2012", "voc2007", "coco2014", "nuswide", "cub"))
    p.add_argument("--root", required=True, help="folder where the dataset was downloaded and unpacked")
    p.add_argument("--out", help="output folder (default: <root>/spmlkit-prepared/<dataset>[-<variant>])")
    p.add_argument("--check", action="store_true", help="open every image and report unreadable ones")
    p.add_argument("--variant", help="coco2014: spml (default) or pu_mlc (all images, JSON order)")
    p.add_argument("--mode", help="nuswide: formatted (EM authors' lists) or raw (official distribution)")
    p.add_argument("--no-expect-counts", action="store_true", help="nuswide: do not insist on the published counts")
    p.set_defaults(func=run_prepare)

    p = sub.add_parser("extract", help="extract backbone features once (memory-mapped) for feature runs")
    add_run_options(p)
    p.add_argument("--features-out", required=True, help="output folder for the features")
    p.add_argument("--dtype", choices=("float32", "float16"), default="float32")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=run_extract)

    p = sub.add_parser("predict", help="score images with a trained run")
    p.add_argument("--checkpoint", required=True, help="run folder (uses best.pt) or a checkpoint file")
    p.add_argument("--images", nargs="+", required=True, help="image files and/or folders (searched recursively)")
    p.add_argument("--out", default="predictions", help="output path without suffix: writes .csv and .json")
    p.add_argument("--threshold", type=float, help="decision threshold (default: the method's, 0.5 or 0.75 for EM)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--device", default="cpu")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=run_predict)


def run_prepare(args: argparse.Namespace) -> int:
    from rich.progress import Progress

    from ..data.formats import default_prepared_dir, prepare
    from ..errors import user_input

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
    if result.bad_images:
        screen.print(f"[yellow]{len(result.bad_images)} unreadable images[/yellow] (listed in {out / 'bad_images.txt'})")
        return 1
    return 0


def run_extract(args: argparse.Namespace) -> int:
    from rich.progress import Progress

    from ..errors import user_input
    from ..extract import extract_features
    from .train import resolve_from_args

    with user_input():
        config = resolve_from_args(args)
    screen = console()
    with Progress(console=screen, disable=args.quiet) as progress:
        task = progress.add_task(f"extracting {config.backbone} features", total=None)
        out = extract_features(config, args.features_out, dtype=args.dtype,
                               on_batch=lambda n: progress.advance(task, n))
    screen.print(f"wrote features to {out}; train on them with `spmlkit train --features {out} --method ...`")
    return 0


def run_predict(args: argparse.Namespace) -> int:
    from rich.progress import Progress

    from ..errors import user_input
    from ..predict import find_images, predict_images

    screen = console()
    with user_input():
        if args.threshold is not None and not 0 <= args.threshold <= 1:
            raise ValueError(f"--threshold must be a probability in [0, 1], got {args.threshold}")
        total = len(find_images(args.images))
    with Progress(console=screen, disable=args.quiet) as progress:
        task = progress.add_task("predicting", total=total)
        with user_input():
            preds = predict_images(args.checkpoint, args.images, batch_size=args.batch_size,
                                   threshold=args.threshold, device=args.device,
                                   on_batch=lambda n: progress.advance(task, n))
    with user_input():
        files = preds.write(args.out)
    screen.print(f"scored {len(preds.images)} images ({len(preds.class_names)} classes, threshold "
                 f"{preds.threshold:g}) -> {', '.join(map(str, files))}")
    for path, err in preds.skipped.items():
        screen.print(f"[yellow]skipped[/yellow] {path}: {err}")
    return 1 if preds.skipped else 0
