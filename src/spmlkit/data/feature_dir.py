"""Feature folders (written by ``spmlkit extract``, ``spmlkit prepare table`` or by hand): the format and its reader.

A feature folder is the feature-side counterpart of a prepared image dataset::

    <dir>/meta.json              kind "spmlkit-features", format version, classes; dataset, backbone
                                 and image size are recorded by ``extract`` but not needed to train
    <dir>/train_features.npy     [N_train, D] of the official train list (split later by the protocol)
    <dir>/test_features.npy      [N_test, D]
    <dir>/train_labels.npy, test_labels.npy   0/1, [N, C] with C = len(class_names)

That is format version 1: a benchmark's full labels on both lists. Version 2 also holds a
user's own data (docs/protocol.md, "Your own data"): ``"observation": "given"`` in
``meta.json`` says the train list brings the labels someone observed, {-1, 0, 1} int8 in
``train_observed.npy`` in place of ``train_labels.npy``, and ``"test": false`` says there is
no labelled test list (no ``test_*.npy``). A folder of full labels with a test list is still
written as version 1, byte for byte as before, so an older spmlkit keeps reading it.

Users also write such folders by hand (features from another tool), so the reader checks
everything a run relies on and names the file and the fix in one line: a missing or unreadable
file, features that are not real numbers (text, complex values: their imaginary part would be
dropped with only a library warning), shapes that do not agree, labels that are not 0/1 (or
-1/0/1 for observed ones), class names that are not a list of names. The reader and the writer
live in the data layer so that naming a feature folder as a dataset needs nothing from the
layers above (``extract`` streams its features in with :func:`open_feature_matrix` and
finishes with :func:`write_feature_labels`).
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .tabular import TabularDataset

__all__ = ["FEATURES_KIND", "FORMAT_VERSION", "FORMAT_VERSIONS", "FeatureLabels", "feature_dir_labels",
           "feature_dir_warning", "is_feature_dir", "load_feature_dir", "random_weights_warning", "write_feature_dir",
           "write_feature_labels"]

FEATURES_KIND = "spmlkit-features"
FORMAT_VERSION = 1
#: the versions this spmlkit reads: 1 (full labels and a test list), 2 (may hold observed labels, may lack a test list)
FORMAT_VERSIONS = (1, 2)
_META = "meta.json"
_REDO = "write it again (spmlkit extract ... --features-out DIR, spmlkit prepare table, or your own tool)"


@dataclass(frozen=True)
class FeatureLabels:
    """What a feature folder's ``meta.json`` says about its labels, read without loading an array."""

    labels: str  # "full" (a benchmark's) | "observed" (a user's own: observation "given")
    test: bool  # whether it has a labelled test list


def is_feature_dir(path: str | Path) -> bool:
    """A folder whose ``meta.json`` says it holds features (its contents are checked on loading)."""
    return _recorded(Path(path)) is not None


def _recorded(path: Path) -> dict[str, Any] | None:
    meta = path / _META
    if not meta.is_file():
        return None
    try:
        recorded = json.loads(meta.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return recorded if isinstance(recorded, dict) and recorded.get("kind") == FEATURES_KIND else None


def random_weights_warning(recorded: dict[str, Any]) -> str | None:
    """What every output built on features of a backbone with random weights says (``meta.json``
    records ``"pretrained": false``, as ``spmlkit extract --no-pretrained`` writes it), else None.

    Such features come from no network trained on images: a benchmark on them has the look of a
    comparison of methods without being one, so the folder, its ``extract`` and every table of it
    carry this sentence."""
    if recorded.get("pretrained") is not False:
        return None
    backbone = recorded.get("backbone") or "a backbone"
    return (f"features of {backbone} with random weights (extracted with --no-pretrained), not learned from images: "
            "methods compared on them are compared on random projections of the pixels, which does not show how "
            "they compare on the features of a pretrained network")


def feature_dir_warning(path: str | Path) -> str | None:
    """:func:`random_weights_warning` of the feature folder at ``path``; None for anything else (a named
    data set, a folder of features from a pretrained network or from another tool)."""
    recorded = _recorded(Path(path))
    return None if recorded is None else random_weights_warning(recorded)


def feature_dir_labels(path: str | Path) -> FeatureLabels:
    """Which labels a feature folder holds, from its ``meta.json`` alone (what a sweep checks before
    any run: a simulated observation needs full labels). A folder whose ``meta.json`` is not a
    feature folder's reads as full labels with a test list; loading it says what is wrong."""
    recorded = _recorded(Path(path)) or {}
    return FeatureLabels("observed" if recorded.get("observation") == "given" else "full",
                         recorded.get("test") is not False)


def load_feature_dir(path: str | Path) -> TabularDataset:
    p = Path(path)
    if not is_feature_dir(p):
        raise FileNotFoundError(f"{p} is not a feature folder written by `spmlkit extract` or `spmlkit prepare table` "
                                f"(no meta.json with kind {FEATURES_KIND!r}); write the features into it first")
    meta = json.loads((p / _META).read_text())
    version = meta.get("format_version")
    if version not in FORMAT_VERSIONS:
        raise ValueError(f"{p / _META}: feature format version {version!r} is not supported (this spmlkit reads "
                         f"versions {', '.join(map(str, FORMAT_VERSIONS))}); extract again")
    observation, test = meta.get("observation"), meta.get("test", True)
    if version == 1 and (observation is not None or test is not True):
        raise ValueError(f"{p / _META}: format version 1 holds full labels and a test list; a folder with "
                         "\"observation\" or \"test\" must say \"format_version\": 2")
    if observation not in (None, "given") or not isinstance(test, bool):
        raise ValueError(f"{p / _META}: \"observation\" must be \"given\" (observed labels in train_observed.npy) or "
                         f"absent (full labels), and \"test\" true or false; found {observation!r} and {test!r}")
    class_names = _class_names(p / _META, meta.get("class_names"))
    X_train = _features(p / "train_features.npy")
    if observation == "given":
        Y_train, observed = None, _labels(p / "train_observed.npy", len(X_train), len(class_names), (-1, 0, 1))
    else:
        Y_train, observed = _labels(p / "train_labels.npy", len(X_train), len(class_names), (0, 1)), None
    X_test = Y_test = None
    if test:
        X_test = _features(p / "test_features.npy")
        Y_test = _labels(p / "test_labels.npy", len(X_test), len(class_names), (0, 1))
        if X_train.shape[1] != X_test.shape[1]:
            raise ValueError(f"{p}: train_features.npy has {X_train.shape[1]} columns but test_features.npy "
                             f"{X_test.shape[1]}; both lists need the same features, {_REDO}")
    name = meta.get("dataset")
    feature_names = meta.get("feature_names") or ()
    try:
        return TabularDataset(
            name=f"{name if isinstance(name, str) and name else p.name}-features",
            X_train=X_train, Y_train=Y_train, X_test=X_test, Y_test=Y_test, observed=observed,
            class_names=class_names, source=str(p), feature_names=tuple(map(str, feature_names)),
            notes={"backbone": meta.get("backbone"), "image_size": meta.get("image_size")},
        )
    except ValueError as exc:  # the remaining checks (finite values): say which folder
        raise ValueError(f"{p}: {exc}; {_REDO}") from None


def _class_names(meta_path: Path, names: Any) -> tuple[str, ...]:
    if not isinstance(names, list) or not names or not all(isinstance(n, str) and n for n in names):
        raise ValueError(f"{meta_path}: \"class_names\" must be a non-empty list of label names (one per label "
                         f"column), found {json.dumps(names)[:60]}; write the names of the label columns there")
    if len(set(names)) != len(names):
        raise ValueError(f"{meta_path}: \"class_names\" lists a name twice; each label column needs its own name")
    return tuple(names)


def _load(path: Path, mmap: bool) -> np.ndarray:
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: a feature folder holds train_features.npy and train_labels.npy "
                                "(train_observed.npy for observed labels) and, unless meta.json says \"test\": "
                                f"false, test_features.npy and test_labels.npy, beside meta.json; {_REDO}")
    try:
        return np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise ValueError(f"{path}: not a readable .npy array of numbers ({exc}); {_REDO}") from None


def _features(path: Path) -> np.ndarray:
    X = _load(path, mmap=True)  # memory-mapped: a large folder is read as the rows are used
    kind = X.dtype.kind
    if kind == "c":
        raise ValueError(f"{path}: the features are complex numbers ({X.dtype}); spmlkit trains on real features and "
                         "will not drop the imaginary parts silently: save the real part, the magnitude, or both as "
                         "separate columns")
    if kind not in "fiub":
        raise ValueError(f"{path}: the features are of type {X.dtype} ({'text' if kind in 'US' else 'not numbers'}); "
                         f"they must be numbers, {_REDO}")
    if X.ndim != 2 or X.shape[0] == 0 or X.shape[1] == 0:
        raise ValueError(f"{path}: features must be a 2-D [rows, features] array with at least one of each, found "
                         f"shape {X.shape}; {_REDO}")
    return X


def _labels(path: Path, rows: int, classes: int, values: tuple[int, ...]) -> np.ndarray:
    Y = _load(path, mmap=False)
    allowed = " or ".join(map(str, values)) if len(values) == 2 else "-1, 0 or 1"
    if Y.dtype.kind not in "fiub":
        raise ValueError(f"{path}: labels are of type {Y.dtype}; they must be the numbers {allowed}, {_REDO}")
    if Y.shape != (rows, classes):
        raise ValueError(f"{path}: labels have shape {Y.shape}, expected ({rows}, {classes}): one row per feature row "
                         f"and one column per class name in meta.json; {_REDO}")
    bad = ~np.isin(Y, values)
    if bad.any():
        raise ValueError(f"{path}: labels must be {allowed}, found {np.unique(Y[bad])[:3].tolist()}; {_REDO}")
    return Y.astype(np.uint8 if values == (0, 1) else np.int8)


# --------------------------------------------------------------------------- writing


def _save_array(path: Path, array: np.ndarray) -> Path:
    """One ``.npy`` file, written atomically (spmlkit.io): a reader never sees half of it."""
    from ..io import atomic_write_bytes

    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return atomic_write_bytes(path, buffer.getvalue())


def write_feature_labels(out: str | Path, *, class_names: list[str], Y_train: np.ndarray | None = None,
                         observed: np.ndarray | None = None, Y_test: np.ndarray | None = None,
                         recorded: dict[str, Any] | None = None) -> Path:
    """Finish a feature folder whose ``train_features.npy`` (and, with ``Y_test``, ``test_features.npy``)
    are in ``out`` already: the label files, then ``meta.json`` last, which marks it complete.

    Full labels (``Y_train``) with a test list give format version 1, as ``extract`` always wrote;
    a user's observed labels (``observed``, {-1, 0, 1}) or no test list give version 2.
    ``recorded``: what the writer records beside (dataset, backbone, image size, ...)."""
    if (Y_train is None) == (observed is None):
        raise ValueError("a feature folder holds either full train labels or observed ones")
    out = Path(out)
    if observed is not None:
        _save_array(out / "train_observed.npy", np.asarray(observed, dtype=np.int8))
    else:
        _save_array(out / "train_labels.npy", np.asarray(Y_train, dtype=np.uint8))
    if Y_test is not None:
        _save_array(out / "test_labels.npy", np.asarray(Y_test, dtype=np.uint8))
    version = FORMAT_VERSION if observed is None and Y_test is not None else 2
    meta: dict[str, Any] = {"kind": FEATURES_KIND, "format_version": version, **(recorded or {}),
                            "class_names": list(class_names)}
    if observed is not None:
        meta["observation"] = "given"
    if Y_test is None:
        meta["test"] = False
    from ..io import atomic_write_text

    atomic_write_text(out / _META, json.dumps(meta, indent=1))  # written last: marks completion
    return out


def write_feature_dir(out: str | Path, *, X_train: np.ndarray, class_names: list[str],
                      Y_train: np.ndarray | None = None, observed: np.ndarray | None = None,
                      X_test: np.ndarray | None = None, Y_test: np.ndarray | None = None,
                      recorded: dict[str, Any] | None = None) -> Path:
    """A whole feature folder from arrays in memory (``spmlkit prepare table``), every file atomic.

    The caller has claimed ``out`` (:func:`spmlkit.output_dir.claim_output_dir`). A test list of a
    previous folder in ``out`` is removed when this one has none, so the folder never mixes two
    data sets."""
    out = Path(out)
    (out / _META).unlink(missing_ok=True)  # the folder is incomplete until its new meta.json is written
    stale = ["train_labels.npy" if observed is not None else "train_observed.npy"]
    if X_test is None:
        stale += ["test_features.npy", "test_labels.npy"]
    for name in stale:
        (out / name).unlink(missing_ok=True)
    _save_array(out / "train_features.npy", np.asarray(X_train, dtype=np.float32))
    if X_test is not None:
        _save_array(out / "test_features.npy", np.asarray(X_test, dtype=np.float32))
    return write_feature_labels(out, class_names=class_names, Y_train=Y_train, observed=observed, Y_test=Y_test,
                                recorded=recorded)
