"""``spmlkit export``: a run's network as ONNX or TorchScript, with a JSON sidecar (:mod:`spmlkit.export`)."""

from __future__ import annotations

import argparse
from typing import Any

from ._common import console

__all__ = ["add_parsers"]


def add_parsers(sub: Any) -> None:
    p = sub.add_parser(
        "export", help="write a run's network as ONNX or TorchScript, with a JSON sidecar for deployment",
        description="Writes the network of a run's best.pt as a file that maps a preprocessed float32 batch to "
                    "per-class probabilities (sigmoid applied; batch axis dynamic), and <out>.json beside it: class "
                    "names, input size and normalisation, thresholds, method, versions. The exported model is "
                    "checked against the PyTorch model before anything is written.")
    p.add_argument("--checkpoint", required=True, help="run folder (uses best.pt) or a checkpoint file")
    p.add_argument("--format", required=True, choices=("onnx", "torchscript"),
                   help="onnx (needs pip install \"spmlkit[export]\") or torchscript (torch.jit.load)")
    p.add_argument("--threshold", type=float,
                   help="the decision threshold the sidecar names, in [0, 1] (default: the one the run selected on "
                        "its validation split; for a run that recorded none, the method's: 0.5, or 0.75 for EM)")
    p.add_argument("--out", help="file to write (default: <run>/model.onnx or <run>/model.torchscript.pt); the "
                                 "sidecar is <out>.json")
    p.set_defaults(func=run_export)


def run_export(args: argparse.Namespace) -> int:
    from ..export import export_model

    result = export_model(args.checkpoint, args.format, args.out, threshold=args.threshold)
    screen = console()
    check = result.sidecar["check"]
    checked = (f"checked with {check['runtime']}: max abs difference {result.max_abs_diff:.1e} from PyTorch"
               if result.max_abs_diff is not None else f"not checked: {check.get('skipped')}")
    screen.print(f"wrote {result.model_path} ({len(result.sidecar['class_names'])} classes, input "
                 f"{result.sidecar['input']['shape']}, threshold {result.sidecar['threshold']:g}: "
                 f"{result.sidecar['threshold_source']}) and {result.sidecar_path}; {checked}",
                 markup=False, highlight=False)
    return 0
