"""CRISP (docs/methods.md, "crisp"): its risk and its class-prior estimate against values worked by hand,
the estimate against known priors under the SPML observation, and the method through the trainer on
features and on images. There is no official code to compare with, so the values are the proof."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from spmlkit import losses
from spmlkit.experiments.presets import DATASET_DEFAULTS, get_preset
from spmlkit.labeling import class_prior as class_prior_module
from spmlkit.labeling.class_prior import ClassPriorEstimation, estimate_class_prior
from spmlkit.labels import LabelState
from spmlkit.losses.crisp import crisp_risk
from spmlkit.methods import METHODS, RunInfo
from spmlkit.protocol import Observation
from spmlkit.training import RunConfig, train
from spmlkit.training.config import config_from_dict
from spmlkit.training.run_data import RunData
from spmlkit.training.sources import predict_proba

LOG_TERM = math.log(4 / 0.01)  # log(4/δ) with the paper's δ = 0.01: 5.991464547107982

# ----------------------------------------------------------------------------------------- the risk
# Four training rows annotated [class 0, class 0, class 1, class 0]: r = n_p/n = (0.75, 0.25).
OBSERVED = np.array([[1, 0], [1, 0], [0, 1], [1, 0]], dtype=np.int8)
# A batch of two rows: logits (ln 3, -ln 3) with class 0 annotated, (0, ln 4) with class 1 annotated,
# so f = sigmoid(z) = [[0.75, 0.25], [0.5, 0.8]] exactly.
Z = torch.tensor([[math.log(3.0), -math.log(3.0)], [0.0, math.log(4.0)]], dtype=torch.float64)
Y = torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
PRIOR = torch.tensor([0.75, 0.5], dtype=torch.float64)  # weights π̂/r = (1, 2)


def _crisp(**kwargs) -> losses.SPMLLoss:
    fn = losses.create("crisp", observed=OBSERVED, **kwargs).double()
    fn.set_epoch(2, 10)  # past the one-epoch warm-up
    fn.set_class_prior(PRIOR)
    return fn


def test_the_risk_of_a_batch_worked_by_hand() -> None:
    # class 0: labelled (1/2)·1·2(1 - 0.75) = 0.25; aligned |(0.75 + 0.5)/2 - 0.75| = 0.125 (mean below prior)
    # class 1: labelled (1/2)·2·2(1 - 0.8) = 0.4;  aligned |(0.25 + 0.8)/2 - 0.5| = 0.025 (mean above prior)
    per_class = _crisp(reduction="none")(Z, Y)
    assert torch.allclose(per_class, torch.tensor([0.375, 0.425], dtype=torch.float64), atol=1e-15, rtol=0)
    assert _crisp(reduction="sum")(Z, Y).item() == pytest.approx(0.8, abs=1e-15)  # the paper's sum over classes
    assert _crisp()(Z, Y).item() == pytest.approx(0.4, abs=1e-15)  # "mean": over the classes
    # λ = 1 adds λ·(π̂/r)·(1/B)·log(1 + e^{-z}) on the annotated entries: (1/2)·ln(4/3) + (1/2)·2·ln(5/4)
    extra = 0.5 * math.log(4 / 3) + math.log(5 / 4)
    assert _crisp(lam=1.0, reduction="sum")(Z, Y).item() == pytest.approx(0.8 + extra, abs=1e-15)


def test_observed_negatives_are_no_annotation_of_a_class() -> None:
    """r_j is the share of rows annotated with j as a positive: the same four rows with observed negatives
    (-1) beside their positives give r = (0.75, 0.25) and the risk above; counted as annotations, the
    negatives would make r_1 = 0.75 and class 1's weight π̂/r 2/3 instead of 2."""
    with_negatives = np.array([[1, -1], [1, 0], [-1, 1], [1, -1]], dtype=np.int8)
    fn = losses.create("crisp", observed=with_negatives, reduction="none").double()
    fn.set_epoch(2, 10)
    fn.set_class_prior(PRIOR)
    assert fn.positive_rate.tolist() == [0.75, 0.25], "observed negatives counted in the annotated share r_j"
    assert torch.allclose(fn(Z, Y), torch.tensor([0.375, 0.425], dtype=torch.float64), atol=1e-15, rtol=0), \
        "observed negatives counted in the annotated share r_j"


def test_the_gradient_of_the_risk_worked_by_hand() -> None:
    # dR/dz_bj = -(1/B)·w_j·l_bj·2·f'(z) + sign_j·(1/B)·f'(z), f' = f(1 - f): 0.1875, 0.1875 / 0.25, 0.16;
    # sign_0 = -1 (mean 0.625 < 0.75), sign_1 = +1 (mean 0.525 > 0.5)
    z = Z.clone().requires_grad_()
    _crisp(reduction="sum")(z, Y).backward()
    by_hand = torch.tensor([[-0.1875 - 0.09375, 0.09375], [-0.125, -0.32 + 0.08]], dtype=torch.float64)
    assert torch.allclose(z.grad, by_hand, atol=1e-15, rtol=0)


def test_the_risk_passes_gradcheck_in_float64() -> None:
    gen = torch.Generator().manual_seed(0)
    z = (2 * torch.randn(2, 7, 4, generator=gen, dtype=torch.float64)).requires_grad_()
    y = torch.zeros(2, 7, 4, dtype=torch.float64)
    y[:, torch.arange(7), torch.randint(0, 4, (7,), generator=gen)] = 1.0
    prior = torch.tensor([[0.1, 0.9, 0.5, 0.3], [0.6, 0.2, 0.05, 0.99]], dtype=torch.float64)
    weight = 3 * prior
    assert torch.autograd.gradcheck(lambda t: crisp_risk(t, y, prior, weight, lam=0.7), (z,))


def test_the_warm_up_trains_an_and_the_risk_needs_a_prior() -> None:
    gen = torch.Generator().manual_seed(1)
    z = torch.randn(5, 2, generator=gen, dtype=torch.float64)
    y = torch.tensor([[1, 0], [0, 1], [1, 0], [1, 0], [0, 1]], dtype=torch.float64)
    fn = losses.create("crisp", observed=OBSERVED, warmup_epochs=2).double()
    an = losses.create("an")(z, y)
    assert fn(z, y).item() == pytest.approx(an.item(), abs=1e-15)  # before any set_epoch: the warm-up
    fn.set_epoch(2, 10)
    assert fn(z, y).item() == pytest.approx(an.item(), abs=1e-15)
    fn.set_epoch(3, 10)
    with pytest.raises(ValueError, match="no class prior was set"):
        fn(z, y)
    fn.set_class_prior(PRIOR)
    assert fn(z, y).item() != pytest.approx(an.item(), abs=1e-3)


def test_bad_arguments_are_refused_with_what_to_do() -> None:
    with pytest.raises(ValueError, match="needs observed="):
        losses.create("crisp")
    with pytest.raises(ValueError, match="warmup_epochs must be an integer >= 1"):
        losses.create("crisp", observed=OBSERVED, warmup_epochs=0)
    with pytest.raises(ValueError, match="lam must be >= 0"):
        losses.create("crisp", observed=OBSERVED, lam=-1.0)
    fn = losses.create("crisp", observed=OBSERVED)
    with pytest.raises(ValueError, match="vector of 2 values"):
        fn.set_class_prior([0.5, 0.5, 0.5])
    with pytest.raises(ValueError, match=r"finite and in \[0, 1\]"):
        fn.set_class_prior([0.5, 1.5])
    with pytest.raises(ValueError, match="logits have 3 classes"):
        fn(torch.zeros(2, 3), torch.zeros(2, 3))


def test_a_warm_up_as_long_as_the_run_is_refused_before_its_first_step(tmp_path, capsys) -> None:
    """`crisp --hparam warmup_epochs=50` with 2 epochs trained AN for both and was recorded as CRISP
    (APL refuses the same); one epoch of the risk is the least a CRISP run is. Refused when the method
    is built, before its first step."""
    from pathlib import Path

    from spmlkit.cli import main

    def build(epochs: int):
        info = RunInfo(num_train=4, num_classes=2, observed=OBSERVED, expected_num_pos=1.0, epochs=epochs, seed=0,
                       features=lambda: None)
        return METHODS["crisp"](info, warmup_epochs=3)

    build(4)  # three epochs of AN, then one of the risk
    for epochs in (3, 2):
        with pytest.raises(ValueError, match=f"warmup_epochs=3 is not below the {epochs} epochs it trains"):
            build(epochs)
    assert main(["train", "--method", "crisp", "--hparam", "warmup_epochs=50", "--epochs", "2", "--subset", "300",
                 "--quiet"]) == 2
    assert capsys.readouterr().err == (
        "spmlkit train: error: method 'crisp': warmup_epochs=50 is not below the 2 epochs it trains, so every epoch "
        "would train AN and none CRISP's risk; set warmup_epochs below the epochs (--hparam warmup_epochs=N) or "
        "train longer (--epochs)\n")
    assert not Path("runs").exists()  # refused before the first step: nothing is left


def test_a_checkpoint_carries_the_prior() -> None:
    fn = _crisp(lam=0.5)
    fresh = losses.create("crisp", observed=OBSERVED, lam=0.5).double()
    fresh.load_state_dict(fn.state_dict())
    fresh.set_epoch(2, 10)
    assert torch.equal(fresh.class_prior, PRIOR) and torch.equal(fresh.weight, torch.tensor([1.0, 2.0]).double())
    assert fresh(Z, Y).item() == fn(Z, Y).item()


# ------------------------------------------------------------------------------------ the estimator
def test_the_estimate_of_a_small_case_worked_by_hand() -> None:
    """Six rows. With n = 6 and n_p = 2 the bound's penalty is (1 + τ)(√(log(4/δ)/12) + √(log(4/δ)/4))/q_p
    = 1.01·(0.706604 + 1.223873)/q_p = 1.949782/q_p, so it decides between thresholds of equal q_p.

    class 0: scores 0.9 0.8 0.7 0.6 0.3 0.2, annotated rows score 0.9 and 0.6.
      z = 0.9: q = 1/6, q_p = 1/2, ratio 1/3, bound 0.3333 + 3.8996 = 4.2329
      z = 0.8: 2/6 and 1/2 -> 0.6667 + 3.8996;  z = 0.7: 3/6 and 1/2 -> 1 + 3.8996
      z = 0.6: q = 4/6, q_p = 1 -> ratio 2/3, bound 0.6667 + 1.9498 = 2.6165   <- the minimum
      z = 0.3: 5/6 + 1.9498;  z = 0.2: 1 + 1.9498.                      π̂ = 2/3 at ẑ = 0.6
    class 1: scores 0.9 0.6 0.6 0.6 0.2 0.1, annotated rows score 0.9 and the first 0.6. The three
      0.6 form one candidate (>= counts them all): q = 4/6, q_p = 1, ratio 2/3, bound 2.6165, the
      minimum again. Counting the first 0.6 alone would give 2/6 over 1 = 1/3 (bound 2.2831).
    class 2: no annotated row: no estimate, prior 0.
    """
    scores = torch.tensor([[0.9, 0.9, 0.5], [0.8, 0.6, 0.5], [0.7, 0.6, 0.4],
                           [0.6, 0.6, 0.3], [0.3, 0.2, 0.2], [0.2, 0.1, 0.1]])
    labelled = torch.tensor([[1, 1, 0], [0, 1, 0], [0, 0, 0], [1, 0, 0], [0, 0, 0], [0, 0, 0]]).bool()
    est = estimate_class_prior(scores, labelled, delta=0.01, tau=0.01)
    penalty = 1.01 * (math.sqrt(LOG_TERM / 12) + math.sqrt(LOG_TERM / 4))
    assert penalty == pytest.approx(1.949782, abs=1e-6)
    assert est.prior[:2].tolist() == pytest.approx([2 / 3, 2 / 3], abs=1e-15) and est.prior[2] == 0
    assert est.threshold[:2].tolist() == pytest.approx([0.6, 0.6]) and math.isnan(est.threshold[2])
    assert est.bound[:2].tolist() == pytest.approx([2 / 3 + penalty] * 2, abs=1e-12) and est.bound[2] == math.inf
    assert est.num_labelled.tolist() == [2, 2, 0]


def test_the_estimate_stays_between_the_annotated_share_and_one_and_chunks_change_nothing(monkeypatch) -> None:
    gen = torch.Generator().manual_seed(2)
    scores = torch.rand(300, 9, generator=gen)
    labelled = torch.rand(300, 9, generator=gen) < torch.linspace(0.01, 0.5, 9)
    whole = estimate_class_prior(scores, labelled)
    share = labelled.double().mean(0)
    assert bool((whole.prior >= share - 1e-15).all()) and bool((whole.prior <= 1).all())
    monkeypatch.setattr(class_prior_module, "_CHUNK_ENTRIES", 600)  # two classes per chunk
    chunked = estimate_class_prior(scores, labelled)
    for a, b in zip(whole, chunked):
        assert torch.equal(a, b)


def _known_priors(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """n rows of three independent labels with priors 0.1, 0.3, 0.6; rows with no positive dropped (SPML);
    one positive observed per row by spmlkit's single-positive draw; scores of positives ~ U(0.4, 1),
    of negatives ~ U(0, 0.6), independent of the other labels."""
    rng = np.random.default_rng(seed)
    y = (rng.random((n, 3)) < np.array([0.1, 0.3, 0.6])).astype(np.uint8)
    y = y[y.any(axis=1)]
    observed = Observation.parse(f"single_positive,seed={seed}").apply(y)
    scores = np.where(y == 1, rng.uniform(0.4, 1.0, y.shape), rng.uniform(0.0, 0.6, y.shape))
    return scores, observed == 1, y


def test_the_estimate_converges_to_known_priors_under_the_single_positive_observation() -> None:
    """Tolerance: with probability 1 - δ, DKW bounds |q̂ - q| by ε = √(log(4/δ)/(2n)) and |q̂_p - q_p| by
    ε_p = √(log(4/δ)/(2n_p)) at every threshold, and then π̂ <= UCB(ẑ) <= UCB(z*) <= π + (2 + τ)(ε + ε_p) /
    (q_p(z*) - ε_p), where z* = 0.6 is the lowest threshold no negative reaches (q_p(z*) = 2/3: positives
    are uniform on [0.4, 1]). We hold |π̂ - π| to that bound on both sides; it shrinks as 1/√n.

    Measured (rows with a positive, annotated rows per class -> |π̂ - π| against the bound):
    n = 10,000: 7,537 rows, n_p 623 / 2,049 / 4,865 -> 0.0036 / 0.0006 / 0.0074 against 0.30 / 0.19 / 0.14;
    n = 100,000: 74,553 rows, n_p 6,125 / 20,008 / 48,420 -> 0.0001 / 0.0037 / 0.0003 against 0.089 / 0.057 /
    0.043. (n = 1,000,000, too slow for the suite: 0.0001 / 0.0000 / 0.0002 against 0.027 / 0.018 / 0.014.)"""
    bounds, errors = [], []
    for n in (10_000, 100_000):
        scores, labelled, y = _known_priors(n, seed=n)
        est = estimate_class_prior(torch.as_tensor(scores), torch.as_tensor(labelled))
        truth = y.mean(axis=0)  # the training rows' own priors (rows with a positive: 0.134, 0.401, 0.802)
        rows, n_p = len(y), labelled.sum(axis=0)
        eps, eps_p = math.sqrt(LOG_TERM / (2 * rows)), np.sqrt(LOG_TERM / (2 * n_p))
        bounds.append((2.01 * (eps + eps_p)) / (2 / 3 - eps_p))
        errors.append(np.abs(est.prior.numpy() - truth))
        assert (errors[-1] <= bounds[-1]).all(), (n, errors[-1], bounds[-1])
    assert (bounds[1] < bounds[0] / 3).all() and (bounds[1] < 0.1).all()  # 10 times the rows: under a third
    assert errors[1].max() < errors[0].max() and errors[1].max() < 0.005


def test_the_algorithm_estimates_after_every_epoch_and_leaves_the_labels_alone() -> None:
    scores, labelled, y = _known_priors(2_000, seed=3)
    observed = labelled.astype(np.int8)
    state = LabelState(observed)
    algo = ClassPriorEstimation(delta=0.05, tau=0.02)
    assert algo.class_prior() is None and algo.is_active(1) and algo.is_active(7)
    record = algo.step(scores.astype(np.float32), state, 1)
    expected = estimate_class_prior(torch.as_tensor(scores.astype(np.float32)), torch.as_tensor(labelled),
                                    delta=0.05, tau=0.02).prior
    assert torch.equal(algo.class_prior(), expected) and torch.equal(record["class_prior"], expected)
    assert record["prior_mean"] == pytest.approx(float(expected.mean()))
    assert torch.equal(state.observed, torch.as_tensor(observed)) and state.count(0) == observed.size - labelled.sum()
    again = ClassPriorEstimation(delta=0.05, tau=0.02)
    again.load_state_dict(algo.state_dict())
    assert torch.equal(again.class_prior(), expected)
    with pytest.raises(ValueError, match="differ from this object's"):
        ClassPriorEstimation().load_state_dict(algo.state_dict())
    with pytest.raises(ValueError, match=r"delta must be a number in \(0, 1\)"):
        ClassPriorEstimation(delta=0)


def test_the_method_hands_each_estimate_to_its_loss_and_records_its_error_where_the_truth_is_known() -> None:
    method = METHODS["crisp"](RunInfo(num_train=4, num_classes=2, observed=OBSERVED, expected_num_pos=1.0, epochs=10,
                                      seed=0, features=lambda: None), lam=0.5, tau=0.05)
    assert isinstance(method.estimator, ClassPriorEstimation) and method.estimator.tau == 0.05
    assert method.criterion.lam == 0.5
    probs = torch.tensor([[0.9, 0.1], [0.8, 0.3], [0.2, 0.7], [0.6, 0.4]])
    truth = np.array([[1, 0], [1, 1], [0, 1], [1, 0]], dtype=np.uint8)
    record = method.after_epoch(1, probs=probs, state=LabelState(OBSERVED), truth=truth)
    prior = method.estimator.class_prior()
    assert torch.equal(method.criterion.class_prior, prior)
    assert record["labeling_prior_mean"] == pytest.approx(float(prior.mean()))
    assert record["class_prior_error"] == pytest.approx(float(np.abs(prior.numpy() - [0.75, 0.5]).mean()))
    assert "class_prior_error" not in method.after_epoch(2, probs=probs, state=LabelState(OBSERVED), truth=None)
    again = METHODS["crisp"](RunInfo(num_train=4, num_classes=2, observed=OBSERVED, expected_num_pos=1.0, epochs=10,
                                     seed=0, features=lambda: None), lam=0.5, tau=0.05)
    again.load_state_dict(method.state_dict())  # a resumed run trains with the same priors
    assert torch.equal(again.estimator.class_prior(), prior) and torch.equal(again.criterion.class_prior, prior)


# ------------------------------------------------------------------------------- through the trainer
def test_on_features_each_epoch_records_the_estimate_of_its_model() -> None:
    """The first epoch trains AN; the record of the best epoch holds the estimate made from the restored
    model's own training predictions, and its distance to the true priors."""
    rng = np.random.RandomState(0)
    X = rng.randn(120, 6).astype(np.float32)
    truth = (X @ rng.randn(6, 4) + 0.5 * rng.randn(120, 4) > 0.2).astype(np.uint8)
    truth[truth.sum(1) == 0, 0] = 1
    observed = Observation.parse("single_positive").apply(truth)
    data = RunData("features", "toy", ("a", "b", "c", "d"), truth, X_train=X, observed=observed,
                   X_val=X[:30], Y_val=truth[:30])

    def run(method: str):
        config = RunConfig(dataset="toy", observation="given", standardize=False, device="cpu", method=method,
                           epochs=4, batch_size=16, lr=0.01, seed=0)
        return train(config, data=data)

    fit, an = run("crisp"), run("an")
    assert fit.history[0]["train_loss"] == pytest.approx(an.history[0]["train_loss"], abs=1e-6)  # the warm-up
    assert fit.history[1]["train_loss"] != pytest.approx(an.history[1]["train_loss"], abs=1e-3)
    best = fit.history[fit.best_epoch - 1]
    estimate = estimate_class_prior(predict_proba(fit.model, torch.as_tensor(X)), torch.as_tensor(observed == 1)).prior
    assert best["labeling_prior_mean"] == pytest.approx(float(estimate.mean()), abs=1e-6)
    error = float(np.abs(estimate.numpy() - truth.mean(axis=0)).mean())
    assert best["class_prior_error"] == pytest.approx(error, abs=1e-6)
    assert "class_prior_error" not in an.history[0]


@pytest.mark.usefixtures("one_thread")
def test_on_images_the_risk_trains_after_the_warm_up() -> None:
    base = {**DATASET_DEFAULTS["digits-mosaic"], "dataset": "digits-mosaic", "mosaic_train": 96, "mosaic_test": 32,
            "batch_size": 32, "device": "cpu", "epochs": 2}
    fit = train(config_from_dict({**base, "method": "crisp"}))
    an = train(config_from_dict({**base, "method": "an"}))
    assert fit.history[0]["train_loss"] == pytest.approx(an.history[0]["train_loss"], abs=1e-5)
    assert math.isfinite(fit.history[1]["train_loss"]) and fit.history[1]["train_loss"] != an.history[1]["train_loss"]
    assert all(0 < h["labeling_prior_mean"] <= 1 and h["class_prior_error"] >= 0 for h in fit.history)


def test_the_image_presets_carry_the_papers_settings_and_table_1() -> None:
    for dataset, mean in (("voc2012", 89.820), ("coco2014", 74.640), ("nuswide", 49.996), ("cub", 21.650)):
        preset = get_preset(f"crisp/{dataset}")
        assert preset.config["epochs"] == 10 and preset.config["batch_size"] in (8, 16)
        assert preset.config["hparams"] == {"delta": 0.01, "tau": 0.01}
        assert preset.target is not None and preset.target.mean == mean and preset.target.table == "CRISP Table 1"


def test_the_true_prior_reference_trains_the_same_risk_with_the_truths_priors_and_is_no_single_positive_method(
        tmp_path, capsys) -> None:
    """crisp_true_prior: CRISP's warm-up and risk, with each class's true prior on the training rows handed
    over after every epoch instead of the estimate (its error is 0); a reference, shown beside the ranks;
    refused on data without full labels, whose truth it would need."""
    from spmlkit.cli import main

    info = RunInfo(num_train=4, num_classes=2, observed=OBSERVED, expected_num_pos=1.0, epochs=10, seed=0,
                   features=lambda: None)
    method = METHODS["crisp_true_prior"](info, lam=0.5)
    truth = np.array([[1, 0], [1, 1], [0, 1], [1, 0]], dtype=np.uint8)
    record = method.after_epoch(1, probs=torch.rand(4, 2), state=LabelState(OBSERVED), truth=truth)
    assert torch.equal(method.criterion.class_prior, torch.tensor([0.75, 0.5], dtype=torch.float64))
    assert record == {"labeling_prior_mean": 0.625, "class_prior_error": 0.0, "class_prior": [0.75, 0.5]}
    assert METHODS["crisp_true_prior"].sees_more_labels and not METHODS["crisp"].sees_more_labels
    rng = np.random.RandomState(0)
    X = rng.randn(60, 4).astype(np.float32)
    observed = np.zeros((60, 3), dtype=np.int8)
    observed[np.arange(60), np.arange(60) % 3] = 1
    data = RunData("features", "mine", ("a", "b", "c"), None, X_train=X, observed=observed)
    with pytest.raises(ValueError, match="method 'crisp_true_prior' is a reference that trains on what the training "
                                         "rows' full labels tell it, and mine has none"):
        train(RunConfig(dataset="mine", observation="given", val_variant="observed", method="crisp_true_prior",
                        epochs=2, device="cpu"), data=data)
    fit = train(RunConfig(dataset="yeast", method="crisp_true_prior", epochs=3, subset=300, lr=0.01))
    assert [h["class_prior_error"] for h in fit.history] == [0.0, 0.0, 0.0]
