"""Feature-matrix datasets (tabular data, cached embeddings) with an official train/test split.

A :class:`TabularDataset` is the feature-side counterpart of a prepared image dataset: the
official train list (which the reference protocol later divides into train/val) and the
official test list, each a feature matrix with its label matrix.

A benchmark brings full 0/1 labels of both lists, from which the protocol simulates what a
learner observes. A user's own table brings what was observed instead (``observed``, {-1, 0,
1}, the observation "given"; ``Y_train`` is None) and may have no test list at all
(``X_test`` and ``Y_test`` None), the same two differences as a user's prepared image folder
(docs/protocol.md, "Your own data").

A paper's data file (:mod:`spmlkit.data.mat_file`) brings both: full labels of every row, the
positives its authors observed on the training rows (``observed`` beside ``Y_train``), and its
own validation rows (``X_val``, ``Y_val``), so that a run can train on the authors' exact rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["TabularDataset"]


@dataclass(frozen=True)
class TabularDataset:
    """Features and labels of an official train list and, when there is one, a test list."""

    name: str
    X_train: np.ndarray  # float32 [N_train, D]
    Y_train: np.ndarray | None  # uint8 [N_train, C], full labels; None for a user's observed labels
    X_test: np.ndarray | None
    Y_test: np.ndarray | None  # full 0/1 labels of the test list; None: no labelled test list
    class_names: tuple[str, ...]
    feature_names: tuple[str, ...] = ()
    source: str = ""
    notes: dict = field(default_factory=dict)
    #: a user's own {-1, 0, 1} labels of the train list (observation "given"), in place of ``Y_train``, or
    #: beside it: the positives a paper's authors observed (their data file)
    observed: np.ndarray | None = None
    #: a validation list of the data's own, fully labelled (a paper's data file); None: the protocol splits
    #: the train list
    X_val: np.ndarray | None = None
    Y_val: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.Y_train is None and self.observed is None:
            raise ValueError(f"{self.name}: give full train labels, observed ones (a user's own), or both")
        if self.observed is not None and np.shape(self.observed) != np.shape(
                self.Y_train if self.Y_train is not None else self.observed):
            raise ValueError(f"{self.name}: observed labels have shape {np.shape(self.observed)}, full labels "
                             f"{np.shape(self.Y_train)}; they label the same rows")
        if (self.X_val is None) != (self.Y_val is None):
            raise ValueError(f"{self.name}: validation features and labels come together (or neither)")
        if (self.X_test is None) != (self.Y_test is None):
            raise ValueError(f"{self.name}: test features and test labels come together (or neither, for data "
                             "without a labelled test list)")
        train = self.Y_train if self.Y_train is not None else self.observed
        splits = [("train", self.X_train, train, (0, 1) if self.Y_train is not None else (-1, 0, 1))]
        if self.X_test is not None:
            splits.append(("test", self.X_test, self.Y_test, (0, 1)))
        if self.X_val is not None:
            splits.append(("validation", self.X_val, self.Y_val, (0, 1)))
        for split, X, Y, values in splits:
            if X.ndim != 2 or Y.ndim != 2:
                raise ValueError(f"{self.name}: {split} features and labels must be 2-D")
            if X.shape[0] != Y.shape[0]:
                raise ValueError(
                    f"{self.name}: {split} has {X.shape[0]} feature rows but {Y.shape[0]} label rows"
                )
            if Y.shape[1] != len(self.class_names):
                raise ValueError(
                    f"{self.name}: {split} labels have {Y.shape[1]} columns but there are "
                    f"{len(self.class_names)} class names"
                )
            if not np.isin(Y, values).all():
                raise ValueError(f"{self.name}: {split} labels must be {'/'.join(map(str, values))}")
            if not np.isfinite(X).all():
                raise ValueError(f"{self.name}: {split} features contain NaN or infinite values")
        for split, X in (("test", self.X_test), ("validation", self.X_val)):
            if X is not None and self.X_train.shape[1] != X.shape[1]:
                raise ValueError(f"{self.name}: train has {self.X_train.shape[1]} features, {split} {X.shape[1]}")

    @property
    def labels(self) -> str:
        """Which labels the train list holds: ``"full"`` (a benchmark's) or ``"observed"`` (a user's own)."""
        return "full" if self.Y_train is not None else "observed"
