"""A scikit-learn estimator for users whose inputs are feature matrices.

    >>> clf = SPMLClassifier(method="em_apl", epochs=20).fit(X, Y_observed)
    >>> clf.predict_proba(X_new)      # [n, C] probabilities
    >>> clf.predict(X_new)            # [n, C] 0/1 at the method's threshold

A method of one's own (docs/plugins.md) is named like any other once its plug-in is loaded;
``plugins=("my_loss.py",)`` loads it in :meth:`fit`, so a copy of the estimator in another
process (``cross_val_score(..., n_jobs=2)``) loads it there too.

``Y_observed`` holds 1 for observed positives, 0 for unknown and -1 for observed negatives,
exactly what a user with partially labelled data has: the observation is "given", nothing is
simulated. Without clean labels there is nothing clean to select on, so :meth:`fit` holds
out a validation split of the rows (the reference split) and selects the epoch on mAP
against the *observed* positives of those rows, the "observed" validation variant; pass
``X_val``/``Y_val`` (0/1) to select on clean labels. ``val_map_`` is that epoch's validation
mAP, measured on the labels ``validation_`` names.

Scoring and comparing methods (docs/protocol.md, "Your own data"):

* **On full labels**, when some exist. :meth:`score` is the mAP against *full* 0/1 labels, and
  refuses labels that are observed ones (a -1, or one positive per row from an estimator fitted
  on given observed labels): scored against observed labels, every unobserved positive would
  count as a false positive, and the number would mean something else. For scikit-learn's model
  selection (``cross_val_score``, ``GridSearchCV``), which pass the same ``y`` to ``fit`` and
  ``score``, give full labels and let the estimator simulate the observation on each training
  fold::

      >>> cross_val_score(SPMLClassifier(observation="single_positive"), X, Y_full, cv=5)

  so each fold trains on single positives drawn from its own rows (the protocol's draw,
  docs/protocol.md, "Observed labels") and is scored against the full labels of its test rows.

* **On observed labels**, when that is all there is. :func:`observed_map` is a scorer that says
  what it measures: the mAP against the *observed positives* of the held-out rows, every other
  label counted as a negative (the "observed" validation variant, on held-out folds)::

      >>> cross_val_score(SPMLClassifier(method="em"), X, Y_observed, cv=5, scoring=observed_map)

  It is not the mAP on full labels (an unobserved positive ranked high counts as an error), but
  every method is measured on the same rows against the same labels, so it ranks methods and
  settings; it is not a number to report as a method's mAP.

It is a scikit-learn classifier (:class:`sklearn.base.ClassifierMixin`,
:class:`sklearn.base.BaseEstimator`): ``get_params``, ``set_params``, ``clone`` and the repr come
from the signature, and fitting goes through the same :func:`~spmlkit.training.train` as every
other entry point, with the feature-run defaults of
:data:`~spmlkit.training.defaults.FEATURE_DEFAULTS`. Its tags (:meth:`SPMLClassifier.__sklearn_tags__`)
tell scikit-learn's tools and its common checks what it is: a multi-label classifier fitted on a
2-D label matrix, on dense, finite, real features; ``tests/test_estimator_checks.py`` runs those
checks, and lists the few that cannot apply to it with the reason (docs/python-api.md,
"scikit-learn's checks").
"""

from __future__ import annotations

from typing import Any

import copy

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.exceptions import NotFittedError

from .labels import validate_observed
from .methods import get_method
from .training.config import RunConfig
from .training.defaults import FEATURE_DEFAULTS
from .training.run_data import RunData, feature_scaling
from .training.sources import predict_proba
from .training.trainer import train

__all__ = ["SPMLClassifier", "observed_map"]


class SPMLClassifier(ClassifierMixin, BaseEstimator):
    def __init__(
        self,
        method: str = "em_apl",
        *,
        hparams: dict[str, Any] | None = None,
        head: str = "linear",
        hidden: int = 256,
        epochs: int = FEATURE_DEFAULTS["epochs"],
        batch_size: int = FEATURE_DEFAULTS["batch_size"],
        lr: float = FEATURE_DEFAULTS["lr"],
        weight_decay: float = 0.0,
        val_frac: float = 0.2,
        standardize: bool = True,
        patience: int | None = None,
        threshold: float | None = None,
        seed: int = 0,
        observation: str = "given",
        plugins: tuple[str, ...] = (),
    ):
        self.method = method
        self.hparams = hparams
        self.head = head
        self.hidden = hidden
        self.epochs = epochs
        self.batch_size = batch_size
        self.lr = lr
        self.weight_decay = weight_decay
        self.val_frac = val_frac
        self.standardize = standardize
        self.patience = patience
        self.threshold = threshold
        self.seed = seed
        self.observation = observation
        self.plugins = plugins

    def __sklearn_tags__(self):
        """What scikit-learn's tools and common checks are told this estimator is: a classifier of
        label matrices, each column one label's 0/1 (multi-label: several may be 1 in a row), fitted
        on a 2-D ``y`` only (never scikit-learn's 1-D class labels: ``multi_class`` is False, since a
        column never holds class numbers), on dense (not sparse), finite (no NaN) real features of
        any sign. (scikit-learn 1.6 and later read these tags; pyproject.toml requires it.)"""
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_label = True
        tags.classifier_tags.multi_class = False
        tags.target_tags.required = True
        tags.target_tags.multi_output = True
        tags.target_tags.single_output = False
        tags.target_tags.two_d_labels = True
        tags.input_tags.two_d_array = True
        tags.input_tags.sparse = False
        tags.input_tags.allow_nan = False
        tags.input_tags.positive_only = False
        return tags

    # -------------------------------------------------------------- fitting
    def fit(
        self,
        X: np.ndarray,
        y: np.ndarray,
        X_val: np.ndarray | None = None,
        Y_val: np.ndarray | None = None,
        *,
        Y_true: np.ndarray | None = None,
    ) -> "SPMLClassifier":
        """Fit on features ``X`` [n, d] and observed labels ``y`` [n, C] in {-1, 0, 1} (1 an observed
        positive, 0 unknown, -1 an observed negative; named ``y`` as scikit-learn's tools pass it,
        though it is a matrix).

        With ``observation`` other than "given" (``"single_positive"``, ``"pos=K,neg=M"``,
        ``"ratio=R"``), ``y`` holds *full* 0/1 labels instead, and the observed labels are drawn
        from them with the shared protocol; validation then selects on the held-out rows' full
        labels. ``Y_true`` (full 0/1 labels) is only needed by the oracle references ``bce`` and
        ``iun`` and, when given, to report pseudo-label accuracy in ``history_``. :meth:`predict`
        answers in ``y``'s dtype.
        """
        from .plugins import load_plugins
        from .protocol import Observation

        load_plugins(self._plugins())  # by reference: a clone in a joblib worker loads them too
        method = get_method(self.method)
        full = Observation.parse(self.observation).kind != "given"
        X = self._features(X, "X", fitting=True)
        Y = _label_matrix(y, f"y (full labels, as observation={self.observation!r} asks)" if full else "y")
        if len(Y) != len(X):
            raise ValueError(f"X has {len(X)} rows but y has {len(Y)}")
        if len(X) == 1 and self.val_frac > 0 and X_val is None:
            raise ValueError(f"X has 1 sample (n_samples = 1), but fit holds out val_frac={self.val_frac:g} of the "
                             "rows to select the epoch on: give more rows, or val_frac=0")
        self._label_dtype = Y.dtype
        if full:
            return self._fit_full(X, Y, method)
        obs = validate_observed(Y, where="y")
        if not (obs == 1).any():
            raise ValueError("y has no observed positive (1) at all; there is nothing to learn from")
        data = RunData("features", "the data given to fit", tuple(f"class {c}" for c in range(obs.shape[1])),
                       None if Y_true is None else np.asarray(Y_true), X_train=X, observed=obs)
        if X_val is not None:
            if Y_val is None:
                raise ValueError("X_val was given without Y_val (its clean 0/1 labels)")
            data.X_val, data.Y_val = self._features(X_val, "X_val", fitting=False), np.asarray(Y_val)
        config = self._config(observation="given", val_variant="clean" if X_val is not None else "observed")
        return self._fitted(train(config, data=data), config, X, obs.shape[1], method,
                            np.arange(len(X)) if X_val is not None else _train_rows(len(X), self.val_frac))

    def _fit_full(self, X: np.ndarray, Y: np.ndarray, method: Any) -> "SPMLClassifier":
        """:meth:`fit` on full labels: the observation is simulated from them, as the benchmark does."""
        Y = _full_labels(Y, "y (full labels, as observation=%r asks)" % self.observation)
        data = RunData("features", "the data given to fit", tuple(f"class {c}" for c in range(Y.shape[1])), Y,
                       X_train=X)
        config = self._config(observation=self.observation, val_variant="clean")
        return self._fitted(train(config, data=data), config, X, Y.shape[1], method,
                            _train_rows(len(X), self.val_frac))

    def _config(self, *, observation: str, val_variant: str) -> RunConfig:
        return RunConfig(
            dataset="in-memory", method=self.method, hparams=dict(self.hparams or {}), head=self.head,
            hidden=self.hidden, epochs=self.epochs, batch_size=self.batch_size, lr=self.lr,
            weight_decay=self.weight_decay, seed=self.seed, patience=self.patience, observation=observation,
            val_frac=self.val_frac, val_variant=val_variant, standardize=self.standardize,
            plugins=self._plugins(),
        )

    def _fitted(self, result: Any, config: RunConfig, X: np.ndarray, n_classes: int, method: Any,
                train_rows: np.ndarray) -> "SPMLClassifier":
        if self.standardize:
            self.mean_, self.scale_ = feature_scaling(X[train_rows])
        else:
            self.mean_, self.scale_ = np.zeros(X.shape[1], np.float32), np.ones(X.shape[1], np.float32)
        self.validation_ = config.data.val_variant
        #: the selected epoch's validation mAP, on the labels ``validation_`` names (NaN without validation rows)
        self.val_map_ = float(result.val_map)
        self.model_ = result.model
        self.history_ = result.history
        self.best_epoch_ = result.best_epoch
        self.label_state_ = result.label_state
        self.n_features_in_ = X.shape[1]
        self.n_classes_ = n_classes
        #: the label columns, as scikit-learn's multi-label estimators (OneVsRestClassifier) name them
        self.classes_ = np.arange(n_classes)
        self.threshold_ = self.threshold if self.threshold is not None else method.threshold
        return self

    # -------------------------------------------------------------- prediction
    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        """Each label's probability for every row of ``X``, ``[n, C]`` float64 (each label on its
        own: a row's probabilities do not sum to 1).

        The trained network is run in float64 here: in float32 a row's scores would change in their
        last bits (about 1e-7) with the rows scored beside it, since matrix products of different
        numbers of rows round differently; in float64 they agree far below any printed digit."""
        self._check_fitted()
        X = self._features(X, "X", fitting=False)
        if len(X) == 0:
            return np.zeros((0, self.n_classes_), dtype=np.float64)
        Z = ((X - self.mean_) / self.scale_).astype(np.float32)
        if not np.isfinite(Z).all():
            raise ValueError("X is not finite after standardisation (values too large for float32?); "
                             "rescale the features the way the training features were")
        model = copy.deepcopy(self.model_).double()
        return predict_proba(model, torch.from_numpy(Z).double()).numpy()

    def decision_function(self, X: np.ndarray) -> np.ndarray:
        """The logit of :meth:`predict_proba`, ``[n, C]`` (what scorers that rank rows may call instead)."""
        p = np.clip(self.predict_proba(X), 1e-12, 1 - 1e-12)
        return np.log(p) - np.log1p(-p)

    def predict(self, X: np.ndarray) -> np.ndarray:
        """0/1 for each label of every row of ``X``, at ``threshold_`` (the method's unless ``threshold``
        was given), ``[n, C]`` in the dtype of the labels given to :meth:`fit`, as scikit-learn's
        multi-label classifiers answer."""
        return (self.predict_proba(X) >= self.threshold_).astype(getattr(self, "_label_dtype", np.uint8))

    def score(self, X: np.ndarray, y: np.ndarray, sample_weight: None = None) -> float:
        """Mean average precision (scikit-learn's AP per class, averaged) against *full* 0/1 labels ``y``.

        Observed labels are refused (``ValueError``): a -1 in ``y``, or, for an estimator fitted on
        given observed labels and more than one label, a ``y`` with at most one positive in every row -- what
        ``cross_val_score`` passes when the ``y`` it was given is observed labels. Scored against
        those, every positive nobody observed would count as a false positive. Use
        ``observation="single_positive"`` (or another simulated observation) with full labels for
        cross-validation; see the module docstring.
        """
        from .metrics import mean_average_precision

        self._check_fitted()
        if sample_weight is not None:
            raise ValueError("score takes no sample_weight: mAP weighs every class equally, every example once")
        Y = _full_labels(_label_matrix(y, "score's y"), "score's y")
        # one label: full labels too have at most one positive per row, so nothing tells them from observed ones
        if self.observation == "given" and len(Y) > 1 and Y.shape[1] > 1 and (Y.sum(1) <= 1).all():
            raise ValueError("score needs full 0/1 labels, but every row of y has at most one positive: these look "
                             "like observed labels (the y given to fit). Against them every unobserved positive "
                             "counts as an error; pass full labels, cross-validate with full labels and "
                             "observation='single_positive', or score on observed labels by name with "
                             "scoring=spmlkit.estimator.observed_map")
        return mean_average_precision(self.predict_proba(X), Y)

    # -------------------------------------------------------------- helpers
    def _plugins(self) -> list[str]:
        """``plugins`` as a list (one reference may be given as a plain string)."""
        return [self.plugins] if isinstance(self.plugins, str) else list(self.plugins or ())

    def _features(self, X: Any, name: str, *, fitting: bool) -> np.ndarray:
        """``X`` as a float32 ``[samples, features]`` array, or one line saying what it is instead.

        scikit-learn's own validation (``validate_data``) refuses sparse matrices, empty data and, on
        prediction, a number of features other than fit's, in the words its checks and users know;
        what it would answer in several lines (complex numbers, a 1-D array, NaN) is refused here
        first, in one. ``fitting``: ``X`` given to fit (at least one row; its number of features is
        kept), else one to score (no row is fine, and its features must be fit's)."""
        from scipy.sparse import issparse
        from sklearn.utils.validation import check_array, validate_data

        if not issparse(X):  # a sparse matrix: validate_data says it is refused
            arr = np.asarray(X)
            if arr.dtype.kind == "c":
                raise ValueError(f"{name} holds complex numbers (Complex data not supported): give real features, "
                                 "e.g. the real and imaginary parts as separate columns")
            if arr.ndim != 2:
                raise ValueError(f"{name} must be a 2-D [samples, features] array, got shape {arr.shape}; Reshape your "
                                 "data: X.reshape(-1, 1) for a single feature, X.reshape(1, -1) for a single sample")
        checks = dict(accept_sparse=False, dtype=np.float32, ensure_all_finite=False,
                      ensure_min_samples=1 if fitting else 0)
        if name == "X":
            arr = validate_data(self, X, reset=fitting, **checks)
        else:  # X_val: fit's number of features, nothing kept
            arr = check_array(X, input_name=name, estimator=self, **checks)
            if arr.shape[1] != self.n_features_in_:
                raise ValueError(f"{name} has {arr.shape[1]} features, but X has {self.n_features_in_}")
        if not np.isfinite(arr).all():
            raise ValueError(f"{name} contains NaN or infinite values (or values too large for float32)")
        return arr

    def _check_fitted(self) -> None:
        if not hasattr(self, "model_"):
            raise NotFittedError("this SPMLClassifier is not fitted yet; call fit(X, y) first")


def observed_map(estimator: SPMLClassifier, X: np.ndarray, Y_observed: np.ndarray) -> float:
    """mAP of ``estimator``'s scores on ``X`` against the *observed positives* of ``Y_observed``
    ({-1, 0, 1}: 1 counts as a positive, 0 and -1 as negatives), a scikit-learn scorer
    (``cross_val_score(..., scoring=observed_map)``, ``GridSearchCV(..., scoring=observed_map)``).

    What it measures (docs/protocol.md, "Your own data"): every unobserved positive counts as a
    negative, so the value is not the mAP on full labels; methods and settings scored on the same
    rows against the same labels compare fairly, but the value is not a method's mAP. Classes without an observed
    positive in ``Y_observed`` score 0 and count in the mean, as in every spmlkit mAP."""
    from .metrics import mean_average_precision

    estimator._check_fitted()
    observed = validate_observed(Y_observed, where="the observed labels scored against")
    return mean_average_precision(estimator.predict_proba(X), (observed == 1).astype(np.uint8))


def _label_matrix(Y: Any, where: str) -> np.ndarray:
    """``Y`` as a 2-D numeric array, or one line naming what it is instead, in scikit-learn's words
    where its checks and users look for them ("requires y to be passed", "Unknown label type",
    "continuous"). Which values it may hold (-1, 0, 1, or 0 and 1) is checked by the caller."""
    from scipy.sparse import issparse

    if Y is None:
        raise ValueError(f"SPMLClassifier requires y to be passed, but the target y is None: give {where}, a "
                         "[samples, classes] label matrix")
    if issparse(Y):
        raise ValueError(f"{where} is a sparse matrix; give it as a dense [samples, classes] array (y.toarray())")
    arr = np.asarray(Y)
    if not (np.issubdtype(arr.dtype, np.number) or arr.dtype == bool) or np.iscomplexobj(arr):
        raise ValueError(f"Unknown label type: {where} has dtype {arr.dtype}; labels are the numbers -1, 0 and 1 "
                         "(e.g. y.astype(int))")
    if not np.isfinite(arr).all():
        raise ValueError(f"{where} contains NaN or infinite values; labels are -1, 0 or 1")
    if np.issubdtype(arr.dtype, np.floating) and (arr != np.round(arr)).any():
        first = arr[arr != np.round(arr)].flat[0]
        raise ValueError(f"Unknown label type: {where} holds continuous values (e.g. {first:g}), not labels; a "
                         "label is -1, 0 or 1")
    if arr.ndim != 2:
        raise ValueError(f"{where} must be a 2-D [samples, classes] label matrix, got shape {arr.shape}: one column "
                         "per label, 1 where it is (observed) present; 1-D class numbers are single-label data, "
                         "one-hot them first")
    return arr


def _full_labels(Y: Any, where: str) -> np.ndarray:
    """``Y`` as a 0/1 matrix; observed labels (with -1) and anything else refused in one line."""
    arr = np.asarray(Y)
    if arr.ndim != 2:
        raise ValueError(f"{where} must be a 2-D [samples, classes] 0/1 matrix, got shape {arr.shape}")
    if (arr == -1).any():
        raise ValueError(f"{where} must hold full 0/1 labels, but it holds -1: these are observed labels "
                         "(1 positive, 0 unknown, -1 negative), which cannot score or simulate anything")
    if not np.isin(arr, (0, 1)).all():
        raise ValueError(f"{where} must hold only 0 and 1")
    return arr.astype(np.uint8)


def _train_rows(n: int, val_frac: float) -> np.ndarray:
    from .protocol import split_train_val

    return split_train_val(n, val_frac=val_frac)[0]
