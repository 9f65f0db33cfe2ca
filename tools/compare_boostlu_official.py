"""One BoostLU training step, the official code against spmlkit, with identical weights, batch and draws.

What it runs. For each case (LL-R, LL-Ct, LL-Cp, each in epoch 1, where the large-loss selection is off,
and in epoch 3, where it is on) the *official side* builds the official ``ImageClassifier`` (ResNet-50
with ``pretrained=False``, its 1 x 1 convolution head and BoostLU), draws a batch of random RGB images of
several sizes with their horizontal flips, an observed single-positive label matrix and a batch order,
and takes one training step as ``train.py`` does (its two Adam groups, ``compute_batch_loss``, the LL-Cp
label write). It saves to an ``.npz``: the source images, the flips it drew, the batch order, the labels
before and after, the initial weights and buffers, the model input, the logits, the loss, every
parameter's gradient and the weights and buffers after the step. The *spmlkit side* reads that file,
builds ``boostlu_ll_*`` from spmlkit's own parts (the method's recipe, ``build_model`` with the recipe's
``cam_boost``, the training loop's ``train_epoch`` over a source that yields this one batch, the
trainer's optimiser), loads the official initial weights, makes its input from the same images and flips
through spmlkit's image transform, takes the step and saves the same quantities. The parent process
compares the two files and prints the largest difference of each quantity.

Only what a CPU run needs differs from the official code: ``pretrained=False`` (no download), images of
96 x 96 instead of 448 x 448 (the Resize of its ``get_transforms`` is given that size), the process's
device being the CPU. Every file of the official code is used unchanged, imported from its own folder;
the driver below restates the lines of ``train.py``'s step, which has no function of its own.

How to run (from the repository root; the official code is not part of this repository):

    # the official code: fetch github:youngwk/BridgeGapExplanationPAMC, then
    git --git-dir=<fetched git dir> archive HEAD | tar -x -C /tmp/official-boostlu
    PYTHONPATH=$PWD/src python tools/compare_boostlu_official.py --official /tmp/official-boostlu

The official side runs in a subprocess with the same interpreter but without spmlkit on its path
(``--official-python`` names another interpreter, e.g. a venv with the code's own pins). The numbers it
printed on this project's CPU are in docs/methods.md, "boostlu_ll_r".
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

SCHEMES = {"LL-R": ("boostlu_ll_r", 0.5), "LL-Ct": ("boostlu_ll_ct", 0.2), "LL-Cp": ("boostlu_ll_cp", 0.1)}
EPOCHS = (1, 3)
BATCH, CLASSES, ROWS, SIZE, ALPHA, LR, LR_MULT = 8, 20, 12, 96, 5.0, 1e-5, 10
#: the source images' (height, width), one per training row: several sizes, so the resize itself is compared
SOURCE_SIZES = [(120, 90), (96, 96), (150, 110), (80, 130), (101, 99), (64, 200), (200, 64), (97, 143),
                (96, 128), (133, 77), (90, 90), (111, 160)]
#: the official ResNet's children by position (its Sequential of resnet50's children) and spmlkit's names
CHILDREN = ("conv1", "bn1", "relu", "maxpool", "layer1", "layer2", "layer3", "layer4")


def draws(seed: int) -> dict[str, np.ndarray]:
    """The case's data, drawn here and handed to both sides: source images, the batch's rows, the
    observed labels (one positive per row)."""
    rng = np.random.RandomState(seed)
    out = {f"src_{i}": rng.randint(0, 256, size=(h, w, 3)).astype(np.uint8) for i, (h, w) in enumerate(SOURCE_SIZES)}
    out["idx"] = rng.permutation(ROWS)[:BATCH].astype(np.int64)
    observed = np.zeros((ROWS, CLASSES), dtype=np.float32)
    observed[np.arange(ROWS), rng.randint(0, CLASSES, size=ROWS)] = 1.0
    out["observed"] = observed
    return out


# ----------------------------------------------------------------------------------- official side
def official_side(official: str, scheme: str, epoch: int, seed: int, out: str) -> None:
    """The official step (module docstring); imports only the official code, torch and torchvision."""
    sys.path.insert(0, official)
    import torch
    from PIL import Image

    import datasets  # the official modules, unchanged
    import losses
    import models

    data = draws(seed)
    P = {"arch": "resnet50", "dataset": "pascal", "use_pretrained": False, "freeze_feature_extractor": False,
         "feat_dim": 2048, "num_classes": CLASSES, "alpha": ALPHA, "largelossmod_scheme": scheme,
         "delta_rel": SCHEMES[scheme][1] / 100, "clean_rate": 1, "lr": LR, "lr_mult": LR_MULT}
    for _ in range(epoch - 1):  # train.py lowers clean_rate after every epoch
        P["clean_rate"] -= P["delta_rel"]
    torch.manual_seed(seed)
    model = models.ImageClassifier(P)
    tx = datasets.get_transforms()["train"]
    tx.transforms[0].size = (SIZE, SIZE)  # a CPU run: 96 x 96 instead of 448 x 448
    sources = [data[f"src_{row}"] for row in data["idx"]]  # the batch's images, in the batch's order
    flip_seed = seed + 1000
    torch.manual_seed(flip_seed)  # RandomHorizontalFlip draws torch.rand(1) per image from the global stream
    image = torch.stack([tx(Image.fromarray(a)) for a in sources])
    torch.manual_seed(flip_seed)
    flips = np.array([bool(torch.rand(1) < 0.5) for _ in sources])
    label_matrix_obs = data["observed"].copy()
    idx = torch.as_tensor(data["idx"])
    label_vec_obs = torch.as_tensor(label_matrix_obs[data["idx"]])
    initial = {k: v.detach().clone().numpy() for k, v in model.state_dict().items()}

    # train.py, run_train: the optimiser and one step of its training phase
    feature_extractor_params = [param for param in list(model.feature_extractor.parameters()) if param.requires_grad]
    onebyone_conv_params = [param for param in list(model.onebyone_conv.parameters()) if param.requires_grad]
    opt_params = [
        {"params": feature_extractor_params, "lr": P["lr"]},
        {"params": onebyone_conv_params, "lr": P["lr_mult"] * P["lr"]},
    ]
    optimizer = torch.optim.Adam(opt_params, lr=P["lr"])
    model.train()
    optimizer.zero_grad()
    logits = model(image)
    logits.retain_grad()  # the driver's, to compare the loss's gradient itself
    loss, correction_idx = losses.compute_batch_loss(logits, label_vec_obs, P)
    loss.backward()
    grads = {name: p.grad.detach().clone().numpy() for name, p in model.named_parameters()}
    optimizer.step()
    if P["largelossmod_scheme"] == "LL-Cp" and correction_idx[1].numel():
        label_matrix_obs[idx[correction_idx[0].cpu()], correction_idx[1].cpu()] = 1.0

    after = {k: v.detach().clone().numpy() for k, v in model.state_dict().items()}
    np.savez(out, flips=flips, image=image.numpy(), logits=logits.detach().numpy(), loss=loss.item(),
             logit_grad=logits.grad.numpy(),
             labels_after=label_matrix_obs, clean_rate=P["clean_rate"], **data,
             **{f"init/{k}": v for k, v in initial.items()}, **{f"grad/{k}": v for k, v in grads.items()},
             **{f"after/{k}": v for k, v in after.items()})


# ------------------------------------------------------------------------------------ spmlkit side
def spmlkit_name(official: str) -> str:
    """spmlkit's name of an official parameter or buffer: ``feature_extractor.<i>.`` -> ``backbone.<child>.``,
    ``onebyone_conv`` -> ``head``."""
    if official.startswith("onebyone_conv."):
        return "head." + official.split(".", 1)[1]
    _, position, rest = official.split(".", 2)
    return f"backbone.{CHILDREN[int(position)]}.{rest}"


def official_name(name: str) -> str:
    """The official name of an spmlkit parameter (the inverse of :func:`spmlkit_name`)."""
    if name.startswith("head."):
        return "onebyone_conv." + name.split(".", 1)[1]
    _, child, rest = name.split(".", 2)
    return f"feature_extractor.{CHILDREN.index(child)}.{rest}"


def spmlkit_side(official_npz: str, scheme: str, epoch: int, out: str) -> None:
    """spmlkit's step on the official file's weights, images, flips and labels (module docstring)."""
    import torch
    from PIL import Image

    from spmlkit.data.images import ImageTransform, flip_rows
    from spmlkit.labels import LabelState
    from spmlkit.methods import METHODS, RunInfo
    from spmlkit.models import build_model
    from spmlkit.training.config import config_from_dict
    from spmlkit.training.loop import Group, Run, train_epoch
    from spmlkit.training.trainer import _optimizer, _param_groups

    ref = np.load(official_npz)
    method, delta = SCHEMES[scheme]
    hparams = {"delta_rel": delta, "boost_alpha": ALPHA}
    alpha = METHODS[method].model_parts(METHODS[method].check_hparams(hparams))["cam_boost"]
    model = build_model("torchvision:resnet50", CLASSES, pretrained=False, cam_boost=alpha)
    state = {spmlkit_name(k[len("init/"):]): torch.as_tensor(ref[k]) for k in ref.files if k.startswith("init/")}
    state["head.weight"] = state["head.weight"].reshape(CLASSES, -1)  # the 1 x 1 convolution's [C, D, 1, 1]
    model.load_state_dict(state)

    transform = ImageTransform(SIZE)
    pixels = torch.stack([torch.from_numpy(transform.resize(Image.fromarray(ref[f"src_{row}"]))) for row in ref["idx"]])
    x = transform.normalize(flip_rows(pixels, torch.as_tensor(ref["flips"])))
    idx = torch.as_tensor(ref["idx"])
    observed = ref["observed"].astype(np.int8)

    config = config_from_dict({"method": method, "hparams": hparams, "lr": LR, "head_lr_mult": LR_MULT})
    info = RunInfo(num_train=ROWS, num_classes=CLASSES, observed=observed, expected_num_pos=1.0, epochs=10, seed=0,
                   features=lambda: None)
    method_object = METHODS[method](info, **hparams)
    method_object.set_epoch(epoch, 10)  # what run_loop does before each epoch
    run = Run(model, method_object, LabelState(observed), torch.Generator().manual_seed(0))
    logits = {}

    def keep_logits(module, args, output) -> None:  # a hook that returns nothing leaves the output as it is
        logits["z"] = output.logits.detach().clone()
        output.logits.register_hook(lambda grad: logits.__setitem__("grad", grad.detach().clone()))

    hook = model.register_forward_hook(keep_logits)

    class OneBatch:  # the data source of an epoch of one batch: this batch, in this order
        track_train = False

        def train_batches(self, generators):
            yield x[None], idx[None]

    group = Group([run], OneBatch(), _optimizer(config, _param_groups(config, run)))
    record = train_epoch(group, [run], epoch)
    hook.remove()
    names = dict(model.named_parameters())
    after = model.state_dict()

    # where the differences come from: the same network's backward from the official logit gradient,
    # and the trainer's optimiser stepping the official gradients
    same = build_model("torchvision:resnet50", CLASSES, pretrained=False, cam_boost=alpha)
    same.load_state_dict(state)
    same.train()
    same(x).logits.backward(torch.as_tensor(ref["logit_grad"]))
    from_dz = {k: p.grad.numpy() for k, p in same.named_parameters()}
    same.load_state_dict(state)
    for k, p in same.named_parameters():
        p.grad = torch.as_tensor(ref["grad/" + official_name(k)]).reshape(p.shape)
    stepped = Run(same, method_object, LabelState(observed), torch.Generator())
    _optimizer(config, _param_groups(config, stepped)).step()
    np.savez(out, image=x.numpy(), logits=logits["z"].numpy(), loss=record["losses"][0],
             logit_grad=logits["grad"].numpy(),
             labels_after=run.state.effective_labels().numpy(),
             **{f"grad/{k}": p.grad.numpy() for k, p in names.items()},
             **{f"after/{k}": v.numpy() for k, v in after.items()},
             **{f"grad_from_dz/{k}": v for k, v in from_dz.items()},
             **{f"after_from_grads/{k}": p.detach().numpy() for k, p in same.named_parameters()})


# ------------------------------------------------------------------------------------------ compare
def compare(official_npz: str, ours_npz: str) -> dict[str, float]:
    """Largest absolute difference of each compared quantity (and the corrections both sides wrote)."""
    ref, ours = np.load(official_npz), np.load(ours_npz)

    def largest(prefix: str, only: str | None = None, mine: str | None = None) -> float:
        """Over the official ``prefix`` entries (those naming ``only``), against ours under ``mine``."""
        worst = 0.0
        for k in ref.files:
            if k.startswith(prefix) and (only is None or only in k):
                name = (mine or prefix) + spmlkit_name(k[len(prefix):])
                if name in ours.files:
                    theirs = ref[k].reshape(ours[name].shape).astype(np.float64)
                    worst = max(worst, float(np.abs(theirs - ours[name]).max()))
        return worst

    after = [k for k in ref.files if k.startswith("after/")]
    weights = [k for k in after if "running" not in k and "num_batches" not in k]
    buffers = [k for k in after if k not in weights]

    def worst_of(keys: list[str]) -> float:
        return max(float(np.abs(ref[k].astype(np.float64) - ours["after/" + spmlkit_name(k[6:])].reshape(ref[k].shape)).max())
                   for k in keys)

    grads = {k: np.abs(ref[k]).max() for k in ref.files if k.startswith("grad/")}
    return {
        "input": float(np.abs(ref["image"] - ours["image"]).max()),
        "logits": float(np.abs(ref["logits"].astype(np.float64) - ours["logits"]).max()),
        "loss": abs(float(ref["loss"]) - float(ours["loss"])),
        "logit gradients": float(np.abs(ref["logit_grad"].astype(np.float64) - ours["logit_grad"]).max()),
        "head gradients": largest("grad/", "onebyone"),
        "gradients": largest("grad/"),
        "largest gradient": float(max(grads.values())),
        "gradients from the official dL/dz": largest("grad/", mine="grad_from_dz/"),
        "weights after": worst_of(weights),
        "weights after, from the official gradients": largest("after/", mine="after_from_grads/"),
        "BN statistics after": worst_of(buffers),
        "labels after": float(np.abs(ref["labels_after"] - ours["labels_after"]).max()),
        "corrections": int((ref["labels_after"] != ref["observed"]).sum()),
        "corrections (ours)": int((ours["labels_after"] != ref["observed"]).sum()),
        "loss value": float(ref["loss"]),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--official", required=True, help="folder of the official code (no default)")
    parser.add_argument("--official-python", default=sys.executable,
                        help="interpreter of the official side (default: this one, without spmlkit on its path)")
    parser.add_argument("--work", default=None, help="folder for the .npz files (default: a temporary folder)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the drawn data and weights (default 0)")
    parser.add_argument("--side", choices=("official", "spmlkit"), help=argparse.SUPPRESS)
    parser.add_argument("--scheme", help=argparse.SUPPRESS)
    parser.add_argument("--epoch", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--reference", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side == "official":
        official_side(args.official, args.scheme, args.epoch, args.seed, args.out)
        return 0
    if args.side == "spmlkit":
        spmlkit_side(args.reference, args.scheme, args.epoch, args.out)
        return 0
    work = Path(args.work or tempfile.mkdtemp(prefix="boostlu-compare-"))
    work.mkdir(parents=True, exist_ok=True)
    clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    results = {}
    for scheme in SCHEMES:
        for epoch in EPOCHS:
            ref, ours = work / f"official-{scheme}-e{epoch}.npz", work / f"spmlkit-{scheme}-e{epoch}.npz"
            common = ["--official", args.official, "--seed", str(args.seed), "--scheme", scheme, "--epoch", str(epoch)]
            subprocess.run([args.official_python, __file__, "--side", "official", "--out", str(ref), *common],
                           check=True, env=clean, cwd=args.official)
            subprocess.run([sys.executable, __file__, "--side", "spmlkit", "--out", str(ours), "--reference", str(ref),
                            *common], check=True)
            results[f"{scheme} epoch {epoch}"] = row = compare(str(ref), str(ours))
            print(f"{scheme} epoch {epoch}: " + ", ".join(f"{k} {v:.3g}" for k, v in row.items()), flush=True)
    (work / "summary.json").write_text(json.dumps(results, indent=1))
    print(f"files in {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
