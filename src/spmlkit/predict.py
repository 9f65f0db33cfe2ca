"""Predict class scores for image files with a trained run (``spmlkit predict``).

Loads ``best.pt`` of a run folder (or a checkpoint file), rebuilds the model from its saved
config without downloading weights, and scores every image in batches. Unreadable images
are reported and skipped; they never stop the batch. Outputs: a CSV (one row per image, one
column per class score, then the labels at the threshold) and a JSON list.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch
from torch.utils.data import DataLoader

from .data.images import ImageFileDataset, ImageTransform, collate_skip_bad
from .io import atomic_write_text
from .training.checkpoint import load_checkpoint
from .training.config import saved_settings

__all__ = ["IMAGE_SUFFIXES", "find_images", "load_model", "load_predictor", "predict_images", "Predictions"]

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
    feature runs their :class:`~spmlkit.models.FeatureHead`, whose input width is read from
    the saved weights (checkpoints of older runs do not record it elsewhere).
    """
    from .models import FeatureHead, build_model

    path = Path(checkpoint)
    if path.is_dir():
        path = path / "best.pt"
    ckpt = load_checkpoint(path)
    for key in ("model", "config", "class_names"):
        if key not in ckpt:
            raise ValueError(f"{path} is not an spmlkit run checkpoint (no {key!r}); pass a run folder or its best.pt")
    cfg = saved_settings(ckpt["config"])
    if (ckpt.get("transform") or {}).get("kind") == "features":
        widths = [v.shape[1] for k, v in ckpt["model"].items() if k.endswith("weight") and getattr(v, "ndim", 0) == 2]
        if not widths:
            raise ValueError(f"{path} is a feature run without a linear layer's weights; the file was changed after "
                             "training: use the best.pt written by `spmlkit train`, or train the run again")
        model: torch.nn.Module = FeatureHead(int(widths[0]), len(ckpt["class_names"]), cfg.get("head", "linear"),
                                             int(cfg.get("hidden", 256)), float(cfg.get("dropout", 0.0)))
    else:
        lgconv = cfg.get("lgconv", False)  # the recipe's LgConv variant has a projection bias
        model = build_model(cfg["backbone"], len(ckpt["class_names"]), pretrained=False, lgconv=lgconv,
                            lgconv_options={"project_bias": bool(cfg.get("lgconv_bias", False))} if lgconv else None)
    _check_weights_fit(path, ckpt, model)
    model.load_state_dict(ckpt["model"])
    model.to(device).eval()
    return model, ckpt, path


def load_predictor(checkpoint: str | Path, device: str = "cpu"):
    """The model, class names, threshold and transform of a run's best checkpoint."""
    model, ckpt, _ = load_model(checkpoint, device)
    spec = ckpt.get("transform") or {"kind": "imagenet", "size": saved_settings(ckpt["config"])["image_size"]}
    return model, list(ckpt["class_names"]), float(ckpt.get("threshold", 0.5)), spec


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

    def labels(self) -> list[list[str]]:
        return [[c for c, s in zip(self.class_names, row) if s >= self.threshold] for row in self.scores]

    def write(self, out: str | Path) -> list[Path]:
        """Write ``<out>.csv`` and ``<out>.json`` (``out`` without suffix, or with .csv/.json)."""
        import pandas as pd

        base = Path(out)
        if base.suffix in (".csv", ".json"):
            base = base.with_suffix("")
        base.parent.mkdir(parents=True, exist_ok=True)
        frame = pd.DataFrame(self.scores, columns=self.class_names)
        frame.insert(0, "image", self.images)
        frame["labels"] = [";".join(ls) for ls in self.labels()]
        csv = atomic_write_text(base.with_suffix(".csv"), frame.to_csv(index=False, float_format="%.6f"))
        payload = {
            "threshold": self.threshold,
            "class_names": self.class_names,
            "predictions": [{"image": im, "scores": dict(zip(self.class_names, map(float, row))), "labels": ls}
                            for im, row, ls in zip(self.images, self.scores, self.labels())],
            "skipped": self.skipped,
        }
        js = atomic_write_text(base.with_suffix(".json"), json.dumps(payload, indent=1))
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
    model, class_names, default_threshold, spec = load_predictor(checkpoint, device)
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
        threshold=default_threshold if threshold is None else threshold,
        skipped=skipped,
    )
