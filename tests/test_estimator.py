"""SPMLClassifier: fit, predict, scikit-learn's protocol. It takes no device: it trains feature
runs, which ``device: auto`` puts on the CPU (training/plan.py), so its numbers are the CPU's on
any machine."""

import numpy as np
import pytest

from spmlkit import protocol
from spmlkit.data.yeast import load_yeast
from spmlkit.estimator import SPMLClassifier


@pytest.fixture(scope="module")
def yeast():
    return load_yeast()


def test_fit_predict_on_observed_labels_only(yeast):
    obs = protocol.observe_labels(yeast.Y_train)
    clf = SPMLClassifier(method="em", epochs=5, seed=0).fit(yeast.X_train, obs)
    p = clf.predict_proba(yeast.X_test)
    assert p.shape == yeast.Y_test.shape and ((p >= 0) & (p <= 1)).all()
    assert clf.validation_ == "observed" and clf.threshold_ == 0.75
    np.testing.assert_array_equal(clf.predict(yeast.X_test), (p >= 0.75).astype(np.uint8))  # EM's threshold
    # scikit-learn's decision_function is the logit of predict_proba (scorers may call either)
    from scipy.special import logit

    np.testing.assert_allclose(clf.decision_function(yeast.X_test), logit(p.astype(np.float64)), rtol=0, atol=1e-12)
    # score is scikit-learn's average precision per class, averaged
    from sklearn.metrics import average_precision_score

    ap = [average_precision_score(yeast.Y_test[:, c], p[:, c]) for c in range(p.shape[1])]
    assert clf.score(yeast.X_test, yeast.Y_test) == pytest.approx(float(np.mean(ap)), abs=1e-12)
    # a trained model beats the prior (mAP of constant scores = mean label frequency)
    assert np.mean(ap) > yeast.Y_test.mean(0).mean() + 0.05
    same = SPMLClassifier(method="em", epochs=5, seed=0).fit(yeast.X_train, obs)
    assert np.array_equal(same.predict_proba(yeast.X_test), p)


def test_params_and_errors(yeast):
    clf = SPMLClassifier()
    assert clf.set_params(lr=0.01).get_params()["lr"] == 0.01
    with pytest.raises(ValueError, match="Invalid parameter 'lrr'"):
        clf.set_params(lrr=1)
    from sklearn.exceptions import NotFittedError

    for method in (clf.predict_proba, clf.predict, clf.decision_function):  # scikit-learn's exception, every method
        with pytest.raises(NotFittedError, match="not fitted yet; call fit"):
            method(yeast.X_test)
    with pytest.raises(ValueError, match="only contain -1"):
        clf.fit(yeast.X_train, yeast.Y_train * 2)


def test_a_real_scikit_learn_estimator(yeast):
    from sklearn.base import BaseEstimator, clone

    clf = SPMLClassifier(method="em", epochs=3, lr=0.01)
    assert isinstance(clf, BaseEstimator)
    twin = clone(clf)
    assert twin.get_params() == clf.get_params() and twin is not clf
    assert repr(clf) == "SPMLClassifier(epochs=3, lr=0.01, method='em')"
    obs = protocol.observe_labels(yeast.Y_train)
    fitted = clf.fit(yeast.X_train[:200], obs[:200])
    assert not hasattr(clone(fitted), "model_")   # clone copies parameters, not the fit


def test_bad_fits_are_explained(yeast):
    obs = protocol.observe_labels(yeast.Y_train)
    with pytest.raises(ValueError, match="no observed positive"):
        SPMLClassifier(epochs=1).fit(yeast.X_train, np.zeros_like(obs))
    with pytest.raises(ValueError, match="warmup_epochs < num_epochs"):
        SPMLClassifier(epochs=1).fit(yeast.X_train, obs)   # APL's default warm-up is 5 epochs
    big = yeast.X_train.astype(np.float64) * 1e30
    with pytest.raises(ValueError, match="too large to standardise"):
        SPMLClassifier(method="an", epochs=1).fit(big, obs)
    clf = SPMLClassifier(method="an", epochs=1).fit(yeast.X_train, obs)
    assert clf.predict_proba(yeast.X_test[:0]).shape == (0, yeast.Y_train.shape[1])


def test_classes_and_score_refuse_observed_labels(yeast):
    obs = protocol.observe_labels(yeast.Y_train)
    clf = SPMLClassifier(method="an", epochs=2).fit(yeast.X_train[:400], obs[:400])
    np.testing.assert_array_equal(clf.classes_, np.arange(yeast.Y_train.shape[1]))  # scikit-learn's multi-label form
    with pytest.raises(ValueError, match="holds -1: these are observed labels"):
        clf.score(yeast.X_train[:50], protocol.Observation.parse("pos=1,neg=1").apply(yeast.Y_train)[:50])
    with pytest.raises(ValueError, match="at most one positive: these look like observed labels"):
        clf.score(yeast.X_train[:50], obs[:50])
    # full labels are scored: the value is the mAP of predict_proba against them
    from spmlkit.metrics import mean_average_precision

    assert clf.score(yeast.X_test, yeast.Y_test) == mean_average_precision(clf.predict_proba(yeast.X_test),
                                                                           yeast.Y_test)


def test_cross_val_score_trains_on_simulated_observations_and_scores_on_full_labels(yeast):
    """scikit-learn passes one y to fit and score: full labels, the observation drawn per training fold."""
    from sklearn.base import clone
    from sklearn.model_selection import KFold, cross_val_score

    from spmlkit.metrics import mean_average_precision

    X, Y = yeast.X_train[:600], yeast.Y_train[:600]
    clf = SPMLClassifier(method="an", epochs=2, observation="single_positive")
    folds = KFold(3, shuffle=True, random_state=0)
    scores = cross_val_score(clf, X, Y, cv=folds, error_score="raise")
    expected = []
    for tr, te in folds.split(X):
        fitted = clone(clf).fit(X[tr], Y[tr])
        # each fold trained on single positives drawn from its own rows, exactly the protocol's draw
        np.testing.assert_array_equal(fitted.label_state_.observed,
                                      protocol.observe_labels(Y[tr])[protocol.split_train_val(len(tr))[0]])
        expected.append(mean_average_precision(fitted.predict_proba(X[te]), Y[te]))
    np.testing.assert_allclose(scores, expected, rtol=0, atol=1e-12)
    assert scores.min() > Y.mean(0).mean()  # above the prior: scored on the truth, not on single positives
    # given observed labels, cross-validation cannot score: refused, not silently wrong
    with pytest.raises(ValueError, match="look like observed labels"):
        cross_val_score(SPMLClassifier(method="an", epochs=1), X, protocol.observe_labels(Y), cv=folds,
                        error_score="raise")


def test_what_scikit_learn_tools_are_told_and_refused(yeast):
    """The tags scikit-learn's tools read, and the inputs its checks hold an estimator to refusing, each in
    one line: sparse features (said to be sparse), no rows or no features (scikit-learn's words), complex
    numbers, a 1-D X, a y that is not given, continuous or of strings, features other than fit's."""
    import scipy.sparse
    from sklearn.base import is_classifier
    from sklearn.utils import get_tags

    tags = get_tags(SPMLClassifier())
    assert is_classifier(SPMLClassifier()) and tags.classifier_tags.multi_label
    assert tags.target_tags.multi_output and not tags.target_tags.single_output and not tags.input_tags.sparse
    X, obs = yeast.X_train[:300], protocol.observe_labels(yeast.Y_train[:300])
    refused = [
        (scipy.sparse.csr_matrix(X), obs, "Sparse data was passed for X, but dense data is required"),
        (X[:0], obs[:0], r"Found array with 0 sample\(s\) \(shape=\(0, 103\)\) while a minimum of 1 is required"),
        (X[:, :0], obs, r"Found array with 0 feature\(s\) \(shape=\(300, 0\)\) while a minimum of 1 is required"),
        (X.astype(np.complex64), obs, r"X holds complex numbers \(Complex data not supported\)"),
        (X[:, 0], obs, r"X must be a 2-D \[samples, features\] array, got shape \(300,\); Reshape your data"),
        (X, None, "requires y to be passed, but the target y is None"),
        (X, obs + 0.5, r"Unknown label type: y holds continuous values \(e\.g\. 0\.5\)"),
        (X, obs.astype(str), "Unknown label type: y has dtype <U4"),
        (X, obs[:, 0], r"y must be a 2-D \[samples, classes\] label matrix, got shape \(300,\)"),
    ]
    for features, labels, message in refused:
        with pytest.raises((ValueError, TypeError), match=message) as caught:  # sparse: scikit-learn's TypeError
            SPMLClassifier(method="an", epochs=1).fit(features, labels)
        assert "\n" not in str(caught.value), str(caught.value)
    clf = SPMLClassifier(method="an", epochs=1).fit(X, obs)
    with pytest.raises(ValueError, match="X has 102 features, but SPMLClassifier is expecting 103 features as input"):
        clf.predict(X[:, 1:])
    # predict answers in the labels' dtype (here int8, the protocol's), as scikit-learn's multi-label classifiers do
    assert obs.dtype == np.int8 and clf.predict(X).dtype == np.int8
    assert SPMLClassifier(method="an", epochs=1).fit(X, obs.astype(bool)).predict(X[:5]).dtype == bool


def test_a_rows_scores_do_not_depend_on_the_rows_scored_beside_it(yeast):
    """In float32 a row's score changed in its last bits with the number of rows scored together (one
    matrix product rounds differently from another); the estimator scores in float64."""
    clf = SPMLClassifier(method="an", epochs=2).fit(yeast.X_train[:600], protocol.observe_labels(yeast.Y_train[:600]))
    together = clf.decision_function(yeast.X_test[:200])
    alone = np.vstack([clf.decision_function(yeast.X_test[i : i + 1]) for i in range(200)])
    np.testing.assert_allclose(alone, together, rtol=1e-12, atol=1e-12)
    reversed_order = clf.decision_function(yeast.X_test[:200][::-1])[::-1]
    np.testing.assert_allclose(reversed_order, together, rtol=1e-12, atol=1e-12)
    assert clf.predict_proba(yeast.X_test[:3]).dtype == np.float64


def test_one_label_is_scored_on_its_full_labels(yeast):
    """With one label, full labels have at most one positive per row too: score cannot tell them from
    observed ones, so it scores them (before, it refused every one-label y)."""
    from spmlkit.metrics import mean_average_precision

    Y = yeast.Y_train[:400, :1]
    clf = SPMLClassifier(method="an", epochs=2).fit(yeast.X_train[:400], Y)
    assert clf.score(yeast.X_test, yeast.Y_test[:, :1]) == mean_average_precision(clf.predict_proba(yeast.X_test),
                                                                                  yeast.Y_test[:, :1])
