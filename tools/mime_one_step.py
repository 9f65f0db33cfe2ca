"""MIME: one training step and one pseudo-label round of the official code beside spmlkit's ``mime``.

Not part of the package or the tests (docs/methods.md, "mime", records what it measured). Two halves,
run in two processes, so that the official code never sees spmlkit and the reverse:

1. ``official``: the code of ``palm-biaoliu/mime`` at commit 06e15de (unchanged; e.g.
   ``git --git-dir=<mirror> archive HEAD | tar -x -C /tmp/official-mle``). It imports the code's
   ``train_mime.py`` as the script would run (``-d pascal``), builds the run with the code's own
   ``initialize_training_run`` (the model ``build_LEModel_VIB``, the Adamax optimiser and its two
   parameter groups), takes one step with the code's ``run_train_phase`` (its forward, its
   ``compute_batch_loss`` with the ``VIB`` loss, backward, the optimiser step) and one round of its
   ``set_pseudo_labeling``, and writes to an ``.npz`` the weights before, the batch, every random
   draw (the global generator's state before the forward, which fixes the transformer's dropout
   masks, and the bottleneck's 10 normal draws), the logits, codes and loss, the gradients, the
   weights after, the round's predictions and the label matrix after it::

       /work/main/.venv/bin/python tools/mime_one_step.py official --code /tmp/official-mle \\
           --out /tmp/mime_official.npz

2. ``ours`` (with spmlkit importable): builds the ``mime/<dataset>`` presets' model and recipe on the code's
   ResNet-18 (``image_head: label_query``, ``bottleneck`` 256, ``constant_bn``, ``train_only`` layers 2-4 and
   the head), loads the same weights, takes the same step through spmlkit's own step (``RunStep`` with the
   ``mime`` method, the recorded draws passed in as ``noise``, the generator set to the recorded
   state for the dropout masks) and optimiser (``optimizer: adamax``, ``head_lr_mult`` 10; ``--numerics
   stable`` and ``--averaged`` measure spmlkit's defaults instead of the code's arithmetic), runs
   :class:`spmlkit.labeling.ConfidentPositives` on the round's recorded predictions, and prints each
   quantity's largest absolute difference::

       PYTHONPATH=src /work/main/.venv/bin/python tools/mime_one_step.py ours --record /tmp/mime_official.npz

What the official side needs on this machine, done from outside its files: the backbone is a
random-weight ResNet-18 (the code's ``Backbone`` asks torchvision for ``pretrained=True``, which
would download; the code supports ``resnet18`` as ``P['arch']``), the loader runs in the main
process (``num_workers`` 0), ``numpy.Inf`` (removed in numpy 2) is given ``numpy.inf``, and
``get_data`` returns four in-memory 448 x 448 images instead of reading VOC from disk (the code fixes
the image size at 448: its position encoding is 14 x 14). The images' flips are drawn here, before
either side sees them. ``P`` is the script's ``pascal`` settings with ``theta`` 0.5 and ``warmup_epoch``
1, so that one round on a random network makes pseudo-labels.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

ROWS, CLASSES, SIZE, WIDTH, THETA, LR, BETA, SEED = 4, 20, 448, 256, 0.5, 1e-4, 1e-4, 7


def _inputs() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Four normalised 448 x 448 images (smooth random patterns, each flipped or not by a draw made
    here), their full labels and their observed labels (one positive per row, and one extra positive
    in row 0 as a pseudo-label of an earlier round would be)."""
    rng = np.random.RandomState(SEED)
    coarse = rng.randn(ROWS, 3, 7, 7).astype(np.float32)
    images = np.kron(coarse, np.ones((1, 1, 64, 64), dtype=np.float32)) + 0.3 * rng.randn(ROWS, 3, SIZE, SIZE)
    flips = rng.rand(ROWS) < 0.5
    images[flips] = images[flips][..., ::-1]
    truth = (rng.rand(ROWS, CLASSES) < 0.15).astype(np.float64)
    observed = np.zeros((ROWS, CLASSES))
    for r in range(ROWS):
        c = int(rng.randint(CLASSES))
        truth[r, c] = observed[r, c] = 1.0
    observed[0, (int(np.argmax(observed[0])) + 1) % CLASSES] = 1.0
    return np.ascontiguousarray(images, dtype=np.float32), truth, observed


# ------------------------------------------------------------------------------------------------ official
def official(args: argparse.Namespace) -> None:
    import torch
    import torchvision

    np.Inf = np.inf  # numpy 2 removed the alias the code's logger uses
    code = Path(args.code).resolve()
    sys.path.insert(0, str(code))
    resnet18 = torchvision.models.resnet18
    torchvision.models.resnet18 = lambda **kw: resnet18(**{k: v for k, v in kw.items() if k != "pretrained"})
    work = tempfile.mkdtemp(prefix="mime-official-")
    os.chdir(work)  # the script's logger writes results_mime/ here
    sys.argv = ["train_mime.py", "-d", "pascal"]
    stdout = sys.stdout
    import train_mime  # noqa: E402 - the script, as `python train_mime.py -d pascal` starts it

    sys.stdout = stdout
    from utils.instrumentation import train_logger

    images, truth, observed = _inputs()

    class Rows(torch.utils.data.Dataset):
        """The code's dataset interface (``ds_multilabel``'s items) over in-memory images."""

        num_classes = CLASSES

        def __init__(self) -> None:
            self.label_matrix, self.label_matrix_obs = truth.copy(), observed.copy()

        def __len__(self) -> int:
            return ROWS

        def __getitem__(self, idx: int) -> dict:
            return {"image": torch.from_numpy(images[idx].copy()),
                    "label_vec_obs": torch.FloatTensor(np.copy(self.label_matrix_obs[idx, :])),
                    "label_vec_true": torch.FloatTensor(np.copy(self.label_matrix[idx, :])), "idx": idx}

    train_mime.datasets.get_data = lambda P: {"train": Rows(), "val": Rows(), "test": Rows()}
    P = {"dataset": "pascal", "loss": "VIB", "train_mode": "end_to_end", "val_set_variant": "clean", "lr_mult": 10.0,
         "stop_metric": "map", "ls_coef": 0.1, "seed": 1200, "use_pretrained": False, "num_workers": 0,
         "split_seed": 1200, "val_frac": 0.2, "ss_seed": 999, "ss_frac_train": 1.0, "ss_frac_val": 1.0,
         "sample_times": 5, "bsize": ROWS, "lr": LR, "wd": 1e-4, "beta": BETA, "theta": THETA, "z_dim": WIDTH,
         "warmup_epoch": 1, "T": 1.0, "train_set_variant": "observed", "num_epochs": 1,
         "freeze_feature_extractor": False, "use_feats": False, "arch": "resnet18",
         "feature_extractor_arch": "resnet18", "expected_num_pos": 1.5}
    torch.manual_seed(SEED)
    P, Z, model = train_mime.initialize_training_run(P, None, None, None)
    out: dict[str, np.ndarray] = {}
    for name, value in model.state_dict().items():
        out[f"before/{name}"] = value.detach().numpy().copy()

    seen = {"train": 0, "eval": 0}
    forward = model.forward

    def recorded_forward(x, *a, **kw):
        key = "train" if model.training else "eval"
        if key == "train":
            out["rng_before_forward"] = torch.get_rng_state().numpy().copy()
            out["x"] = x.detach().numpy().copy()
        result = forward(x, *a, **kw)
        if key == "train":
            out["logits"], out["mu"], out["std"] = (t.detach().numpy().copy() for t in result)
        else:
            out[f"eval{seen['eval']}_logits"] = result[0].detach().numpy().copy()
        seen[key] += 1
        return result

    model.forward = recorded_forward
    normal = torch.distributions.normal._standard_normal
    draws: list[np.ndarray] = []

    def recorded_normal(*a, **kw):
        eps = normal(*a, **kw)
        draws.append(eps.detach().numpy().copy())
        return eps

    torch.distributions.normal._standard_normal = recorded_normal
    loss_fn = train_mime.compute_batch_loss

    def recorded_loss(batch, P_, Z_):
        batch = loss_fn(batch, P_, Z_)
        out["index"] = np.asarray(batch["idx"]).copy()
        out["labels"] = batch["label_vec_obs"].detach().numpy().copy()
        out["loss"] = np.asarray(float(batch["loss_tensor"].detach()))
        return batch

    train_mime.compute_batch_loss = recorded_loss
    logger = train_logger(P)
    P["epoch"] = 1
    train_mime.run_train_phase(model, P, Z, logger, 1, "train")
    out["noise_train"] = draws[0]
    for name, p in model.named_parameters():
        if p.grad is not None:
            out[f"grad/{name}"] = p.grad.detach().numpy().copy()
    for name, value in model.state_dict().items():
        out[f"after/{name}"] = value.detach().numpy().copy()
    # one pseudo-label round (the code's, after the epoch): its predictions sample the codes in eval mode
    seen["eval"] = 0
    state = torch.get_rng_state()
    train_mime.set_pseudo_labeling(model, P, Z, logger, 1, "train")
    torch.set_rng_state(state)  # the round's order again: the loader draws it from this state first
    out["round_order"] = np.concatenate([b["idx"].numpy() for b in Z["dataloaders"]["train"]])
    out["round_labels_after"] = np.asarray(Z["datasets"]["train"].label_matrix_obs, dtype=np.float64).copy()
    out["round_observed_before"] = observed
    out["theta"] = np.asarray(THETA)
    np.savez(args.out, **out)
    print(f"wrote {args.out}: loss {float(out['loss']):.8f}, {len(draws)} normal draws")


# ------------------------------------------------------------------------------------------------ ours
def _our_name(name: str) -> str | None:
    """The official state-dict key ``name`` as spmlkit's :class:`BottleneckNet` names it (None: no counterpart)."""
    rules = (("backbone.0.body.", "backbone."), ("encoder.encoder.layers.", "head.queries.encoder."),
             ("encoder.decoder.layers.", "head.queries.decoder."), ("encoder.decoder.norm.", "head.queries.decoder_norm."),
             ("query_embed.weight", "head.queries.queries.weight"), ("fc.W", "head.bottleneck.classifier.weight"),
             ("fc.b", "head.bottleneck.classifier.bias"), ("proj.0.", "head.bottleneck.hidden."),
             ("proj.2.", "head.bottleneck.stats."))
    for theirs, mine in rules:
        if name.startswith(theirs):
            return mine + name[len(theirs):]
    return None  # backbone.1.pe: the position encoding, which spmlkit computes


def ours(args: argparse.Namespace) -> None:
    import torch

    from spmlkit.labeling import ConfidentPositives
    from spmlkit.labels import LabelState
    from spmlkit.methods import METHODS, RunInfo
    from spmlkit.training.config import RunConfig
    from spmlkit.training.network import build_run_model
    from spmlkit.training.recipe import prepare_parts
    from spmlkit.training.step import RunStep
    from spmlkit.training.trainer import _optimizer

    rec = dict(np.load(args.record))
    report: list[tuple[str, float, float]] = []

    def compare(what: str, a, b) -> None:
        a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
        report.append((what, float(np.max(np.abs(a - b))), float(np.max(np.abs(b)))))

    def mapped(prefix: str) -> dict[str, torch.Tensor]:
        values = {}
        for key, value in rec.items():
            if key.startswith(prefix) and (mine := _our_name(key[len(prefix):])) is not None:
                t = torch.from_numpy(value)
                values[mine] = t[0] if mine.startswith("head.bottleneck.classifier.") else t
        return values

    images, truth, observed = _inputs()
    compare("input images", images[rec["index"]], rec["x"])
    # the mime/<dataset> presets' model and recipe, on the code's ResNet-18 (training.network.build_run_model):
    # label queries, the bottleneck, constant BatchNorm, the stem and layer1 frozen
    config = RunConfig(dataset="voc2012", method="mime", backbone="torchvision:resnet18", pretrained=False,
                       image_head="label_query", bottleneck=WIDTH, bottleneck_samples=10, constant_bn=True,
                       train_only=["layer2", "layer3", "layer4", "head"], optimizer="adamax", lr=LR, head_lr_mult=10.0)
    model = build_run_model(config, "images", CLASSES)
    own = model.state_dict()
    model.load_state_dict(mapped("before/"))
    prepare_parts(config, model)
    optimizer = _optimizer(config, model.param_groups(LR, 10.0))
    info = RunInfo(num_train=ROWS, num_classes=CLASSES, observed=observed.astype(np.int8), expected_num_pos=1.0,
                   epochs=1, seed=0, features=lambda: None)
    step = RunStep(model, METHODS["mime"](info, beta=BETA, numerics=args.numerics))
    model.train()
    index = torch.as_tensor(rec["index"], dtype=torch.long)
    labels = torch.as_tensor(rec["labels"], dtype=torch.float32)
    no_pseudo = torch.zeros(labels.shape, dtype=torch.bool)
    x = torch.from_numpy(images[rec["index"]])
    torch.set_rng_state(torch.from_numpy(rec["rng_before_forward"]))  # the same dropout masks
    noise = torch.from_numpy(rec["noise_train"])  # the code's 10 draws, averaged as it averages them
    if args.averaged:  # their mean as one draw, the form spmlkit's own runs draw (docs/methods.md, "mime")
        noise = noise.mean(dim=0)
    with torch.no_grad():
        logits, _, _, (mu, std) = model(x, noise=noise)
    torch.set_rng_state(torch.from_numpy(rec["rng_before_forward"]))
    compare("logits", logits, rec["logits"])
    compare("codes: mean", mu, rec["mu"])
    compare("codes: std", std, rec["std"])
    loss, _ = step(x, index, labels, no_pseudo, torch.zeros(labels.shape), None, noise)
    for p in model.parameters():
        p.grad = None
    loss.backward()
    optimizer.step()
    compare("loss", float(loss.detach()), rec["loss"])
    params = dict(model.named_parameters())
    grads = mapped("grad/")
    names = sorted(k for k in grads if k in params and params[k].grad is not None)
    missing = sorted(k for k in grads if k not in names)
    compare(f"gradients ({len(names)} tensors)", np.concatenate([params[k].grad.numpy().ravel() for k in names]),
            np.concatenate([grads[k].numpy().ravel() for k in names]))
    for part in ("backbone.", "head.queries.", "head.bottleneck."):
        chosen = [k for k in names if k.startswith(part)]
        compare(f"  gradients of {part[:-1]} ({len(chosen)} tensors)",
                np.concatenate([params[k].grad.numpy().ravel() for k in chosen]),
                np.concatenate([grads[k].numpy().ravel() for k in chosen]))
    after = mapped("after/")
    keys = sorted(k for k in after if k in own)
    state = model.state_dict()
    compare(f"weights after the step ({len(keys)} tensors, buffers included)",
            np.concatenate([state[k].numpy().ravel() for k in keys]),
            np.concatenate([after[k].numpy().ravel() for k in keys]))
    # the pseudo-label round, on the code's own predictions of that round (sampled codes: docs/methods.md)
    probs = np.zeros((ROWS, CLASSES), dtype=np.float32)
    probs[rec["round_order"]] = 1.0 / (1.0 + np.exp(-rec["eval0_logits"].astype(np.float64)))
    state = LabelState(observed.astype(np.int8))
    record = ConfidentPositives(threshold=float(rec["theta"]), start_epoch=1).step(torch.from_numpy(probs), state, 1)
    compare(f"label matrix after the round ({record['positives']} new positives)",
            state.effective_labels().numpy(), rec["round_labels_after"])

    width = max(len(w) for w, _, _ in report)
    print(f"{'quantity':<{width}}  max |official - spmlkit|  (max |official|)")
    for what, diff, scale in report:
        print(f"{what:<{width}}  {diff:.3g}  ({scale:.3g})")
    if missing:
        print(f"official gradients without a counterpart here: {missing}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="side", required=True)
    p = sub.add_parser("official", help="one step of the official code; writes the record")
    p.add_argument("--code", required=True, help="the official repository, unpacked")
    p.add_argument("--out", required=True, help="the .npz to write")
    p.set_defaults(func=official)
    p = sub.add_parser("ours", help="the same step with spmlkit; prints the differences")
    p.add_argument("--record", required=True, help="the .npz the official side wrote")
    p.add_argument("--numerics", choices=("reference", "stable"), default="reference",
                   help="the mime loss's logarithms: the code's log(p + 1e-5), or log-sigmoids (default: reference)")
    p.add_argument("--averaged", action="store_true",
                   help="pass the mean of the code's 10 draws as one draw, as spmlkit's runs draw (default: the 10)")
    p.set_defaults(func=ours)
    args = parser.parse_args()
    args.func(args)


if __name__ == "__main__":
    main()
