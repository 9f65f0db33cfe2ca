"""SPMLClassifier against scikit-learn's own checks (``sklearn.utils.estimator_checks``): the tests
scikit-learn holds the estimators of its ecosystem to, run on the estimator as its tags declare it
(a multi-label classifier fitted on a 2-D label matrix; estimator.py, ``__sklearn_tags__``).

Every check that applies passes. The few listed in :data:`CANNOT_APPLY` feed what a
single-positive multi-label estimator cannot take, or expect a single-output classifier's
answers; each is listed with its reason, and is run in strict mode: one that starts to pass fails
here, so that it leaves the list. Two epochs on scikit-learn's small data sets: the whole run takes
seconds.
"""

from sklearn.utils.estimator_checks import parametrize_with_checks

from spmlkit.estimator import SPMLClassifier

#: labels of scikit-learn's binary checks: 1 and 2 in one column (a class number each)
_CLASS_NUMBERS = ("fits the class numbers 1 and 2 as its binary labels, in one column; a label matrix's values "
                  "mean something here (1 an observed positive, 0 unknown, -1 an observed negative), so a 2 is "
                  "refused, naming the values a label may hold")

CANNOT_APPLY = {
    "check_estimators_dtypes": _CLASS_NUMBERS,
    "check_classifier_data_not_an_array": _CLASS_NUMBERS,
    "check_fit2d_1feature": _CLASS_NUMBERS,
    "check_classifiers_classes": "fits 1-D class names ('one', 'two'); y is a [samples, labels] matrix of -1, 0 "
                                 "and 1, and a string label is refused as an unknown label type",
    "check_decision_proba_consistency": "fits 1-D class numbers and reads predict_proba's second column as the "
                                        "positive class; here y is a label matrix, and each column of predict_proba "
                                        "is one label (tests/test_estimator.py checks that decision_function is "
                                        "the logit of predict_proba)",
    "check_classifiers_train": "expects a single-output classifier: predictions of shape (n_samples,) and "
                               "probabilities that sum to 1 over the classes; a multi-label estimator answers one "
                               "column per label, each label's probability on its own",
    "check_classifier_not_supporting_multiclass": "expects a binary-only classifier's 'Only binary classification "
                                                  "is supported' for 1-D class numbers; this estimator is "
                                                  "multi-label, not binary-only, and says that y must be a label "
                                                  "matrix",
}


@parametrize_with_checks([SPMLClassifier(method="an", epochs=2)], expected_failed_checks=lambda _: CANNOT_APPLY,
                         xfail_strict=True)
def test_scikit_learns_checks(estimator, check):
    check(estimator)
