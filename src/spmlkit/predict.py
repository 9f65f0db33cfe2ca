"""Predict class scores for image files with a trained run (``spmlkit predict``).

Loads ``best.pt`` of a run folder (or a checkpoint file), rebuilds the model from its saved
config without downloading weights, and scores every image in batches. Unreadable images
are reported and skipped; they never stop the batch. Outputs: a CSV (one row per image, one
column per class score, then the labels at the threshold) and a JSON list.

The labels are decided at the threshold the run chose on its validation split (recorded in
``result.json`` beside ``best.pt``), unless the caller gives one; a run without that record
falls back to its method's fixed threshold (0.5, 0.75 for EM). docs/protocol.md, "Which
threshold decides a label", says why the validated one comes first.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch
from torch.utils.data import DataLoader

from .data.images import ImageFileDataset, ImageTransform, collate_skip_bad
from .io import atomic_write_text
from .training.checkpoint import load_checkpoint
from .training.config import saved_settings

__all__ = ["IMAGE_SUFFIXES", "decision_threshold", "run_inputs", "method_threshold", "find_images",
           "load_model", "load_predictor", "predict_images", "Predictions", "transform_spec", "validation_thresholds"]

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp"}


def find_images(inputs: Sequence[str | Path]) -> list[Path]:
    """Expand files and folders (recursively, sorted) into a list of image paths."""
    out: list[Path] = []
    for item in inputs:
        p = Path(item)
        if p.is_dir():
            out += sorted(q for q in p.rglob("*") if q.is_file() and q.suffix.lower() in IMAGE_SUFFIXES)
        elif p.exists():
            out.append(p)
        else:
            raise FileNotFoundError(f"{p}: no such file or folder")
    if not out:
        raise ValueError(f"no images found in {', '.join(map(str, inputs))} (looked for {', '.join(sorted(IMAGE_SUFFIXES))})")
    return out


def load_model(checkpoint: str | Path, device: str = "cpu") -> tuple[torch.nn.Module, dict, Path]:
    """The trained network of a run folder (its best.pt) or checkpoint file, in eval mode.

    Returns the model, the checkpoint (config, class names, threshold, ``"transform"``) and
    the file read. Image runs rebuild their backbone + head without downloading weights;
    feature runs their :class:`~spmlkit.models.FeatureHead` (or MIME's bottleneck), whose input width is
    read from the saved weights (checkpoints of older runs do not record it elsewhere).
    """
    from .methods import bottleneck_width
    from .models import FeatureHead, GaussianBottleneck, build_bottleneck_net, build_model
    from .models.parts import constant_batchnorm

    path = Path(checkpoint)
    if path.is_dir():
        path = path / "best.pt"
    ckpt = load_checkpoint(path)
    for key in ("model", "config", "class_names"):
        if key not in ckpt:
            raise ValueError(f"{path} is not an spmlkit run checkpoint (no {key!r}); pass a run folder or its best.pt")
    cfg = saved_settings(ckpt["config"])
    width = bottleneck_width(cfg.get("method", "an"), cfg.get("bottleneck"))  # MIME's Gaussian bottleneck, or 0
    samples = int(cfg.get("bottleneck_samples", 10))
    if (ckpt.get("transform") or {}).get("kind") == "features":
        widths = [v.shape[1] for k, v in ckpt["model"].items() if k.endswith("weight") and getattr(v, "ndim", 0) == 2]
        if not widths:
            raise ValueError(f"{path} is a feature run without a linear layer's weights; the file was changed after "
                             "training: use the best.pt written by `spmlkit train`, or train the run again")
        if width:  # MIME's bottleneck is the whole network on features
            model: torch.nn.Module = GaussianBottleneck(int(widths[0]), len(ckpt["class_names"]), width, samples=samples)
        else:
            model = FeatureHead(int(widths[0]), len(ckpt["class_names"]), cfg.get("head", "linear"),
                                int(cfg.get("hidden", 256)), float(cfg.get("dropout", 0.0)))
    else:
        lgconv = cfg.get("lgconv", False)  # the recipe's LgConv variant has a projection bias
        if width:  # MIME's image model (docs/methods.md, "mime")
            model = build_bottleneck_net(cfg["backbone"], len(ckpt["class_names"]), width, samples=samples,
                                         label_queries=cfg.get("image_head") == "label_query")
        else:
            model = build_model(cfg["backbone"], len(ckpt["class_names"]), pretrained=False, lgconv=lgconv,
                                lgconv_options={"project_bias": bool(cfg.get("lgconv_bias", False))} if lgconv else None,
                                cam_boost=_cam_boost(cfg))
        if cfg.get("constant_bn"):  # the run's BatchNorm became constant affine maps (docs/protocol.md, "Recipes")
            constant_batchnorm(model)
    _check_weights_fit(path, ckpt, model)
    model.load_state_dict(ckpt["model"])
    model.to(device).eval()
    return model, ckpt, path


def _cam_boost(cfg: dict[str, Any]) -> float | None:
    """BoostLU's alpha of the run's method (its saved method and hyperparameters), None for a plain
    head: the boost is part of the model's forward, so a prediction without it would not be the
    run's (docs/methods.md, "boostlu_ll_r")."""
    from .methods import METHODS, cam_boost, resolve_hparams

    name = cfg.get("method", "an")
    if name not in METHODS:  # a plug-in's method whose plug-in this process has not loaded: the plain head
        return None
    return cam_boost(resolve_hparams(name, cfg.get("hparams") or {}))


def load_predictor(checkpoint: str | Path, device: str = "cpu"):
    """The model, class names, default decision threshold (:func:`decision_threshold`) and
    transform of a run's best checkpoint."""
    model, ckpt, path = load_model(checkpoint, device)
    spec = transform_spec(ckpt)
    return model, list(ckpt["class_names"]), decision_threshold(path, ckpt)[0], spec


def transform_spec(ckpt: dict[str, Any]) -> dict[str, Any]:
    """How the run turns an input into the model's (``best.pt``'s ``"transform"``); checkpoints of
    image runs older than that record get the ImageNet transform at their configured size."""
    return ckpt.get("transform") or {"kind": "imagenet", "size": saved_settings(ckpt["config"])["image_size"]}


def run_inputs(checkpoint: str | Path) -> list[Path]:
    """The files of a run that reading its checkpoint uses: the checkpoint (a run folder's
    best.pt), and the result.json and config.yaml beside it. No output may replace them."""
    path = Path(checkpoint)
    path = path / "best.pt" if path.is_dir() else path
    return [path, path.parent / "result.json", path.parent / "config.yaml"]


def validation_thresholds(run: Path, *, per_class: bool = True, num_classes: int | None = None) -> dict[str, Any]:
    """The thresholds a finished run selected on its validation split, from its ``result.json``.

    ``{"val_global": t}`` (one threshold maximising overall F1) and, where recorded and
    ``per_class``, ``{"val_class": [t_c, ...]}``; empty when the run has no ``result.json`` (not
    finished, or a checkpoint copied on its own) or selected none (no validation positives). The
    trainer writes these at the end of a run, after ``best.pt``, which is why they are read from here.

    A recorded threshold is checked as a typed ``--threshold`` is: a number in [0, 1] (not NaN,
    infinite, negative, ``true`` or text), or a one-line ``ValueError`` naming the file, the key and
    the value; the per-class ones, only when asked for (``per_class``: ``predict`` never uses them,
    so a bad one there blocks nothing), also one per class when ``num_classes`` is given.
    """
    result = Path(run) / "result.json"
    if not result.is_file():
        return {}
    try:
        record = json.loads(result.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{result} cannot be read ({exc}); the file was changed after training: remove it to "
                         "use the method's fixed threshold, or train the run again") from None
    if not isinstance(record, dict):
        raise ValueError(f"{result} holds {type(record).__name__}, not a run's result; the file was changed after "
                         "training: remove it to use the method's fixed threshold, or train the run again")
    recorded: dict[str, tuple[Any, str]] = {}
    metrics = record.get("test_metrics")
    for source, where in ((record, ""), (metrics if isinstance(metrics, dict) else {}, "test_metrics.")):
        for key in ("threshold_val_global", "thresholds_val_class"):
            if key in source:  # the test metrics' entry, written by the trainer, wins
                recorded[key] = (source[key], where + key)
    found: dict[str, Any] = {}
    if "threshold_val_global" in recorded:
        value, where = recorded["threshold_val_global"]
        found["val_global"] = _recorded_probability(value, result, where, "or give --threshold")
    if per_class and "thresholds_val_class" in recorded:
        values, where = recorded["thresholds_val_class"]
        if not isinstance(values, list) or (num_classes is not None and len(values) != num_classes):
            size = f"{len(values)} values" if isinstance(values, list) else repr(values)
            raise ValueError(f"{result}: {where} holds {size}, not one threshold for each of the run's "
                             f"{num_classes} classes; {_CHANGED}")
        found["val_class"] = [_recorded_probability(v, result, f"{where}[{i}]") for i, v in enumerate(values)]
    return found


_CHANGED = ("the file was changed after training: restore it, or delete the key to use the method's fixed "
            "threshold")


def _recorded_probability(value: Any, file: Path, where: str, also: str = "") -> float:
    """A threshold read from ``file``: a number in [0, 1], else a one-line ValueError naming it."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and 0.0 <= value <= 1.0:  # NaN fails
        return float(value)
    raise ValueError(f"{file}: {where} is {json.dumps(value)}, not a probability in [0, 1]; {_CHANGED}"
                     + (f", {also}" if also else ""))


def decision_threshold(checkpoint: Path, ckpt: dict[str, Any], given: float | None = None) -> tuple[float, str]:
    """The threshold that turns probabilities into labels, and where it comes from.

    ``given`` (a value the user typed, 0 included) wins and is checked to lie in [0, 1]; then the
    threshold the run selected on validation (``"validation"``); then the method's fixed one
    recorded in ``best.pt`` (``"method"``: 0.5, or 0.75 for EM), for runs that recorded none.
    Only the one used is read and checked: a recorded threshold that is not a probability is a
    one-line error (:func:`validation_thresholds`), never used and never replaced by a default.
    """
    if given is not None:
        t = float(given)
        if not 0.0 <= t <= 1.0:  # NaN fails too
            raise ValueError(f"threshold must be a probability in [0, 1], got {given}")
        return t, "given"
    selected = validation_thresholds(Path(checkpoint).parent, per_class=False).get("val_global")
    if selected is not None:
        return selected, "validation"
    return method_threshold(checkpoint, ckpt), "method"


def method_threshold(checkpoint: Path, ckpt: dict[str, Any]) -> float:
    """The method's fixed threshold that ``best.pt`` records (0.5 when it records none), checked."""
    value = ckpt.get("threshold", 0.5)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and 0.0 <= value <= 1.0:
        return float(value)
    raise ValueError(f"{checkpoint}: its threshold is {value!r}, not a probability in [0, 1]; the file was changed "
                     "after training: give --threshold, or train the run again")


def _check_weights_fit(path: Path, ckpt: dict, model: torch.nn.Module) -> None:
    """Refuse, in one line, a checkpoint whose weights disagree with its own config or class names.

    The model is rebuilt from the saved config and class-name count; a file edited by hand
    or assembled from two runs fails in ``load_state_dict`` with torch's multi-line size
    mismatch, which says nothing about which file is wrong or what to use instead.
    """
    from .training.run_dir import num_outputs, weight_mismatches

    problems = weight_mismatches(ckpt["model"], model)
    if not problems:
        return
    held, listed = num_outputs(ckpt["model"]), len(ckpt["class_names"])
    if held is not None and held != listed:
        what = f"model weights for {held} classes but {listed} class names"
    else:
        features = (ckpt.get("transform") or {}).get("kind") == "features"
        model_of = (f"head {ckpt['config'].get('head')!r}" if features
                    else f"backbone {ckpt['config'].get('backbone')!r}")
        what = f"model weights that do not fit its config ({model_of})"
    raise ValueError(f"{path} holds {what} ({'; '.join(problems[:3])}); the file was changed after training or "
                     "mixes two runs: predict with the best.pt written by `spmlkit train`, or train the run again")


@dataclass
class Predictions:
    images: list[str]
    class_names: list[str]
    scores: np.ndarray  # [n, C] probabilities
    threshold: float
    skipped: dict[str, str] = field(default_factory=dict)  # path -> error
    #: where ``threshold`` comes from: "given", "validation" or "method" (:func:`decision_threshold`)
    threshold_source: str = "given"

    def labels(self) -> list[list[str]]:
        return [[c for c, s in zip(self.class_names, row) if s >= self.threshold] for row in self.scores]

    @staticmethod
    def files(out: str | Path) -> tuple[Path, Path]:
        """The files :meth:`write` writes for ``out``: ``<out>.csv`` and ``<out>.json``."""
        base = Path(out)
        if base.suffix in (".csv", ".json"):
            base = base.with_suffix("")
        # appended, not with_suffix: "preds.v2" or "at0.5" must not lose the part after its dot
        return base.with_name(base.name + ".csv"), base.with_name(base.name + ".json")

    def write(self, out: str | Path) -> list[Path]:
        """Write ``<out>.csv`` and ``<out>.json`` (``out`` without suffix, or with .csv/.json)."""
        import pandas as pd

        csv_path, json_path = self.files(out)
        csv_path.parent.mkdir(parents=True, exist_ok=True)
        frame = pd.DataFrame(self.scores, columns=self.class_names)
        frame.insert(0, "image", self.images)
        frame["labels"] = [";".join(ls) for ls in self.labels()]
        csv = atomic_write_text(csv_path, frame.to_csv(index=False, float_format="%.6f"))
        payload = {
            "threshold": self.threshold,
            "threshold_source": self.threshold_source,
            "class_names": self.class_names,
            "predictions": [{"image": im, "scores": dict(zip(self.class_names, map(float, row))), "labels": ls}
                            for im, row, ls in zip(self.images, self.scores, self.labels())],
            "skipped": self.skipped,
        }
        js = atomic_write_text(json_path, json.dumps(payload, indent=1))
        return [csv, js]


@torch.no_grad()
def predict_images(
    checkpoint: str | Path,
    images: Sequence[str | Path],
    *,
    batch_size: int = 32,
    threshold: float | None = None,
    device: str = "cpu",
    num_workers: int = 0,
    on_batch: Callable[[int], None] | None = None,
) -> Predictions:
    """Score ``images`` with the run of ``checkpoint``; labels at ``threshold`` or, when None, at
    the run's validation-selected threshold (:func:`decision_threshold`)."""
    model, ckpt, path = load_model(checkpoint, device)
    class_names = list(ckpt["class_names"])
    spec = transform_spec(ckpt)
    decided_at, source = decision_threshold(path, ckpt, threshold)
    if spec.get("kind") == "features":
        raise ValueError(f"{checkpoint} is a run on features, not images: `spmlkit predict` scores image files; "
                         "score feature rows with SPMLClassifier, or with the model that `spmlkit export` writes")
    paths = find_images(images)
    dataset = ImageFileDataset(paths, ImageTransform.from_spec(spec), skip_bad=True)
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=False, num_workers=num_workers,
                        collate_fn=collate_skip_bad)
    scores = np.full((len(paths), len(class_names)), np.nan, dtype=np.float32)
    bad: list[int] = []
    for x, idx, bad_idx in loader:
        bad += bad_idx.tolist()
        if x is not None:
            scores[idx.numpy()] = torch.sigmoid(model(x.to(device)).float()).cpu().numpy()
        if on_batch:
            on_batch(len(idx) + len(bad_idx))
    bad_set = set(bad)
    keep = [i for i in range(len(paths)) if i not in bad_set]
    skipped = {str(paths[i]): dataset.errors.get(i, "unreadable image") for i in bad}
    return Predictions(
        images=[str(paths[i]) for i in keep],
        class_names=class_names,
        scores=scores[keep],
        threshold=decided_at,
        skipped=skipped,
        threshold_source=source,
    )
