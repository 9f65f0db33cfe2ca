"""Feature-matrix datasets (tabular data, cached embeddings) with an official train/test split.

A :class:`TabularDataset` is the feature-side counterpart of a prepared image dataset: the
official train list (which the reference protocol later divides into train/val) and the
official test list, each a feature matrix with its full 0/1 label matrix.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["TabularDataset"]


@dataclass(frozen=True)
class TabularDataset:
    """Features and full labels of an official train and test list."""

    name: str
    X_train: np.ndarray  # float32 [N_train, D]
    Y_train: np.ndarray  # uint8 [N_train, C], full labels
    X_test: np.ndarray
    Y_test: np.ndarray
    class_names: tuple[str, ...]
    feature_names: tuple[str, ...] = ()
    source: str = ""
    notes: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        for split, X, Y in (("train", self.X_train, self.Y_train), ("test", self.X_test, self.Y_test)):
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
            if not np.isin(Y, (0, 1)).all():
                raise ValueError(f"{self.name}: {split} labels must be 0/1")
            if not np.isfinite(X).all():
                raise ValueError(f"{self.name}: {split} features contain NaN or infinite values")
        if self.X_train.shape[1] != self.X_test.shape[1]:
            raise ValueError(
                f"{self.name}: train has {self.X_train.shape[1]} features, test {self.X_test.shape[1]}"
            )

