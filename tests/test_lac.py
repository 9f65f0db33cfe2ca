"""LAC/PLC (docs/methods.md, "plc" and "lac"): the losses against hand-worked values and gradcheck, the
memory queue, the strong view's operations, the label-query head, and the refusals of what a run cannot give.

The step against the official code is tools/lac_one_step.py (not a test: it needs the official code)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from spmlkit import losses
from spmlkit.data.strong_augment import OPERATIONS, StrongDraw, draw_strong, strong_view, two_views
from spmlkit.losses.consistency import plc_terms, push_queue, supervised_contrast
from spmlkit.models import LabelQueryNet, sine_positions


def _bce(z: float, y: float) -> float:
    return -(y * math.log(1 / (1 + math.exp(-z))) + (1 - y) * math.log(1 - 1 / (1 + math.exp(-z))))


# --------------------------------------------------------------------------- PLC
def test_plc_equals_the_hand_worked_value():
    weak = torch.tensor([[2.0, -1.0, 0.0]])
    strong = torch.tensor([[0.5, 0.3, -0.7]])
    labels = torch.tensor([[1.0, 0.0, 0.0]])
    # AN on the weak view over all 3 entries; sigma(0) = 0.5 is neither >= 0.6 nor < 0.4, so the third entry is
    # left out of the consistency term: a positive (observed, 1.88) and a negative (0.27) remain
    an = (_bce(2.0, 1) + _bce(-1.0, 0) + _bce(0.0, 0)) / 3
    plc = (_bce(0.5, 1) + _bce(0.3, 0)) / 2
    value = losses.create("plc", threshold=0.6, plc_weight=0.5)(weak, labels, strong=strong)
    assert value.item() == pytest.approx(an + 0.5 * plc, rel=1e-6)


def test_plc_pseudo_positives_come_from_the_threshold():
    weak = torch.tensor([[0.0, 1.0, -3.0]])  # sigma: 0.5, 0.731, 0.047
    labels = torch.tensor([[1.0, 0.0, 0.0]])
    _, _, hard = plc_terms(weak, torch.zeros_like(weak), labels, threshold=0.7)
    assert hard.tolist() == [[True, True, False]]
    _, _, hard = plc_terms(weak, torch.zeros_like(weak), labels, threshold=0.75)
    assert hard.tolist() == [[True, False, False]]


def test_plc_observed_negatives_are_targets_zero_and_no_confident_entry_gives_zero():
    weak = torch.tensor([[4.0, 0.0]])
    labels = torch.tensor([[-1.0, 0.0]])  # sigma(4) = 0.98 would be a pseudo-positive, but it is an observed negative
    an, plc, hard = plc_terms(weak, torch.tensor([[1.0, 2.0]]), labels, threshold=0.9)
    assert hard.tolist() == [[False, False]]
    assert plc.item() == pytest.approx(_bce(1.0, 0), rel=1e-6)  # only the observed negative is confident
    _, plc, _ = plc_terms(torch.zeros(1, 2), torch.ones(1, 2), torch.zeros(1, 2), threshold=0.9)
    assert plc.item() == 0.0


def test_plc_needs_the_strong_view():
    with pytest.raises(ValueError, match="strong view's logits"):
        losses.create("plc")(torch.zeros(2, 3), torch.zeros(2, 3))


def test_plc_and_lac_gradients_pass_gradcheck():
    torch.manual_seed(0)
    weak = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    strong = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    labels = torch.tensor([[1.0, 0, 0, 0], [0, 1, 0, 0], [0, 0, 0, 1]], dtype=torch.float64)
    plc = losses.create("plc", threshold=0.6)
    assert torch.autograd.gradcheck(lambda w, s: plc(w, labels, strong=s), (weak, strong))
    raw = torch.randn(2, 3, 4, 5, dtype=torch.float64, requires_grad=True)

    def lac(w, s, e):
        fn = losses.create("lac", threshold=0.6, queue_size=32)  # a fresh queue per call: a pure function
        return fn(w, labels, strong=s, embeddings=torch.nn.functional.normalize(e, dim=-1))

    assert torch.autograd.gradcheck(lac, (weak, strong, raw))


# --------------------------------------------------------------------------- the contrastive term and the queue
def test_supervised_contrast_equals_a_loop_over_anchors():
    torch.manual_seed(1)
    feats = torch.nn.functional.normalize(torch.randn(3, 2, 4, dtype=torch.float64), dim=-1)
    labels = torch.tensor([2, 5, 2])
    t = 0.5
    flat = [feats[i, v] for v in range(2) for i in range(3)]  # view-major
    kinds = [int(labels[i]) for v in range(2) for i in range(3)]
    total = 0.0
    for i, anchor in enumerate(flat):
        others = [j for j in range(6) if j != i]
        log_norm = math.log(sum(math.exp(float(anchor @ flat[j]) / t) for j in others))
        pos = [j for j in others if kinds[j] == kinds[i]]
        total += -sum(float(anchor @ flat[j]) / t - log_norm for j in pos) / len(pos)
    assert supervised_contrast(feats, labels, t).item() == pytest.approx(total / 6, rel=1e-10)


def test_queue_writes_after_the_pointer_and_starts_over_at_the_front():
    queue, kinds = torch.zeros(5, 2, 1), torch.zeros(5, dtype=torch.long)
    new = torch.ones(2, 2, 1)
    contents, kinds, pointer, filled = push_queue(queue, kinds, 0, 0, new, torch.tensor([3, 4]))
    assert (pointer, filled) == (2, 2) and kinds.tolist() == [3, 4, 0, 0, 0]
    contents, kinds, pointer, filled = push_queue(contents, kinds, pointer, filled, 2 * new, torch.tensor([7, 8]))
    assert (pointer, filled) == (4, 4) and kinds.tolist() == [3, 4, 7, 8, 0]
    # 4 + 2 reaches the end: the code writes from the front again, and what lies beyond stays
    contents, kinds, pointer, filled = push_queue(contents, kinds, pointer, filled, 3 * new, torch.tensor([1, 2]))
    assert (pointer, filled) == (2, 4) and kinds.tolist() == [1, 2, 7, 8, 0]
    assert contents[:, 0, 0].tolist() == [3, 3, 2, 2, 0]
    with pytest.raises(ValueError, match="raise the hyperparameter queue_size to at least 6"):
        push_queue(contents, kinds, 0, 0, torch.ones(6, 2, 1), torch.arange(6))


def test_queue_starts_over_when_pointer_plus_n_is_its_size_exactly():
    """4 + 2 entries in a queue of 6 reach its end exactly: the code writes them at the front, as when
    they overrun it (`pointer + n >= size`), and what lies beyond stays."""
    queue, kinds = torch.zeros(6, 1, 1), torch.arange(6)
    contents, kinds, pointer, filled = push_queue(queue, kinds, 4, 4, torch.ones(2, 1, 1), torch.tensor([7, 8]))
    assert (pointer, filled) == (2, 4), "the queue did not start over at the front when full exactly"
    assert kinds.tolist() == [7, 8, 2, 3, 4, 5] and contents[:, 0, 0].tolist() == [1, 1, 0, 0, 0, 0]
    # one short of the end: written after the pointer
    _, kinds, pointer, filled = push_queue(queue, torch.arange(6), 3, 3, torch.ones(2, 1, 1), torch.tensor([7, 8]))
    assert (pointer, filled, kinds.tolist()) == (5, 5, [0, 1, 2, 7, 8, 5])


def test_lac_keeps_earlier_entries_as_constants_and_checkpoints_its_queue():
    torch.manual_seed(2)
    labels = torch.tensor([[1.0, 0, 0], [0, 1, 0]])
    fn = losses.create("lac", threshold=0.99, queue_size=8)
    first = torch.nn.functional.normalize(torch.randn(2, 2, 3, 4), dim=-1)
    fn(torch.zeros(2, 3), labels, strong=torch.zeros(2, 3), embeddings=first)
    assert fn.queue_state.tolist() == [2, 2] and fn.queue_labels[:2].tolist() == [1, 2]
    second = torch.nn.functional.normalize(torch.randn(2, 2, 3, 4), dim=-1).requires_grad_()
    value = fn(torch.zeros(2, 3), labels, strong=torch.zeros(2, 3), embeddings=second)
    value.backward()
    assert not fn.queue.requires_grad and second.grad.abs().sum() > 0
    restored = losses.create("lac", threshold=0.99, queue_size=8)
    restored.load_state_dict(fn.state_dict())
    assert torch.equal(restored.queue, fn.queue) and restored.queue_state.tolist() == [4, 4]


def test_lac_needs_label_wise_embeddings():
    with pytest.raises(ValueError, match="label-wise embeddings of both views"):
        losses.create("lac")(torch.zeros(2, 3), torch.zeros(2, 3), strong=torch.zeros(2, 3))


# --------------------------------------------------------------------------- the strong view
def _pixels(seed: int = 0) -> np.ndarray:
    return np.random.RandomState(seed).randint(0, 256, (16, 16, 3)).astype(np.uint8)


def _draw(**changes) -> StrongDraw:
    plain = dict(flip=False, cutout=(0, 0, 9, 8, 7), ops=((0, 1, False, 1, 0, 0), (0, 1, False, 1, 0, 0)),
                 jitter=None, grey=False)
    return StrongDraw(**{**plain, **changes})


def test_strong_view_cutout_flip_and_grey():
    px = _pixels()
    # the square of half-side 4 around (0, 0), clipped, far edge included (PIL's rectangle): rows and columns 0..4
    out = strong_view(px, _draw())
    assert (out[:5, :5] == (9, 8, 7)).all() and np.array_equal(out[5:], px[5:]) and np.array_equal(out[:, 5:], px[:, 5:])
    flipped = strong_view(px, _draw(flip=True, cutout=(15, 15, 0, 0, 0)))
    assert np.array_equal(flipped[:11, :11], px[:11, ::-1][:11, :11])
    grey = strong_view(px, _draw(grey=True))
    assert (grey[..., 0] == grey[..., 1]).all() and (grey[..., 1] == grey[..., 2]).all()


def test_strong_view_randaugment_operations():
    px = _pixels(1)
    names = list(OPERATIONS)
    off = (0, 1, False, 1, 0, 0)
    plain = strong_view(px, _draw(cutout=(15, 15, 1, 2, 3), ops=(off, off)))  # the big square alone
    inverted = strong_view(px, _draw(cutout=(15, 15, 1, 2, 3), ops=((names.index("Invert"), 5, True, 1, 0, 0), off)))
    assert np.array_equal(inverted, 255 - plain)
    # the package's small cutout: level 9 is a 20-pixel square around (row 2, column 3), far edge excluded,
    # coloured (125, 122, 113)
    small = strong_view(px, _draw(cutout=(15, 15, 1, 2, 3), ops=((names.index("Cutout"), 9, True, 1, 3, 2), off)))
    assert (small[:12, :13] == (125, 122, 113)).all() and np.array_equal(small[12:], plain[12:])
    assert np.array_equal(small[:, 13:], plain[:, 13:])
    # an operation drawn but not applied changes nothing
    skipped = strong_view(px, _draw(cutout=(15, 15, 1, 2, 3), ops=((names.index("Invert"), 5, False, 1, 0, 0),) * 2))
    assert np.array_equal(skipped, plain)


def test_strong_draws_are_the_generators_and_two_views_stack_weak_then_strong():
    a = draw_strong(6, 16, torch.Generator().manual_seed(3))
    b = draw_strong(6, 16, torch.Generator().manual_seed(3))
    assert a == b and a != draw_strong(6, 16, torch.Generator().manual_seed(4))
    assert all(1 <= level <= 9 for d in a for _, level, *_ in d.ops)
    pixels = torch.from_numpy(np.stack([_pixels(i) for i in range(6)]))
    both = two_views(pixels, a)
    assert both.shape == (12, 16, 16, 3) and torch.equal(both[:6], pixels)
    assert np.array_equal(both[7].numpy(), strong_view(pixels[1].numpy(), a[1]))


# --------------------------------------------------------------------------- the label-query head
def test_sine_positions_hand_values():
    pos = sine_positions(2, 3, 8)  # 4 channels per axis: omega = 1, 1, 100, 100
    y = 2 / (2 + 1e-6) * 2 * math.pi  # the second row
    x = 1 / (3 + 1e-6) * 2 * math.pi  # the first column
    assert pos[:, 1, 0].tolist() == pytest.approx(
        [math.sin(y), math.cos(y), math.sin(y / 100), math.cos(y / 100),
         math.sin(x), math.cos(x), math.sin(x / 100), math.cos(x / 100)], abs=1e-6)


def test_the_decoders_queries_find_the_map_by_its_positions_by_hand():
    """One decoder layer, identity attention projections and no feed-forward: a label query ``q`` reads
    ``softmax(q · (m_i + p_i) / √d)`` of the map's two positions, so the position encoding ``p_i`` of the
    keys decides where it looks. With d = 4, a 1 x 2 map and ``q = (0, 0, 0, ±ln 9)``: ``p_i``'s last
    channel is cos(x_i) = -1 and +1 (x = π, 2π), the map's last channel is 0, so the weights are
    1/(1 + 9) and 9/(1 + 9) (and reversed for -ln 9); keys without positions would give 1/2 each."""
    from spmlkit.models.label_query import LabelQueryHead

    head = LabelQueryHead(4, 2, heads=1, encoder_layers=0, decoder_layers=1, ffn=2, dropout=0.0).eval()
    layer = head.decoder[0]
    with torch.no_grad():
        layer.multihead_attn.in_proj_weight.copy_(torch.eye(4).repeat(3, 1))
        layer.multihead_attn.in_proj_bias.zero_()
        layer.multihead_attn.out_proj.weight.copy_(torch.eye(4))
        layer.multihead_attn.out_proj.bias.zero_()
        for linear in (layer.linear1, layer.linear2):
            linear.weight.zero_()
            linear.bias.zero_()
        s = math.log(9.0)
        head.queries.weight.copy_(torch.tensor([[0.0, 0.0, 0.0, s], [0.0, 0.0, 0.0, -s]]))
    m1, m2 = torch.tensor([1.0, -1.0, 0.0, 0.0]), torch.tensor([1.0, 0.0, -1.0, 0.0])
    fmap = torch.stack([m1, m2], dim=1).view(1, 4, 1, 2)  # [B, d, h, w]

    def layer_norm(v: torch.Tensor) -> torch.Tensor:  # three LayerNorms in a row: norm2, norm3, decoder_norm
        for _ in range(3):
            v = (v - v.mean()) / torch.sqrt(v.var(unbiased=False) + 1e-5)
        return v

    out = head.outputs(fmap)[0]
    for c, (a1, a2) in enumerate(((0.1, 0.9), (0.9, 0.1))):
        expected = layer_norm(a1 * m1 + a2 * m2)
        assert torch.allclose(out[c], expected, atol=1e-5), \
            f"class {c}'s query did not read the map by its positions: {out[c].tolist()} != {expected.tolist()}"


def test_label_query_net_gives_logits_and_unit_embeddings():
    torch.manual_seed(0)
    body = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, stride=4), torch.nn.ReLU())
    net = LabelQueryNet(body, 8, 5, heads=4, ffn=16, embed_dim=6).eval()
    x = torch.randn(3, 3, 16, 16)
    assert net.outputs == {"embeddings"} and net(x).embeddings is None  # predictions need no embeddings
    net.train()
    torch.manual_seed(1)  # the decoder's dropout draws the same masks for both passes
    logits, _, emb, _ = net(x)
    assert logits.shape == (3, 5) and emb.shape == (3, 5, 6)
    assert torch.allclose(emb.norm(dim=-1), torch.ones(3, 5))
    torch.manual_seed(1)
    assert torch.allclose(net.head(body(x)), logits)  # one pass of the head: logits and embeddings together
    assert [g["name"] for g in net.param_groups(1e-3, 10.0)] == ["backbone", "head"]
    with pytest.raises(ValueError, match="divisible by its 4 heads"):
        LabelQueryNet(body, 6, 5)


# --------------------------------------------------------------------------- runs that cannot be given
def test_plc_on_features_is_refused_in_one_line(tmp_path):
    from spmlkit.errors import InputError
    from spmlkit.experiments.presets import resolve_config
    from spmlkit.training import train

    config = resolve_config({"dataset": "yeast", "method": "plc", "epochs": 1, "out": str(tmp_path / "run")})
    with pytest.raises(InputError) as err:
        train(config)
    assert "method 'plc' has no meaning on a feature dataset ('yeast'): it learns from a weak and a strong " \
           "augmentation" in str(err.value) and "\n" not in str(err.value)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("method", ["lac", "plc"])
def test_a_two_view_method_on_grey_images_is_refused_in_one_line_before_training(method, capsys):
    """`--method lac` on the digits mosaic was a 55-line traceback from a loader worker, ending in "the strong
    view of LAC/PLC augments RGB photographs"."""
    from pathlib import Path

    from spmlkit.cli import main

    args = ["train", "--method", method, "--dataset", "digits-mosaic", "--epochs", "1", "--out", "grey", "--quiet"]
    assert main([*args, *(["--image-head", "label_query"] if method == "lac" else [])]) == 2
    assert capsys.readouterr().err == (
        f"spmlkit train: error: method {method!r} trains on a strong view of each image made with colour operations "
        "(colour jitter, RandAugment, greyscale) of RGB photographs, and digits-mosaic's images are grey; choose a "
        "method that trains on one view (`spmlkit methods`), or a data set of colour images\n")
    assert not Path("grey").exists()


def test_lac_brings_its_label_query_head_and_refuses_a_run_without_one():
    """A method brings its own model parts: ``--method lac`` trains on the label-query head with the
    projector its contrast reads, without being told; a run that sets another head is refused."""
    from spmlkit.methods import get_method
    from spmlkit.training.config import RunConfig
    from spmlkit.training.network import network_spec
    from spmlkit.training.plan import _check_method_fits
    from spmlkit.training.distributed import Distributed

    config = RunConfig(dataset="voc2012", method="lac")
    spec = _check_method_fits(config, get_method("lac"), "images", Distributed())
    assert (spec.head, spec.projector, spec.outputs) == ("label_query", 128, {"embeddings"})
    assert network_spec(RunConfig(dataset="voc2012", method="plc"), "images").projector is None  # plc reads none
    linear = RunConfig(dataset="voc2012", method="lac", image_head="linear")
    with pytest.raises(ValueError, match="method 'lac' reads the model's embeddings, which the linear head does not "
                                         "give: set image_head: label_query"):
        _check_method_fits(linear, get_method("lac"), "images", Distributed())
    crops = RunConfig(dataset="voc2012", method="plc", augment="multiscale_crop")
    with pytest.raises(ValueError, match="does not combine with crops"):
        _check_method_fits(crops, get_method("plc"), "images", Distributed())


def test_init_weights_refuses_another_network(tmp_path):
    from spmlkit.training.checkpoint import load_initial_weights

    torch.manual_seed(0)
    body = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, stride=4), torch.nn.ReLU())
    stage1 = LabelQueryNet(body, 8, 5, ffn=16)
    torch.save({"model": stage1.state_dict()}, tmp_path / "best.pt")
    stage2 = LabelQueryNet(torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, stride=4), torch.nn.ReLU()), 8, 5, ffn=16,
                           embed_dim=4)
    load_initial_weights(stage2, tmp_path / "best.pt")  # the projector is new: it keeps its own initialisation
    assert torch.equal(stage2.head.queries.weight, stage1.head.queries.weight)
    other = LabelQueryNet(torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, stride=4), torch.nn.ReLU()), 8, 7, ffn=16)
    with pytest.raises(ValueError, match="of another shape: head.bias"):
        load_initial_weights(other, tmp_path / "best.pt")


def test_plc_presets_target_crisp_table_1():
    from spmlkit.experiments.presets import get_preset

    assert [get_preset(f"plc/{d}").target[1] for d in ("voc2012", "coco2014", "nuswide", "cub")] == \
        [88.021, 70.422, 46.211, 21.840]
    lac = get_preset("lac/coco2014")
    assert lac.targets == () and lac.config["hparams"]["threshold"] == 0.9 and lac.config["image_head"] == "label_query"
