"""One run of the shared protocol on a feature dataset: split, observe, train, evaluate.

The protocol is the base one (REFERENCE.md B.6, B.7): observed labels are drawn once over
the whole official train list (so validation rows also get partial labels, used only by the
"observed" validation variant), the train list is split into train/val with the reference
split, model selection uses validation mAP, and the selected model is evaluated on the
official test list with its full labels. ``seed`` only seeds the model initialisation and
the batch order (as the EM code's torch seeds), so every method sees the same split and the
same observed labels.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import torch

from .data.tabular import TabularDataset
from .training.evaluation import evaluate_test, unobserved_analysis
from .methods import get_method
from .protocol import Observation, ProtocolData, prepare_protocol
from .training.features import FeatureTrainConfig, predict_proba, train_on_features

__all__ = ["ProtocolData", "prepare_protocol", "run_feature_experiment", "RunResult"]


@dataclass
class RunResult:
    method: str
    seed: int
    lr: float
    val_map: float
    test_map: float
    best_epoch: int
    test_metrics: dict[str, float]
    history: list[dict[str, float]]
    seconds: float
    config: dict[str, Any] = field(default_factory=dict)
    test_ap: list[float] = field(default_factory=list)
    analysis: dict[str, Any] = field(default_factory=dict)
    class_names: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in ("method", "seed", "lr", "val_map", "test_map", "best_epoch", "seconds")}
        out.update({f"test_{k}": v for k, v in self.test_metrics.items()})
        return out


def feature_scaling(X_fit: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and std of the training rows (constant features get std 1)."""
    mean = np.asarray(X_fit).mean(axis=0)
    std = np.asarray(X_fit).std(axis=0)
    std[std == 0] = 1.0
    return mean, std


def standardize(X_fit: np.ndarray, *others: np.ndarray) -> tuple[np.ndarray, ...]:
    """Z-score every matrix with the mean/std of ``X_fit`` (the training rows only)."""
    mean, std = feature_scaling(X_fit)
    return tuple(((X - mean) / std).astype(np.float32) for X in (X_fit, *others))


def run_feature_experiment(
    dataset: TabularDataset,
    method: str,
    *,
    lr: float = 1e-3,
    seed: int = 0,
    observation: Observation | str = "single_positive",
    protocol_data: ProtocolData | None = None,
    epochs: int = 20,
    batch_size: int = 32,
    hparams: dict[str, Any] | None = None,
    head: str = "linear",
    hidden: int = 256,
    val_variant: str = "clean",
    patience: int | None = None,
    on_epoch: Callable[[dict[str, float]], None] | None = None,
) -> RunResult:
    """Train ``method`` under the protocol and evaluate the selected epoch on the test list."""
    if val_variant not in ("clean", "observed"):
        raise ValueError(f"val_variant must be 'clean' or 'observed', got {val_variant!r}")
    t0 = time.perf_counter()
    pdata = protocol_data or prepare_protocol(dataset.Y_train, observation)
    tr, va = pdata.train_idx, pdata.val_idx
    Xtr, Xva, Xte = standardize(dataset.X_train[tr], dataset.X_train[va], dataset.X_test)
    val_targets = dataset.Y_train[va] if val_variant == "clean" else (pdata.observed[va] == 1).astype(np.uint8)
    config = FeatureTrainConfig(
        method=method,
        hparams=dict(hparams or {}),
        head=head,
        hidden=hidden,
        epochs=epochs,
        batch_size=batch_size,
        lr=lr,
        seed=seed,
        patience=patience,
    )
    fit = train_on_features(
        Xtr, pdata.observed[tr], Xva, val_targets, config, truth_train=dataset.Y_train[tr], on_epoch=on_epoch
    )
    probs = predict_proba(fit.model, torch.from_numpy(Xte)).numpy()
    val_probs = predict_proba(fit.model, torch.from_numpy(Xva)).numpy()
    evaluation = evaluate_test(probs, dataset.Y_test, threshold=get_method(method).threshold,
                               val_probs=val_probs, val_targets=val_targets)
    ap = np.asarray(evaluation.pop("ap"))
    test_metrics = {k: v for k, v in evaluation.items() if isinstance(v, float)}
    train_probs = predict_proba(fit.model, torch.from_numpy(Xtr)).numpy()
    analysis = unobserved_analysis(train_probs, dataset.Y_train[tr], pdata.observed[tr])
    return RunResult(
        method=method,
        seed=seed,
        lr=lr,
        val_map=fit.best_val_map,
        test_map=float(np.mean(ap)),
        best_epoch=fit.best_epoch,
        test_metrics=test_metrics,
        history=fit.history,
        seconds=time.perf_counter() - t0,
        config={**config.to_dict(), "observation": str(pdata.observation), "val_variant": val_variant,
                "dataset": dataset.name},
        test_ap=[float(a) for a in ap],
        analysis=analysis,
        class_names=list(dataset.class_names),
    )
