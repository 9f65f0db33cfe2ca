"""Argument checks of the protocol functions: every error names the argument and the rows at fault."""

from __future__ import annotations

import numbers

import numpy as np

_MAX_SEED = 2**32 - 1  # RandomState accepts seeds in [0, 2**32 - 1]
_SHOW_ROWS = 10  # how many offending rows an error message lists


# --------------------------------------------------------------------------- validation


def _check_int(name: str, value: object, *, minimum: int | None = None) -> int:
    """Return ``value`` as a Python int, or raise a ValueError naming the argument."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name} must be an integer, got {value!r} ({type(value).__name__}).")
    value = int(value)
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}.")
    return value


def _check_seed(name: str, seed: object) -> int:
    seed = _check_int(name, seed, minimum=0)
    if seed > _MAX_SEED:
        raise ValueError(
            f"{name} must lie in [0, 2**32 - 1] (numpy RandomState seeds), got {seed}."
        )
    return seed


def _check_fraction(name: str, value: object, *, low_open: bool, high_open: bool) -> float:
    """Check ``value`` is a real number in the interval given by the flags (low 0, high 1)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a real number, got {value!r}.")
    value = float(value)
    low_ok = value > 0.0 if low_open else value >= 0.0
    high_ok = value < 1.0 if high_open else value <= 1.0
    if not (np.isfinite(value) and low_ok and high_ok):
        interval = ("(" if low_open else "[") + "0, 1" + (")" if high_open else "]")
        raise ValueError(f"{name} must lie in {interval}, got {value}.")
    return value


def _as_binary_matrix(Y: object, name: str = "Y") -> np.ndarray:
    """Validate a 0/1 ground-truth matrix and return it as a boolean array (True = positive).

    Accepts bool, integer and floating arrays (and nested lists) whose entries are exactly 0
    or 1. The error for anything else says where the first bad value sits.
    """
    arr = np.asarray(Y)
    if arr.ndim != 2:
        raise ValueError(
            f"{name} must be a 2-D label matrix (examples x classes), got shape {arr.shape}."
        )
    if arr.dtype == np.bool_:
        return arr.copy()
    if not (np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)):
        raise ValueError(
            f"{name} must hold numbers 0/1 (bool, int or float), got dtype {arr.dtype}."
        )
    is_pos = arr == 1
    bad = ~(is_pos | (arr == 0))  # NaN compares unequal to both, so it is caught here
    if bad.any():
        raise ValueError(
            f"{name} must contain only 0 and 1 (ground truth, 1 = positive); {_first_bad(arr, bad)}. "
            "If your labels are in {-1, +1}, pass (Y + 1) // 2; if they are scores, "
            "threshold them first."
        )
    return is_pos


def _as_observed_matrix(O: object, name: str = "O") -> np.ndarray:
    """Validate an observed matrix with entries in {-1, 0, 1}; return it as int8."""
    arr = np.asarray(O)
    if arr.ndim != 2:
        raise ValueError(f"{name} must be a 2-D observed-label matrix, got shape {arr.shape}.")
    if not (
        arr.dtype == np.bool_
        or np.issubdtype(arr.dtype, np.integer)
        or np.issubdtype(arr.dtype, np.floating)
    ):
        raise ValueError(f"{name} must be numeric with values in {{-1, 0, 1}}, got {arr.dtype}.")
    bad = ~((arr == 1) | (arr == 0) | (arr == -1))
    if bad.any():
        raise ValueError(f"{name} must contain only -1, 0 and 1; {_first_bad(arr, bad)}.")
    return arr.astype(np.int8)


def _first_bad(arr: np.ndarray, bad: np.ndarray) -> str:
    """``found <value> at row r, column c (n bad entries in total)`` for a matrix check.

    The first offending entry in row-major order, so the user can look it up directly, and
    the total, so one typo is told apart from a matrix in the wrong encoding.
    """
    rows, cols = np.nonzero(bad)
    r, c = int(rows[0]), int(cols[0])
    return f"found {arr[r, c].item()!r} at row {r}, column {c} ({rows.size} bad entries in total)"


