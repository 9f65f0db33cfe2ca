"""A paper's data file: a MATLAB ``.mat`` file holding a set, its observed positives and its partition.

SMILE (Xu et al., NeurIPS 2022) distributes its tabular sets as ``.mat`` files, and CRISP (arXiv
2309.13886) uses the same ones: ``X`` (rows x features), ``Y`` (rows x labels, 0/1), ``Y_obs`` (the
observed positives the authors drew, 0/1, same shape) and the partition ``tr_idx``, ``va_idx``,
``te_idx`` (1 x n integer arrays). Their code reads a part's rows as ``X[data['tr_idx'][0]]``: numpy
indexing, so the indices are **0-based** (a 1-based MATLAB index would read the next row and fail
on the last one), and that is how spmlkit reads them (docs/protocol.md, "A paper's own partition").
With such a file as its data set a run trains on the authors' exact rows: their training rows with
their observed positives (observation ``given``), their validation rows to select on, their test
rows (partition ``official``, the file's own); ``partition: random`` instead pools every row of the
partition and draws spmlkit's own (docs/protocol.md, "The tabular protocol").

The file is checked as a user's file is (docs/bad-input.md): a refusal names the file, what is
wrong and what to do, in one line. What is refused rather than guessed: parts that share rows (the
validation rows would also train), an index outside the rows (a 1-based file, most often), an
observed positive that ``Y`` does not hold, a MATLAB v7.3 (HDF5) file, which scipy cannot read.
"""

from __future__ import annotations

import logging
from functools import lru_cache
from pathlib import Path

import numpy as np

from .tabular import TabularDataset

__all__ = ["MAT_KEYS", "is_mat_file", "load_mat_file"]

log = logging.getLogger(__name__)

#: the arrays a paper's data file holds, as SMILE's code reads them
MAT_KEYS = ("X", "Y", "Y_obs", "tr_idx", "va_idx", "te_idx")
_PARTS = (("tr_idx", "training"), ("va_idx", "validation"), ("te_idx", "test"))


def is_mat_file(argument: str) -> bool:
    """Whether a dataset argument names a ``.mat`` file (by its suffix; whether it exists is
    :func:`load_mat_file`'s to say)."""
    return str(argument).lower().endswith(".mat")


def load_mat_file(path: str | Path) -> TabularDataset:
    """The set of a paper's data file: its training rows (full labels and the file's observed
    positives), its validation rows and its test rows, in the order of the file's index arrays.
    Read once per process and file version (its size and time of change)."""
    p = Path(path).expanduser().absolute()
    if not p.is_file():
        raise ValueError(f"{path}: no such .mat file; give the path of a data file holding "
                         f"{', '.join(MAT_KEYS)} (docs/your-data.md)")
    stat = p.stat()
    return _load(str(p), stat.st_size, stat.st_mtime_ns)


@lru_cache(maxsize=8)
def _load(path: str, size: int, mtime: int) -> TabularDataset:
    arrays = _read(Path(path))
    X, Y, observed = arrays["X"], arrays["Y"], arrays["Y_obs"]
    parts = {key: _indices(path, key, arrays[key]) for key, _ in _PARTS}
    _within(path, parts, len(Y))
    _disjoint(path, parts)
    tr, va, te = (parts[key] for key, _ in _PARTS)
    unused = len(Y) - len(tr) - len(va) - len(te)
    if unused:
        log.warning("%s: %d of its %d rows are in none of tr_idx, va_idx, te_idx; they are not used", path, unused,
                    len(Y))
    names = tuple(f"label_{j}" for j in range(Y.shape[1]))
    return TabularDataset(name=Path(path).stem, X_train=X[tr], Y_train=Y[tr], X_test=X[te], Y_test=Y[te],
                          class_names=names, source=path, observed=observed[tr].astype(np.int8),
                          X_val=X[va], Y_val=Y[va],
                          notes={"split": f"the file's tr_idx / va_idx / te_idx ({len(tr)} / {len(va)} / {len(te)} "
                                          "rows, 0-based)"})


def _read(path: Path) -> dict[str, np.ndarray]:
    """The file's arrays, checked: every key there, ``X`` finite real numbers, ``Y`` and ``Y_obs`` 0/1 of one
    shape with ``X``'s rows, every observed positive a true one."""
    from scipy.io import loadmat

    try:
        data = loadmat(path)
    except NotImplementedError:  # scipy's answer to a v7.3 file
        raise ValueError(f"{path}: a MATLAB v7.3 (HDF5) .mat file, which spmlkit cannot read; save it again with "
                         "save(..., '-v7') in MATLAB or scipy.io.savemat") from None
    except Exception as exc:  # scipy's many errors for a file that is not a .mat file
        raise ValueError(f"{path}: not a readable .mat file ({type(exc).__name__}: {exc}); give a file written by "
                         "MATLAB (-v7 or older) or scipy.io.savemat") from None
    missing = [k for k in MAT_KEYS if k not in data]
    if missing:
        raise ValueError(f"{path}: holds no {', '.join(missing)}; a paper's data file holds {', '.join(MAT_KEYS)} "
                         "(docs/your-data.md)")
    X = _dense(data["X"])
    if X.ndim != 2 or not np.issubdtype(X.dtype, np.number) or np.iscomplexobj(X):
        raise ValueError(f"{path}: X must be a 2-D matrix of real numbers (rows x features), got {X.dtype} of "
                         f"shape {X.shape}")
    if not np.isfinite(X).all():
        raise ValueError(f"{path}: X holds NaN or infinite values; replace them before training")
    out = {"X": X.astype(np.float32)}
    for key in ("Y", "Y_obs"):
        Y = _dense(data[key])
        if Y.ndim != 2 or Y.shape[0] != X.shape[0]:
            raise ValueError(f"{path}: {key} must be a rows x labels matrix with X's {X.shape[0]} rows, got shape "
                             f"{Y.shape}")
        if not np.isin(Y, (0, 1)).all():
            raise ValueError(f"{path}: {key} must hold 0 and 1 only (1: a positive label), got values "
                             f"{sorted(np.unique(Y).tolist())[:5]}")
        out[key] = Y.astype(np.uint8)
    if out["Y_obs"].shape != out["Y"].shape:
        raise ValueError(f"{path}: Y_obs has shape {out['Y_obs'].shape}, Y {out['Y'].shape}; they label the same "
                         "rows and labels")
    wrong = int((out["Y_obs"].astype(bool) & ~out["Y"].astype(bool)).sum())
    if wrong:
        raise ValueError(f"{path}: {wrong} observed positive(s) of Y_obs are not positives of Y; an observed label "
                         "must be a true one")
    return {**out, **{key: data[key] for key, _ in _PARTS}}


def _dense(value: object) -> np.ndarray:
    """A MATLAB matrix as a dense array (MATLAB's sparse matrices load as scipy sparse ones)."""
    from scipy import sparse

    return np.asarray(value.toarray() if sparse.issparse(value) else value)


def _indices(path: str, key: str, value: np.ndarray) -> np.ndarray:
    """One part's row indices: a vector (1 x n as MATLAB and the official code keep it) of whole
    numbers, each once (whether they lie within the file's rows is :func:`_within`'s to say)."""
    a = np.asarray(value)
    if a.ndim > 2 or (a.ndim == 2 and min(a.shape) > 1):
        raise ValueError(f"{path}: {key} must be a 1 x n vector of row indices, got shape {a.shape}")
    a = a.reshape(-1)
    if a.size == 0:
        raise ValueError(f"{path}: {key} is empty; every part of the partition needs rows")
    if not (np.issubdtype(a.dtype, np.integer) or (np.issubdtype(a.dtype, np.floating) and np.all(a == np.round(a)))):
        raise ValueError(f"{path}: {key} must hold whole row numbers, got {a.dtype} values such as {a.flat[0]!r}")
    a = a.astype(np.int64)
    if len(np.unique(a)) != len(a):
        raise ValueError(f"{path}: {key} names {len(a) - len(np.unique(a))} row(s) twice; give each row once")
    return a


def _within(path: str, parts: dict[str, np.ndarray], rows: int) -> None:
    """Refuse an index outside the file's rows; one that makes the whole partition 1-based (every index
    from 1 to the number of rows, as MATLAB counts) says so and how to mend it."""
    every = np.concatenate(list(parts.values()))
    low, high = int(every.min()), int(every.max())
    if low >= 0 and high < rows:
        return
    key = next(k for k, a in parts.items() if a.min() < 0 or a.max() >= rows)
    bad = int(parts[key].max()) if parts[key].max() >= rows else int(parts[key].min())
    hint = (f" (the indices run from 1 to {rows}: 1-based, as MATLAB counts; the official code and spmlkit read "
            "0-based indices, so subtract 1 from every index)") if low >= 1 and high == rows else ""
    raise ValueError(f"{path}: {key} holds row {bad}, outside the file's rows 0..{rows - 1}{hint}")


def _disjoint(path: str, parts: dict[str, np.ndarray]) -> None:
    """Refuse parts that share rows: a row in two parts would train and validate (or test) at once."""
    names = dict(_PARTS)
    keys = list(parts)
    for i, first in enumerate(keys):
        for second in keys[i + 1:]:
            shared = np.intersect1d(parts[first], parts[second])
            if len(shared):
                raise ValueError(f"{path}: {first} and {second} share {len(shared)} row(s) (row {int(shared[0])} "
                                 f"first), so the same rows would be {names[first]} and {names[second]} rows; remove "
                                 f"them from one of the two")
