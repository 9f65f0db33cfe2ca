"""Predict class scores for image files with a trained run (``spmlkit predict``).

Loads ``best.pt`` of a run folder (or a checkpoint file), rebuilds the model from its saved
config as the trainer builds it (without downloading weights), and scores every image in
batches. Unreadable images are reported and skipped; they never stop the batch. Outputs: a CSV
(one row per image, one column per class score, then the labels at the threshold) and a JSON list.

The labels are decided at the threshold the run chose on its validation split (recorded in
``result.json`` beside ``best.pt``), unless the caller gives one; a run without that record
falls back to its method's fixed threshold (0.5, 0.75 for EM). docs/protocol.md, "Which
threshold decides a label", says why the validated one comes first.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch
from torch.utils.data import DataLoader

from .data.images import ImageFileDataset, ImageTransform, collate_skip_bad
from .io import atomic_write_text
from .training.checkpoint import load_checkpoint
from .training.config import RunConfig, config_from_dict, saved_settings

__all__ = ["IMAGE_SUFFIXES", "decision_threshold", "run_inputs", "method_threshold", "find_images", "feature_width",
           "load_model", "load_predictor", "predict_images", "Predictions", "transform_spec", "validation_thresholds"]

log = logging.getLogger(__name__)

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
    the file read. The network is rebuilt from the run's saved configuration by the function the
    trainer builds it with (:func:`~spmlkit.training.network.build_run_model`), so one place
    decides a run's network; no pretrained weights are downloaded (the checkpoint holds every
    weight). A feature run's input width is :func:`feature_width`.
    """
    from .training.network import build_run_model

    path = Path(checkpoint)
    if path.is_dir():
        path = path / "best.pt"
    ckpt = load_checkpoint(path)
    for key in ("model", "config", "class_names"):
        if key not in ckpt:
            raise ValueError(f"{path} is not an spmlkit run checkpoint (no {key!r}); pass a run folder or its best.pt")
    if not isinstance(ckpt["config"], dict):
        raise ValueError(f"{path}: its saved configuration is {type(ckpt['config']).__name__}, not a mapping of "
                         "settings; the file was changed after training: use the best.pt written by `spmlkit train`, "
                         "or train the run again")
    kind = "features" if (ckpt.get("transform") or {}).get("kind") == "features" else "images"
    config, unknown_method = _run_config(path, ckpt)
    width = feature_width(path, ckpt) if kind == "features" else 0
    model = build_run_model(config, kind, len(ckpt["class_names"]), width)
    _check_weights_fit(path, ckpt, model, unknown_method)
    model.load_state_dict(ckpt["model"])
    model.to(device).eval()
    return model, ckpt, path


def feature_width(path: Path, ckpt: dict[str, Any]) -> int:
    """The input width of a feature run's network: what its ``best.pt`` records (``"transform"``'s
    ``dim``), else the input width of the first matrix of its saved weights (checkpoints of older
    runs, and of runs trained in a batched group, record no width)."""
    recorded = (ckpt.get("transform") or {}).get("dim")
    if isinstance(recorded, int) and not isinstance(recorded, bool) and recorded > 0:
        return recorded
    widths = [v.shape[1] for k, v in ckpt["model"].items() if k.endswith("weight") and getattr(v, "ndim", 0) == 2]
    if not widths:
        raise ValueError(f"{path} is a feature run without a linear layer's weights; the file was changed after "
                         "training: use the best.pt written by `spmlkit train`, or train the run again")
    return int(widths[0])


def _run_config(path: Path, ckpt: dict[str, Any]) -> tuple[RunConfig, str | None]:
    """The run's configuration, read back from its checkpoint, and the name of its method when
    this process cannot know that method (else None).

    Settings added to spmlkit since the run take their defaults (what the run had), settings this
    version does not know are left out, and ``pretrained`` is off. A method not known here comes
    from a plug-in: the plug-ins the run recorded are loaded (:func:`_load_run_plugins`); when the
    method is still unknown, the network is rebuilt as for a method that adds no part of its own
    (an's): every part the run's settings decide is there, a part that only a method decides
    (BoostLU's head, MIME's bottleneck, LAC's projector) is not, and a warning says so; the weights
    check then refuses a network whose weights do not fit, naming the method (docs/plugins.md).
    """
    from .methods import METHODS

    settings = saved_settings(ckpt["config"])
    known = RunConfig().flat()
    values = {key: value for key, value in settings.items() if key in known}
    values["pretrained"] = False
    method = values.get("method", known["method"])
    unknown = None
    if isinstance(method, str) and method not in METHODS:  # (anything else is refused below, as the file's)
        if not _load_run_plugins(path, values.get("plugins"), method):
            unknown = method
            values.update(method=known["method"], hparams={})
    try:
        return config_from_dict(values, where=f"{path}: its saved configuration"), unknown
    except ValueError as exc:
        raise ValueError(f"{exc}; the file was changed after training: use the best.pt written by `spmlkit train`, "
                         "or train the run again") from None


def _load_run_plugins(path: Path, recorded: Any, method: Any) -> bool:
    """Load the plug-ins a run recorded (file paths relative to its run folder, as ``--resume``
    reads them) and say whether ``method`` is known then. A plug-in that cannot be loaded (moved,
    broken) does not stop the prediction: a warning names it, why, and how to give it."""
    from .errors import InputError
    from .methods import METHODS
    from .plugins import load_plugins
    from .training.run_paths import paths_from_run_folder

    refs = paths_from_run_folder({"plugins": recorded}, path.parent)["plugins"] if isinstance(recorded, list) else []
    problems = []
    for ref in refs:
        try:
            load_plugins([ref], installed=False)
        except InputError as exc:
            problems.append(str(exc))
    if method in METHODS:
        return True
    why = "; ".join(problems) or "the run names no plug-in that registers it"
    log.warning("%s: method %r is not known here (%s); its network is rebuilt without the parts a method may add "
                "(BoostLU's head, MIME's bottleneck, LAC's projector): give the method's plug-in (--plugin) to "
                "rebuild it as trained", path, method, why)
    return False


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


def _check_weights_fit(path: Path, ckpt: dict, model: torch.nn.Module, unknown_method: str | None = None) -> None:
    """Refuse, in one line, a checkpoint whose weights disagree with its own config or class names.

    The model is rebuilt from the saved config and class-name count; a file edited by hand
    or assembled from two runs fails in ``load_state_dict`` with torch's multi-line size
    mismatch, which says nothing about which file is wrong or what to use instead. A run whose
    method was not known (``unknown_method``, :func:`_run_config`) is told to give its plug-in.
    """
    from .training.run_dir import num_outputs, weight_mismatches

    problems = weight_mismatches(ckpt["model"], model)
    if not problems:
        return
    held, listed, own = num_outputs(ckpt["model"]), len(ckpt["class_names"]), model.state_dict()
    # the same network but its classifier's rows (the last matrix of most networks; not of LAC's, whose
    # projector comes last and is as wide for any class count) are not the class names' count
    if set(ckpt["model"]) == set(own) and held != num_outputs(own):
        what = f"model weights for {held} classes but {listed} class names"
    else:
        cfg = saved_settings(ckpt["config"])
        features = (ckpt.get("transform") or {}).get("kind") == "features"
        model_of = f"head {cfg.get('head')!r}" if features else f"backbone {cfg.get('backbone')!r}"
        what = f"model weights that do not fit its config ({model_of})"
    if unknown_method is not None:
        raise ValueError(f"{path} holds {what} ({'; '.join(problems[:3])}) as rebuilt without its method "
                         f"{unknown_method!r}, which is not known here: give the plug-in that registers it (--plugin)")
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
            scores[idx.numpy()] = torch.sigmoid(model(x.to(device)).logits.float()).cpu().numpy()
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
