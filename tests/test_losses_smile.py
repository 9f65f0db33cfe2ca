"""SMILE (docs/methods.md, "smile"): its k-NN graph, its graph convolution, its two losses, its
Beta draws, and how its two optimisers become one step.

The formulas are pinned independently of the code: the graph and the convolution's normalisation on
a 4-row graph worked out by hand, the two losses on a tiny batch from their definitions with ``math``,
the gradients by finite differences in float64, the draws against ``torch.distributions.Beta``.
``tools/smile_side_by_side.py`` compares one whole step with the official code (docs/methods.md)."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch
from sklearn.metrics import euclidean_distances

from spmlkit.labels import LabelBatch, PseudoLabels
from spmlkit.losses.smile import beta_kl_term, beta_rsample, smile_classifier_loss, smile_enhancement_loss
from spmlkit.methods import METHODS, RunInfo
from spmlkit.models import FeatureHead, ModelOutput
from spmlkit.models import graph as graph_module
from spmlkit.models.graph import GraphConv, KnnGraph, nearest_rows

torch.set_num_threads(1)

#: four rows on a line: 0, 1, 3, 7
LINE = torch.tensor([[0.0], [1.0], [3.0], [7.0]], dtype=torch.float64)
#: their 2-nearest-neighbour graph, worked out by hand from the distances
#: row 0: 1 (1), 3 (3) -> {1, 2};  row 1: 1, 2 -> {0, 2};  row 2: 2 (to 1), 3 (to 0) -> {0, 1};  row 3: 4, 6 -> {1, 2}
LINE_NEIGHBOURS = [[1, 2], [0, 2], [0, 1], [1, 2]]
#: who points at each row: 0 <- {1, 2}, 1 <- {0, 2, 3}, 2 <- {0, 1, 3}, 3 <- nobody
LINE_INCOMING = {0: [1, 2], 1: [0, 2, 3], 2: [0, 1, 3], 3: []}


def _digamma(x: float) -> float:
    """ψ(x) from its recurrence and asymptotic series (independent of torch)."""
    shift = 0.0
    while x < 8.0:
        shift -= 1.0 / x
        x += 1.0
    inv = 1.0 / (x * x)
    return shift + math.log(x) - 0.5 / x - inv * (1 / 12 - inv * (1 / 120 - inv * (1 / 252 - inv / 240)))


def _sig(z: float) -> float:
    return 1.0 / (1.0 + math.exp(-z))


def _nl(x: float) -> float:
    return -math.log(x + 1e-5)


def smile(features, num_classes: int, seed: int = 0, **hparams):
    """The SMILE method of a run whose training rows are ``features``."""
    info = RunInfo(num_train=0 if features is None else len(features), num_classes=num_classes, observed=None,
                   expected_num_pos=1.0, epochs=1, seed=seed, features=lambda: features)
    return METHODS["smile"](info, **hparams)


def batch(labels, index):
    return LabelBatch(labels, PseudoLabels(torch.zeros_like(labels, dtype=torch.bool), torch.zeros_like(labels)), index)


# --------------------------------------------------------------------------- the graph
def test_the_k_nn_graph_of_four_rows_is_the_one_worked_out_by_hand():
    graph = KnnGraph(LINE, 2)
    assert graph.neighbours.tolist() == LINE_NEIGHBOURS
    assert graph.out_degree.tolist() == [2, 2, 2, 2]
    assert graph.in_degree.tolist() == [2, 3, 3, 0]
    assert graph.adjacency(torch.tensor([3, 1, 0])).tolist() == [[0, 1, 0], [0, 0, 1], [0, 1, 0]]


def test_equal_distances_go_to_the_lower_row_as_the_official_argmin_does():
    # row 0 is at distance 1 from rows 1 and 2; row 3 is at distance 4 from row 1 and 6 from row 2
    assert nearest_rows(torch.tensor([[0.0], [1.0], [-1.0], [5.0]]), 1).tolist() == [[1], [0], [0], [1]]
    # a grid of integer points is full of exact ties: the official procedure (scikit-learn's distances of
    # float32 features, then k rounds of "first minimum, then set it to infinity") picks the same rows
    rng = np.random.RandomState(0)
    X = rng.randint(0, 4, size=(60, 3)).astype(np.float32)
    dist = euclidean_distances(X, X)
    dist[np.arange(60), np.arange(60)] = np.inf
    expected = np.zeros((60, 60), dtype=bool)
    for _ in range(3):
        col = dist.argmin(axis=1)
        expected[np.arange(60), col] = True
        dist[np.arange(60), col] = np.inf
    ours = np.zeros((60, 60), dtype=bool)
    ours[np.repeat(np.arange(60), 3), nearest_rows(torch.from_numpy(X), 3, chunk_rows=7).reshape(-1).numpy()] = True
    assert (ours == expected).all()


def test_a_graph_is_built_once_per_feature_matrix(monkeypatch):
    calls = []
    real = graph_module.nearest_rows
    monkeypatch.setattr(graph_module, "nearest_rows", lambda *a, **k: calls.append(1) or real(*a, **k))
    X = torch.randn(30, 4, generator=torch.Generator().manual_seed(11))
    first = KnnGraph(X, 3).neighbours
    second = KnnGraph(X.clone(), 3).neighbours
    KnnGraph(X + 1.0, 3)
    assert torch.equal(first, second) and len(calls) == 2  # the copy was served from memory, the shift was not


def test_graph_conv_normalisation_on_four_rows_by_hand():
    """``h_j = b + (1/sqrt(max(in_j, 1))) * sum_{i -> j} (x_i / sqrt(out_i)) W``: every out-degree is
    2 here, so each sender counts 1/sqrt(2); row 3 receives nothing and gets the bias alone."""
    graph = KnnGraph(LINE, 2)
    conv = GraphConv(1, 2).double()  # 1 -> 2: the sum over edges comes first
    with torch.no_grad():
        conv.weight.copy_(torch.tensor([[2.0, -1.0]]))
        conv.bias.copy_(torch.tensor([0.5, 0.25]))
    out = conv(graph, LINE)
    s6 = math.sqrt(6.0)
    expected = [[0.5 + 2 * 2.0, 0.25 - 2.0],  # (1 + 3) / (sqrt 2 sqrt 2) = 2
                [0.5 + 2 * 10 / s6, 0.25 - 10 / s6],  # (0 + 3 + 7) / (sqrt 2 sqrt 3)
                [0.5 + 2 * 8 / s6, 0.25 - 8 / s6],  # (0 + 1 + 7) / (sqrt 2 sqrt 3)
                [0.5, 0.25]]
    assert torch.allclose(out, torch.tensor(expected, dtype=torch.float64), rtol=0, atol=1e-14)
    # 3 -> 2 multiplies by W before the sum (DGL's order when it shrinks the rows): the same formula
    wide = GraphConv(3, 2).double()
    x = torch.randn(4, 3, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    by_hand = torch.stack([wide.bias + sum(x[i] / math.sqrt(2) for i in LINE_INCOMING[j]) @ wide.weight
                           / math.sqrt(max(len(LINE_INCOMING[j]), 1)) if LINE_INCOMING[j] else wide.bias
                           for j in range(4)])
    assert wide.weight_first and torch.allclose(wide(graph, x), by_hand.detach(), rtol=0, atol=1e-13)


@pytest.mark.parametrize("dims", [(3, 2), (2, 3)])
def test_graph_conv_gradients_match_finite_differences(dims):
    graph = KnnGraph(LINE, 2)
    conv = GraphConv(*dims).double()
    x = torch.randn(4, dims[0], generator=torch.Generator().manual_seed(2), dtype=torch.float64, requires_grad=True)

    def f(x, w, b):
        return torch.func.functional_call(conv, {"weight": w, "bias": b}, (graph, x))

    w = conv.weight.detach().clone().requires_grad_()
    b = conv.bias.detach().clone().requires_grad_()
    assert torch.autograd.gradcheck(f, (x, w, b))


def test_a_batch_needs_only_the_rows_within_two_edges_and_gets_the_same_values():
    X = torch.randn(40, 6, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    fn = smile(X, 5, seed=1).double()
    index = torch.tensor([7, 0, 33, 12])
    whole = fn.encoder()
    assert torch.allclose(fn.encoder(index), whole[index], rtol=0, atol=1e-12)
    second = fn.encoder.graph.block(index)
    first = fn.encoder.graph.block(second.sources)
    assert len(first.sources) < 40  # the batch really computes fewer rows
    g_part = torch.autograd.grad(fn.encoder(index).sum(), list(fn.encoder.parameters()))
    g_all = torch.autograd.grad(fn.encoder()[index].sum(), list(fn.encoder.parameters()))
    assert all(torch.allclose(a, b, rtol=0, atol=1e-12) for a, b in zip(g_part, g_all))


# --------------------------------------------------------------------------- the losses, by hand
Z = [[1.2, -0.4, 0.3], [-2.0, 0.7, 0.1]]
Y = [[1, 0, 0], [0, -1, 1]]  # an observed negative too: a target of 0, weighted like an observed entry
D = [[0.8, 0.3, 0.6], [0.1, 0.45, 0.9]]


@pytest.mark.parametrize("bias", [False, True])
def test_the_classifier_loss_by_hand(bias):
    mu, p, rate = 0.3, 0.05, 0.1
    total = 0.0
    for z_row, y_row, d_row in zip(Z, Y, D):
        for z, y, d in zip(z_row, y_row, d_row):
            t = mu * d + (1 - mu) * (1.0 if y == 1 else 0.0 if y == -1 else p)
            s = _sig(z)
            term = t * _nl(s) + (1 - t) * _nl(1 - s)
            total += term if y != 0 else (term / 2 if bias else term * rate)  # C - 1 = 2
    got = smile_classifier_loss(torch.tensor(Z, dtype=torch.float64), torch.tensor(Y, dtype=torch.float64),
                                torch.tensor(D, dtype=torch.float64), mu=mu, p=p, bias=bias, rate=rate)
    assert float(got) == pytest.approx(total / 6, rel=1e-13)


def test_the_enhancement_loss_by_hand():
    gamma, delta = 0.1, 0.5
    r = [[0.7, 0.2, 0.5], [0.05, 0.6, 0.95]]
    x = [[0.5, -1.0], [2.0, 0.25]]
    x_rec = [[0.25, -0.5], [1.0, 1.25]]
    adjacency = [[0.0, 1.0], [0.0, 0.0]]

    def an(probs):
        return sum(_nl(v) if y == 1 else _nl(1 - v) for pr, yr in zip(probs, Y) for v, y in zip(pr, yr)) / 6

    def kl(d):
        a, b = d + 1e-6, 1 - d + 1e-6
        return math.lgamma(a) + math.lgamma(b) + (a - 1) * _digamma(a) + (b - 1) * _digamma(b)

    rec_x = sum((u - v) ** 2 for ur, vr in zip(x_rec, x) for u, v in zip(ur, vr)) / 4
    rrt = [[sum(a * b for a, b in zip(r[i], r[j])) for j in range(2)] for i in range(2)]
    rec_a = sum((rrt[i][j] - adjacency[i][j]) ** 2 for i in range(2) for j in range(2)) / 4
    expected = an(D) + gamma * (rec_x + an(r) + rec_a) + delta * sum(kl(d) for row in D for d in row) / 6
    t = lambda v: torch.tensor(v, dtype=torch.float64)  # noqa: E731
    got = smile_enhancement_loss(t(D), t(Y), t(x), t(x_rec), t(r), t(adjacency), gamma=gamma, delta=delta)
    assert float(got) == pytest.approx(expected, rel=1e-12)


def test_the_kl_term_is_smallest_at_one_half_and_ignores_the_draw():
    d = torch.linspace(0.01, 0.99, 99, dtype=torch.float64)
    values = torch.stack([beta_kl_term(v.view(1, 1)) for v in d])
    assert int(values.argmin()) == 49 and float(d[49]) == pytest.approx(0.5)


def test_the_loss_gradients_match_finite_differences():
    t = lambda v: torch.tensor(v, dtype=torch.float64, requires_grad=True)  # noqa: E731
    labels = torch.tensor(Y, dtype=torch.float64)
    assert torch.autograd.gradcheck(
        lambda z: smile_classifier_loss(z, labels, torch.tensor(D, dtype=torch.float64), mu=0.3, p=0.05, bias=False,
                                        rate=0.1), (t(Z),))
    x = torch.tensor([[0.5, -1.0], [2.0, 0.25]], dtype=torch.float64)
    adjacency = torch.tensor([[0.0, 1.0], [0.0, 0.0]], dtype=torch.float64)
    assert torch.autograd.gradcheck(
        lambda d, x_rec, r: smile_enhancement_loss(d, labels, x, x_rec, r, adjacency, gamma=0.1, delta=0.5),
        (t(D), t([[0.25, -0.5], [1.0, 1.25]]), t([[0.7, 0.2, 0.5], [0.05, 0.6, 0.95]])))


def test_the_beta_draw_and_its_gradient_are_torch_betas_from_the_same_stream():
    a = torch.tensor([[0.3, 0.9], [0.05, 0.5]], dtype=torch.float64, requires_grad=True)
    b = (1.0 - a.detach() + 1e-5).requires_grad_()
    torch.manual_seed(5)
    theirs = torch.distributions.Beta(a, b).rsample()
    g_theirs = torch.autograd.grad((theirs * torch.arange(4.0).view(2, 2)).sum(), (a, b))
    ours = beta_rsample(a, b, torch.Generator().manual_seed(5))
    g_ours = torch.autograd.grad((ours * torch.arange(4.0).view(2, 2)).sum(), (a, b))
    assert torch.equal(ours, theirs)
    assert all(torch.equal(x, y) for x, y in zip(g_ours, g_theirs))


def test_the_losss_beta_draw_is_beta_of_d_and_one_minus_d():
    """The loss draws each entry from Beta(D + ε, 1 - D + ε), its label distribution first (the draw's mean is
    D, not 1 - D). Other tests replace the sampler with fixed draws, which hid the order; here it is watched:
    what it is given, and that the loss uses the first component of what it returns."""
    fn = smile(LINE, 2, seed=0, k=2).double()
    given, returned = [], []

    def watched(concentration):
        given.append(concentration.detach().clone())
        returned.append(torch.distributions.Dirichlet(concentration.detach()).sample())
        return returned[-1]

    fn.sample = watched
    parts = fn.terms(torch.zeros(2, 2, dtype=torch.float64), torch.tensor([[1.0, 0.0], [0.0, 1.0]]),
                     torch.tensor([0, 2]))
    (pair,) = given
    d = parts.distribution.detach()
    assert not torch.allclose(d, 1 - d)  # the two orders differ here
    assert torch.equal(pair[..., 0], d + 1e-5) and torch.equal(pair[..., 1], 1 - d + 1e-5), \
        "the Beta draw's concentrations are swapped"
    assert torch.equal(parts.draw.detach(), returned[0][..., 0])


def test_the_loss_is_the_sum_of_its_two_losses_on_the_gcn_computed_by_hand():
    fn = smile(LINE, 2, seed=0, k=2, mu=0.4, p=0.1, bias=False,
                       rate=0.2).double()
    draw = torch.tensor([[0.6, 0.3], [0.2, 0.9]], dtype=torch.float64)
    fn.sample = lambda concentration: torch.stack([draw, 1 - draw], -1)
    index = torch.tensor([3, 1])
    logits = torch.tensor([[0.5, -1.0], [0.2, 0.3]], dtype=torch.float64)
    labels = torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    parts = fn.terms(logits, labels, index)

    enc = fn.encoder
    w1, b1, w2, b2 = (p.detach() for p in (enc.conv1.weight, enc.conv1.bias, enc.conv2.weight, enc.conv2.bias))

    def conv(x, w, b):  # the normalisation above, with the hand-made incoming lists
        return torch.stack([b + (sum(x[i] for i in LINE_INCOMING[j]) / math.sqrt(2) @ w
                                 / math.sqrt(len(LINE_INCOMING[j])) if LINE_INCOMING[j] else b) for j in range(4)])

    h = conv(torch.relu(conv(LINE, w1, b1)), w2, b2)
    d = torch.sigmoid(h @ enc.fc.weight.detach().T + enc.fc.bias.detach())[index]
    assert torch.allclose(parts.distribution, d, rtol=0, atol=1e-14)
    assert torch.equal(parts.draw, draw)
    assert parts.adjacency.tolist() == [[0, 1], [0, 0]]  # row 3 points at row 1, not back
    value = fn.loss(ModelOutput(logits), batch(labels, index)).detach()
    assert torch.equal(value, (parts.classifier + parts.enhancement).detach())
    assert torch.equal(parts.classifier.detach(),
                       smile_classifier_loss(logits, labels, d, mu=0.4, p=0.1, bias=False, rate=0.2))


# --------------------------------------------------------------------------- two optimisers, one step
def test_one_adam_step_on_the_sum_equals_the_official_two_optimisers():
    """The official order: the classifier's Adam steps on its loss, then the enhancement networks'
    Adam on theirs. spmlkit: one backward of the sum, one Adam over both groups. The weights after
    the step are the same bits."""
    X = torch.randn(30, 5, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    head = FeatureHead(5, 4, "mlp", hidden=4).double()
    fn = smile(X, 4, seed=2, bias=False, p=0.05, rate=0.1).double()
    draw = torch.rand(6, 4, 2, generator=torch.Generator().manual_seed(9), dtype=torch.float64)
    index = torch.tensor([4, 17, 0, 29, 8, 11])
    labels = torch.zeros(6, 4, dtype=torch.float64)
    labels[torch.arange(6), torch.tensor([0, 1, 2, 3, 0, 1])] = 1.0
    runs = []
    for together in (False, True):
        h, f = copy.deepcopy(head), copy.deepcopy(fn)
        f.sample = lambda concentration: draw
        parts = f.terms(h(X[index]).logits, labels, index)
        if together:
            opt = torch.optim.Adam(h.param_groups(1e-3) + f.param_groups(1e-3), lr=1e-3, foreach=False)
            (parts.classifier + parts.enhancement).backward()
            opt.step()
        else:
            classifier_opt = torch.optim.Adam(h.parameters(), lr=1e-3, foreach=False)
            enhancement_opt = torch.optim.Adam(f.parameters(), lr=1e-3, foreach=False)
            parts.classifier.backward()
            classifier_opt.step()
            parts.enhancement.backward()
            enhancement_opt.step()
        runs.append([p.detach() for p in (*h.parameters(), *f.parameters())])
    assert all(torch.equal(a, b) for a, b in zip(*runs))
    assert not torch.equal(runs[0][0], head.net[0].weight)  # and the step moved the weights


# --------------------------------------------------------------------------- the loss contract
def test_declarations_and_hyperparameters():
    cls = METHODS["smile"]
    assert cls.batchable and cls.group_varies == ("lr", "weight_decay") and cls.requires == frozenset()
    assert cls.hyperparameters() == {"mu": 0.5, "p": 0.5, "bias": True, "rate": 1.0, "gamma": 0.001, "delta": 1.0,
                                     "k": 3}
    fn = smile(torch.randn(6, 2), 3)
    (group,) = fn.param_groups(0.01)
    assert (group["lr"], group["name"]) == (0.01, "smile")
    assert {id(p) for p in group["params"]} == {id(p) for p in fn.parameters()}


@pytest.mark.parametrize("kwargs, message", [
    ({"rate": 0.1}, "rate=0.1 weights the unobserved entries only when bias is false"),
    ({"bias": 1}, "bias must be true or false, got 1"),
    ({"k": 6}, "its 6-nearest-neighbour graph needs at least 7 training rows, this run has 6"),
    ({"mu": 1.5}, "mu must be <= 1.0"),
    ({"features": None}, "needs the training rows' features"),
    ({"num_classes": 1}, "needs at least 2 labels, got 1"),
])
def test_bad_arguments_are_named(kwargs, message):
    arguments = {"features": torch.randn(6, 2), "num_classes": 3, **kwargs}
    with pytest.raises(ValueError, match=message):
        smile(arguments.pop("features"), arguments.pop("num_classes"), **arguments)


def test_features_that_are_not_finite_are_refused_with_their_row():
    X = torch.randn(6, 2)
    X[4, 1] = float("nan")
    with pytest.raises(ValueError, match="training row 4's features hold nan"):
        smile(X, 3)


def test_the_draws_continue_from_a_saved_state_and_seeds_fix_the_weights():
    X = torch.randn(20, 3, generator=torch.Generator().manual_seed(6))
    z, y, index = torch.zeros(4, 3), torch.eye(3)[[0, 1, 2, 0]], torch.tensor([1, 5, 9, 13])

    def make(seed=1):
        return smile(X, 3, seed=seed)

    straight = make()
    straight.terms(z, y, index)
    second_draw = straight.terms(z, y, index).draw
    cut = make()
    cut.terms(z, y, index)
    resumed = make()
    resumed.set_extra_state(cut.get_extra_state())
    assert torch.equal(resumed.terms(z, y, index).draw, second_draw)
    assert not torch.equal(make().terms(z, y, index).draw, second_draw)
    assert all(torch.equal(a, b) for a, b in zip(make().parameters(), make().parameters()))
    assert not torch.equal(make(1).encoder.conv1.weight, make(2).encoder.conv1.weight)
    with pytest.raises(ValueError, match="keeps only its draws' generator"):
        make().set_extra_state({"class_ap": 1})
    moved = make(3)
    moved.transfer_from(straight)
    assert torch.equal(moved.terms(z, y, index).draw, straight.terms(z, y, index).draw)
    assert all(torch.equal(a, b) for a, b in zip(moved.parameters(), straight.parameters()))
    with pytest.raises(TypeError, match="another 'smile' method"):
        moved.transfer_from(METHODS["an"](RunInfo(4, 3, np.zeros((4, 3), np.int8), 1.0, 1, 0, lambda: None)))


# --------------------------------------------------------------------------- R runs in one call
def test_r_runs_of_the_method_in_one_call_equal_their_separate_steps():
    """R SMILE methods, their networks stacked as a batched group stacks them (the training rows and
    their graph are data the group shares), the first one handed the group: each run's loss, gradient
    and Beta draws equal its own separate step's, its draws from its own generator."""
    from torch.func import functional_call

    from spmlkit.training.batched import is_data_buffer

    runs, rows, classes = 3, 6, 4
    X = torch.randn(12, 5, generator=torch.Generator().manual_seed(9), dtype=torch.float64)
    methods = [smile(X, classes, seed=r, bias=False, rate=0.3).double() for r in range(runs)]
    fresh = [copy.deepcopy(m) for m in methods]  # the separate steps draw what the call of all R drew
    gen = torch.Generator().manual_seed(2)
    z = torch.randn(runs, rows, classes, generator=gen, dtype=torch.float64, requires_grad=True)
    y = torch.zeros(runs, rows, classes, dtype=torch.float64)
    y[..., 0] = 1.0
    index = torch.stack([torch.randperm(12, generator=gen)[:rows] for _ in range(runs)])
    states = [dict(m.named_parameters()) | dict(m.named_buffers()) for m in methods]
    stacked = {f"method.{k}": torch.stack([s[k] for s in states]) for k in states[0]
               if not is_data_buffer(methods[0], k)}

    class Step(torch.nn.Module):  # the method as a batched step calls it: its loss on the stacked tensors
        def __init__(self, method):
            super().__init__()
            self.method = method

        def forward(self, out, labels):
            return self.method.loss(out, labels)

    methods[0].join_group(methods)
    together = functional_call(Step(methods[0]), stacked, (ModelOutput(z), batch(y, index)), tie_weights=False)
    methods[0].join_group(None)
    apart = torch.stack([m.loss(ModelOutput(z[r]), batch(y[r], index[r])) for r, m in enumerate(fresh)])
    assert together.shape == (runs,)
    assert torch.allclose(together, apart, atol=1e-12, rtol=0)
    (g_together,) = torch.autograd.grad(together.sum(), z)
    (g_apart,) = torch.autograd.grad(apart.sum(), z)
    assert torch.allclose(g_together, g_apart, atol=1e-12, rtol=0)
