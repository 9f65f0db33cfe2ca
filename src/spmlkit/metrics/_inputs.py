"""Input checks shared by every metric: shapes, finiteness, 0/1 targets, probabilities.

Metrics validate at the boundary and then work on plain numpy arrays, so a wrong shape or a
logit passed where a probability is expected fails with a message naming the argument.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

ArrayLike = Any  # numpy array, torch tensor, or anything np.asarray understands


# --------------------------------------------------------------------------- validation


def _to_numpy(x: ArrayLike, name: str) -> np.ndarray:
    """Return ``x`` as a numpy array (torch tensors are detached and moved to the CPU)."""
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu()
        if x.is_complex():
            raise TypeError(f"{name} must be a real tensor, got dtype {x.dtype}")
        if x.is_floating_point() and x.dtype not in (torch.float32, torch.float64):
            x = x.double()  # bfloat16 has no numpy dtype; half is widened alike
        return x.numpy()
    arr = np.asarray(x)
    if not (np.issubdtype(arr.dtype, np.number) or arr.dtype == bool) or np.iscomplexobj(arr):
        raise TypeError(f"{name} must be a real numeric array or tensor, got dtype {arr.dtype}")
    return arr


def _as_matrix(x: ArrayLike, name: str) -> np.ndarray:
    """Read ``x`` as an ``[N, C]`` matrix; a 1-D vector is one class (``[N, 1]``)."""
    arr = _to_numpy(x, name)
    if arr.ndim == 1:
        arr = arr[:, None]
    if arr.ndim != 2:
        raise ValueError(f"{name} must be 1-D [examples] or 2-D [examples, classes], got shape {tuple(arr.shape)}")
    if arr.shape[0] == 0 or arr.shape[1] == 0:
        raise ValueError(f"{name} is empty (shape {tuple(arr.shape)}); evaluate at least one example and class")
    return arr


def _same_shape(a: np.ndarray, b: np.ndarray, name_a: str, name_b: str) -> None:
    if a.shape != b.shape:
        raise ValueError(
            f"{name_a} and {name_b} must have the same [examples, classes] shape, "
            f"got {tuple(a.shape)} and {tuple(b.shape)}"
        )


def _finite_scores(x: ArrayLike, name: str) -> np.ndarray:
    """``[N, C]`` float64 scores, rejecting NaN and infinities with their first position."""
    arr = _as_matrix(x, name).astype(np.float64, copy=False)
    bad = ~np.isfinite(arr)
    if bad.any():
        r, c = np.argwhere(bad)[0]
        raise ValueError(
            f"{name} must be finite, found {arr[r, c]} at [{r}, {c}] ({int(bad.sum())} non-finite "
            "entries); check the model output for overflow or NaN before evaluating"
        )
    return arr


def _probabilities(x: ArrayLike, name: str, from_logits: bool) -> np.ndarray:
    """``[N, C]`` float64 probabilities; logits are mapped through a stable sigmoid."""
    arr = _finite_scores(x, name)
    if from_logits:
        return _sigmoid(arr)
    bad = (arr < 0.0) | (arr > 1.0)
    if bad.any():
        r, c = np.argwhere(bad)[0]
        raise ValueError(
            f"{name} must be probabilities in [0, 1], found {arr[r, c]} at [{r}, {c}]; "
            "pass from_logits=True if these are logits"
        )
    return arr


def _binary_targets(x: ArrayLike, name: str) -> np.ndarray:
    """``[N, C]`` bool ground truth; only the values 0 and 1 (or False/True) are accepted."""
    arr = _as_matrix(x, name)
    if arr.dtype == bool:
        return arr
    y = arr == 1
    if np.count_nonzero(y) + np.count_nonzero(arr == 0) != arr.size:  # two cheap passes
        bad = (arr != 0) & ~y
        r, c = np.argwhere(bad)[0]
        raise ValueError(
            f"{name} must be ground truth in {{0, 1}}, found {arr[r, c]} at [{r}, {c}] "
            f"({int(bad.sum())} such entries); observed labels in {{-1, 0, 1}} are not ground "
            "truth, map full labels with (y > 0)"
        )
    return y


def _sigmoid(z: np.ndarray) -> np.ndarray:
    """Logistic function without overflow: exp is only ever taken of a non-positive number."""
    e = np.exp(-np.abs(z))
    return np.where(z >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def _check_threshold(threshold: float) -> float:
    t = float(threshold)
    if not 0.0 <= t <= 1.0:
        raise ValueError(f"threshold must be a probability in [0, 1], got {threshold}")
    return t


# --------------------------------------------------------------------------- average precision

