"""Ship a trained run: its network as ONNX or TorchScript, with a JSON sidecar (``spmlkit export``).

A deployed model is used far from spmlkit, by code that knows nothing of run folders, so the
exported file computes as much as can travel with it and the sidecar (``<out>.json``) says
the rest:

* the file maps a float32 batch, already preprocessed, to per-class **probabilities** (the
  sigmoid is part of the model): images ``[B, 3, H, W]`` normalised as in training, or, for
  a feature run, feature rows ``[B, D]`` standardised with the run's training mean and std;
  the batch axis is dynamic;
* the sidecar holds the class names (the output columns, in order), the input size and
  preprocessing (resize, colour, mean/std, the transform recorded in ``best.pt``), the
  decision threshold and where it comes from (the one given, else the one the run selected on
  validation, from ``result.json``, else the method's fixed one: the same rule as
  ``spmlkit predict``), every threshold known for the run, the method, and the spmlkit and
  torch versions.

Before anything is written the exported model is run on a fresh batch (of another size than
the one it was traced with) and compared with the PyTorch model: a difference above
:data:`TOLERANCE` is an error and nothing is written; the difference found is recorded in
the sidecar. ONNX uses torch's TorchScript-based exporter (``dynamo=False``), which needs
only the ``onnx`` package (``pip install "spmlkit[export]"``, which also brings
``onnxruntime`` for the check); TorchScript uses ``torch.jit.trace``.
"""

from __future__ import annotations

import io
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from .errors import InputError, user_input
from .io import atomic_write_bytes, atomic_write_json, check_outputs, inputs_kept
from .predict import (decision_threshold, feature_width, load_model, method_threshold, run_inputs, transform_spec,
                      validation_thresholds)
from .training.config import saved_settings

__all__ = ["FORMATS", "TOLERANCE", "ExportResult", "Probabilities", "export_model", "default_out"]

FORMATS = ("onnx", "torchscript")
#: the largest difference between exported and PyTorch probabilities an export may show
TOLERANCE = 1e-4
#: ONNX operator set: supported by every onnxruntime since 1.12 and by torch's exporter
OPSET = 17
_SUFFIX = {"onnx": ".onnx", "torchscript": ".torchscript.pt"}
_INSTALL = 'pip install "spmlkit[export]"'


@dataclass
class ExportResult:
    """What :func:`export_model` wrote, and how far the exported model is from the PyTorch one."""

    model_path: Path
    sidecar_path: Path
    sidecar: dict[str, Any]
    #: largest absolute difference of the probabilities on the check batch; None: not checked
    max_abs_diff: float | None


class Probabilities(nn.Module):
    """The run's network followed by the sigmoid, in float32: exactly what the exported file computes.

    Exporting probabilities rather than logits keeps the one step every consumer needs (and
    might forget, or apply twice) inside the file.
    """

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.net(x).logits.float())


def default_out(run: Path, fmt: str) -> Path:
    """``<run>/model.onnx`` or ``<run>/model.torchscript.pt``: the export lives beside the checkpoint."""
    return Path(run) / f"model{_SUFFIX[fmt]}"


def export_model(checkpoint: str | Path, format: str, out: str | Path | None = None, *,
                 verify: bool = True, threshold: float | None = None) -> ExportResult:
    """Export the network of ``checkpoint`` (a run folder, i.e. its best.pt, or a checkpoint file).

    ``format`` is ``"onnx"`` or ``"torchscript"``; ``out`` defaults to :func:`default_out`;
    the sidecar is ``<out>.json``; its ``threshold`` is ``threshold`` when given, else the run's
    validation-selected one, else the method's (:func:`spmlkit.predict.decision_threshold`).
    Mistakes in the arguments or the checkpoint, and a missing ``onnx`` package, raise
    :class:`~spmlkit.errors.InputError` (one line); a model that does not export faithfully
    raises ``RuntimeError`` and writes nothing.
    """
    with user_input():
        if format not in FORMATS:
            raise ValueError(f"unknown export format {format!r}; use one of {', '.join(FORMATS)}")
        if format == "onnx":
            _require_onnx()
        model, ckpt, path = load_model(checkpoint)
        out_path = Path(out) if out is not None else default_out(path.parent, format)
        if out_path.is_dir():
            raise ValueError(f"--out {out_path} is a folder; give the file to write, e.g. "
                             f"{out_path / default_out(Path(), format).name}")
        sidecar_path = out_path.with_name(out_path.name + ".json")
        check_outputs([out_path, sidecar_path], run_inputs(path), "a file of the run this export reads")
        results = validation_thresholds(path.parent, num_classes=len(ckpt["class_names"]))  # the sidecar names each
        method = method_threshold(path, ckpt)
        decision = decision_threshold(path, ckpt, threshold)
    net = Probabilities(model).eval()
    shape = _input_shape(path, ckpt)
    traced_with = _batch(shape, 2, seed=0)
    with warnings.catch_warnings():
        # the TorchScript-based tools warn that they are deprecated and that shape checks
        # become constants; the check compares the result with the model instead
        for category in (FutureWarning, DeprecationWarning, UserWarning, torch.jit.TracerWarning):
            warnings.simplefilter("ignore", category)
        data = _onnx_bytes(net, traced_with, _input_name(ckpt)) if format == "onnx" else _torchscript_bytes(
            net, traced_with)
        check = _check(format, data, net, _batch(shape, 3, seed=1), _input_name(ckpt)) if verify else None
    diff = None if check is None else check.get("max_abs_diff")
    if diff is not None and not diff <= TOLERANCE:
        raise RuntimeError(f"the {format} export of {path} gives probabilities {diff:.2e} away from the PyTorch "
                           f"model's (more than {TOLERANCE:g}); nothing was written. The network does not trace "
                           "faithfully; export the other format, or report the backbone to spmlkit")
    sidecar = _sidecar(format, out_path, path, ckpt, {"method": method, **results}, check, decision)
    with inputs_kept(run_inputs(path), "a file of the run this export reads"):
        atomic_write_bytes(out_path, data)
        atomic_write_json(sidecar_path, sidecar)
    return ExportResult(out_path, sidecar_path, sidecar, diff)


# ---------------------------------------------------------------------------- formats


def _require_onnx() -> None:
    try:
        import onnx  # noqa: F401
    except ImportError:
        raise InputError(f"exporting to ONNX needs the onnx package, which is not installed: {_INSTALL}") from None


def _onnx_bytes(net: nn.Module, example: torch.Tensor, input_name: str) -> bytes:
    """The ONNX file of ``net``, batch axis dynamic, checked by ``onnx.checker``."""
    import onnx

    buffer = io.BytesIO()
    torch.onnx.export(net, (example,), buffer, dynamo=False, opset_version=OPSET, input_names=[input_name],
                      output_names=["probabilities"],
                      dynamic_axes={input_name: {0: "batch"}, "probabilities": {0: "batch"}})
    data = buffer.getvalue()
    onnx.checker.check_model(onnx.load_from_string(data))
    return data


def _torchscript_bytes(net: nn.Module, example: torch.Tensor) -> bytes:
    """``torch.jit.trace`` of ``net``: tracing follows any backbone's Python code, where scripting would not."""
    with torch.no_grad():
        traced = torch.jit.trace(net, example)
    buffer = io.BytesIO()
    torch.jit.save(traced, buffer)
    return buffer.getvalue()


def _check(fmt: str, data: bytes, net: nn.Module, batch: torch.Tensor, input_name: str) -> dict[str, Any]:
    """Run the exported bytes on ``batch`` and compare with ``net``: the check the sidecar records."""
    with torch.no_grad():
        expected = net(batch).numpy()
    if fmt == "onnx":
        try:
            import onnxruntime
        except ImportError:
            return {"max_abs_diff": None, "skipped": f"onnxruntime is not installed ({_INSTALL})"}
        session = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"])
        got = session.run(["probabilities"], {input_name: batch.numpy()})[0]
        runtime = f"onnxruntime {onnxruntime.__version__}"
    else:
        loaded = torch.jit.load(io.BytesIO(data), map_location="cpu")
        with torch.no_grad():
            got = loaded(batch).numpy()
        runtime = f"torch.jit {torch.__version__}"
    if got.shape != expected.shape:
        raise RuntimeError(f"the {fmt} export returns shape {got.shape} for a batch of {len(batch)}, the model "
                           f"{expected.shape}: its batch axis is not dynamic; report the backbone to spmlkit")
    return {"runtime": runtime, "batch": list(batch.shape), "inputs": "standard normal, seed 1",
            "max_abs_diff": float(np.abs(got - expected).max()), "tolerance": TOLERANCE}


# ---------------------------------------------------------------------------- sidecar


def _input_name(ckpt: dict[str, Any]) -> str:
    return "features" if transform_spec(ckpt).get("kind") == "features" else "images"


def _input_shape(path: Path, ckpt: dict[str, Any]) -> tuple[int, ...]:
    """One example's shape: ``(3, S, S)`` for images, ``(D,)`` for features (the network's input width,
    :func:`~spmlkit.predict.feature_width`)."""
    spec = transform_spec(ckpt)
    if spec.get("kind") == "features":
        return (feature_width(path, ckpt),)
    return (int(spec.get("channels", 3)), int(spec["size"]), int(spec["size"]))


def _batch(shape: tuple[int, ...], n: int, *, seed: int) -> torch.Tensor:
    return torch.randn((n, *shape), generator=torch.Generator().manual_seed(seed))


def _sidecar(fmt: str, out: Path, path: Path, ckpt: dict[str, Any], selected: dict[str, Any],
             check: dict[str, Any] | None, decision: tuple[float, str]) -> dict[str, Any]:
    from . import __version__

    cfg, names = saved_settings(ckpt["config"]), list(ckpt["class_names"])
    threshold, source = decision
    thresholds: dict[str, Any] = {"method": selected["method"]}
    if "val_global" in selected:
        thresholds["val_global"] = selected["val_global"]
        thresholds["val_global_note"] = "one threshold for every class, maximising overall F1 on the validation split"
    if "val_class" in selected:  # one per class, checked when read
        thresholds["val_class"] = dict(zip(names, selected["val_class"]))
    return {
        "spmlkit_version": __version__,
        "torch_version": torch.__version__,
        "format": fmt,
        "file": out.name,
        **({"opset": OPSET} if fmt == "onnx" else {}),
        "checkpoint": str(path),
        "method": cfg.get("method"),
        "dataset": cfg.get("dataset"),
        "epoch": ckpt.get("epoch"),
        "val_map": ckpt.get("val_map"),
        "class_names": names,
        "input": _input_description(path, ckpt),
        "output": {
            "name": "probabilities", "shape": ["batch", len(names)], "dtype": "float32",
            "meaning": "per-class probabilities in the order of class_names: the sigmoid is applied inside the "
                       "model, so compare them with a threshold directly",
        },
        "threshold": threshold,
        "threshold_source": {"given": "given to spmlkit export", "validation": "selected on the validation split "
                             "(thresholds.val_global)", "method": "the method's fixed threshold (thresholds.method): "
                             "the run recorded no validation-selected one"}[source],
        "thresholds": thresholds,
        "check": check or {"max_abs_diff": None, "skipped": "export_model(verify=False)"},
    }


def _input_description(path: Path, ckpt: dict[str, Any]) -> dict[str, Any]:
    """How to turn an image (or a feature row) into the model's input, as the run did in evaluation."""
    from .data.images import IMAGENET_MEAN, IMAGENET_STD

    spec = transform_spec(ckpt)
    kind = spec.get("kind")
    if kind == "features":
        standardized = bool(spec.get("standardize", saved_settings(ckpt["config"]).get("standardize", True)))
        out: dict[str, Any] = {"kind": "features", "name": "features", "shape": ["batch", _input_shape(path, ckpt)[0]],
                               "dtype": "float32", "standardized": standardized,
                               "transform": {k: v for k, v in spec.items() if k not in ("mean", "std")}}
        if not standardized:
            out["preprocessing"] = "none: the raw feature rows, as the run trained on them"
        elif "mean" in spec:
            out["mean"] = [float(v) for v in spec["mean"]]
            out["std"] = [float(v) for v in spec["std"]]
            out["preprocessing"] = "(x - mean) / std per column, with the mean and std of the run's training rows"
        else:
            out["mean"] = out["std"] = None
            out["preprocessing"] = ("(x - mean) / std per column with the run's training statistics, which this "
                                    "run did not record: train it again with this spmlkit to record them")
        return out
    size = int(spec["size"])
    channels = int(spec.get("channels", 3))
    base = {"kind": "images", "name": "images", "shape": ["batch", channels, size, size], "dtype": "float32",
            "layout": "NCHW", "transform": dict(spec)}
    if kind == "grey":
        mean, std = float(spec["mean"]), float(spec["std"])
        return {**base, "mean": [mean] * channels, "std": [std] * channels,
                "preprocessing": f"greyscale (PIL mode L), resize to {size}x{size} (nearest), scale to [0, 1], "
                                 f"(x - {mean:g}) / {std:g}, repeat over {channels} channels"}
    return {**base, "mean": list(IMAGENET_MEAN), "std": list(IMAGENET_STD),
            "preprocessing": f"RGB, resize to {size}x{size} (bilinear, no crop), scale to [0, 1], (x - mean) / std "
                             "per channel"}
