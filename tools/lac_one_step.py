"""LAC/PLC: one training step of the official code beside spmlkit's, on identical weights, batch and draws.

Not part of the package or the tests (docs/methods.md, "plc", records what it measured). Two halves,
run in two processes because the official code must not see spmlkit and the reverse:

1. ``official``: the code of ``xiemk/SPML-LAC`` (unchanged; fetch it and unpack it, e.g.
   ``git --git-dir=<mirror> archive HEAD | tar -x -C /tmp/official-lac``) with the ``randaugment``
   package (1.0.2, unpacked, e.g. ``pip download --no-deps randaugment==1.0.2`` and unzip) on its
   path. It draws the batch's augmentations with the code's own transforms, builds the code's model
   (a random-weight ResNet-18, 64 x 64 images, VOC's 20 classes), calls the code's ``train()`` of
   ``first_stage.py`` for one step and ``second_stage.py`` for two (so the memory queue carries an
   earlier step's entries), and writes everything to an ``.npz``: weights before, inputs, every random
   draw (replayed from the generators' saved states), loss, gradients, weights after, EMA, lr, queue::

       /work/main/.venv/bin/python tools/lac_one_step.py official --code /tmp/official-lac \
           --randaugment /tmp/lac-env/ra --out /tmp/lac_official.npz

2. ``ours`` (with spmlkit importable): rebuilds the strong views from the recorded draws with
   :func:`spmlkit.data.strong_augment.strong_view`, loads the same weights into
   :class:`spmlkit.models.LabelQueryNet`, takes the same steps with spmlkit's losses (``plc``, ``lac``),
   optimiser (AdamW) and recipe (one-cycle schedule, EMA), and prints each quantity's max abs difference::

       PYTHONPATH=src /work/main/.venv/bin/python tools/lac_one_step.py ours --record /tmp/lac_official.npz

What the official side needs to run on a CPU, and nothing else is changed: ``.cuda()`` returns its
tensor or module unchanged; the code's ResNet is built with ``pretrained=False`` (no download); the
``randaugment`` package's use of ``np.int`` (removed in numpy 1.24) is given ``int``; ``termcolor``,
which its logger imports for colours, is a stand-in that returns the text; amp is off (on a CPU its
CUDA autocast and gradient scaler do nothing anyway).
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

import numpy as np

SIZE, BATCH, CLASSES, LR, WD, EPOCHS, STEPS = 64, 4, 20, 1e-4, 1e-2, 40, 10
EMA_DECAY, QUEUE, TEMPERATURE, FEAT = 0.9997, 64, 0.5, 128
RA_NAMES = ("Invert", "Cutout", "Sharpness", "AutoContrast", "Posterize", "ShearX", "TranslateX", "TranslateY",
            "ShearY", "Rotate", "Equalize", "Contrast", "Color", "Solarize", "Brightness")
SIGNED = {"ShearX", "ShearY", "TranslateX", "TranslateY", "Color", "Contrast", "Sharpness", "Brightness"}


# ----------------------------------------------------------------------------------------------- official
def _images(seed: int) -> list:
    from PIL import Image

    rng = np.random.RandomState(seed)
    base = rng.randint(0, 256, (BATCH, SIZE // 8, SIZE // 8, 3)).astype(np.uint8)
    return [Image.fromarray(np.kron(b, np.ones((8, 8, 1), dtype=np.uint8)) + rng.randint(0, 20, (SIZE, SIZE, 3))
                            .astype(np.uint8)) for b in base]


def _replay(torch, py_state, np_state, torch_state, ra_policies: list) -> list:
    """The draws the code's transforms made for one image, recovered by making the same calls on
    the generators' states saved before it (docs in the module docstring)."""
    random.setstate(py_state)
    np.random.set_state(np_state)
    torch.set_rng_state(torch_state)
    weak_flip = bool(torch.rand(1) < 0.5)
    strong_flip = bool(torch.rand(1) < 0.5)
    row, col = int(np.random.randint(SIZE)), int(np.random.randint(SIZE))
    fill = [random.randint(0, 255) for _ in range(3)]
    (p1, name1, level1), (p2, name2, level2) = ra_policies[random.randint(0, len(ra_policies) - 1)]
    ops = []
    for name, level in ((name1, level1), (name2, level2)):
        applied = random.random() < 0.5
        sign, small = 1, (0, 0)
        if applied and name in SIGNED:
            sign = random.choice([-1, 1])
        if applied and name == "Cutout":
            small = (int(np.random.randint(low=0, high=SIZE)), int(np.random.randint(low=0, high=SIZE)))
        ops.append((RA_NAMES.index(name), level, int(applied), sign, *small))
    jitter = not (0.8 < torch.rand(1))
    order, factors = [0, 1, 2, 3], [1.0, 1.0, 1.0, 0.0]
    if jitter:
        order = torch.randperm(4).tolist()
        factors = [float(torch.empty(1).uniform_(0.6, 1.4)) for _ in range(3)] + [float(torch.empty(1).uniform_(-0.1, 0.1))]
    grey = bool(torch.rand(1) < 0.2)
    return [weak_flip, strong_flip, row, col, *fill, *[v for op in ops for v in op], int(jitter), *order, *factors,
            int(grey)]


def official(args: argparse.Namespace) -> None:
    sys.path[:0] = [str(Path(args.randaugment)), str(Path(args.code)), str(Path(args.code) / "lib")]
    np.int = int  # the randaugment package's np.int (numpy < 1.24)
    import types

    colour = types.ModuleType("termcolor")  # the logger's colours, not installed here
    colour.colored = lambda text, *a, **k: text
    sys.modules.setdefault("termcolor", colour)
    import torch
    import torchvision

    torch.Tensor.cuda = lambda self, *a, **k: self
    torch.nn.Module.cuda = lambda self, *a, **k: self
    resnet18 = torchvision.models.resnet18
    torchvision.models.resnet18 = lambda pretrained=False, **kw: resnet18(weights=None, **kw)
    import first_stage
    import second_stage
    from dataset.get_dataset import TransformUnlabeled_WS
    from models.LEModel import build_LEModel
    from randaugment import RandAugment
    from utils.helper import ModelEma
    from utils.lacloss import LACLoss

    ns = argparse.Namespace(dataset_name="voc", img_size=SIZE, backbone="resnet18", feat_dim=FEAT, lr=LR,
                            weight_decay=WD, epochs=EPOCHS, amp=False, print_freq=100, batch_size=BATCH,
                            lambda_plc=1.0, lambda_lac=1.0, temperature=TEMPERATURE, queue_size=QUEUE)
    logger = __import__("logging").getLogger("official")
    record: dict[str, np.ndarray] = {}
    transform = TransformUnlabeled_WS(ns)
    policies = RandAugment.get_rand_policies()
    random.seed(1), np.random.seed(1), torch.manual_seed(1)
    batches = []
    for b in range(3):  # one stage-1 batch, two stage-2 batches
        weak, strong, draws = [], [], []
        for k, image in enumerate(_images(100 + b)):
            record[f"b{b}_source{k}"] = np.asarray(image).copy()  # before: the code's cutout draws on a same-size image
            states = (random.getstate(), np.random.get_state(), torch.get_rng_state())
            w, s = transform(image)
            after = (random.getstate(), np.random.get_state(), torch.get_rng_state())
            draws.append(_replay(torch, *states, policies))
            random.setstate(after[0]), np.random.set_state(after[1]), torch.set_rng_state(after[2])
            weak.append(w), strong.append(s)
        targets = torch.zeros(BATCH, CLASSES)
        targets[torch.arange(BATCH), torch.tensor([(3 * b + 5 * k) % CLASSES for k in range(BATCH)])] = 1
        batches.append(((torch.stack(weak), torch.stack(strong)), targets))
        record.update({f"b{b}_weak": batches[-1][0][0].numpy(), f"b{b}_strong": batches[-1][0][1].numpy(),
                       f"b{b}_targets": targets.numpy(), f"b{b}_draws": np.asarray(draws, dtype=np.float64)})

    def setup(is_proj: bool, threshold: float, start: dict | None):
        ns.is_proj, ns.threshold = is_proj, threshold
        torch.manual_seed(0)
        model = build_LEModel(ns)
        if start is not None:
            model.load_state_dict(start, strict=False)
        ema = ModelEma(model, EMA_DECAY)
        optimizer = torch.optim.AdamW([{"params": [p for p in model.parameters() if p.requires_grad]}],
                                      ns.batch_size / 256 * ns.lr, betas=(0.9, 0.999), eps=1e-8,
                                      weight_decay=ns.weight_decay)
        ns.steps_per_epoch = STEPS
        scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=ns.lr, steps_per_epoch=STEPS,
                                                        epochs=ns.epochs, pct_start=0.2)
        return model, ema, optimizer, scheduler

    def dump(prefix: str, model, ema, optimizer, loss) -> None:
        record[f"{prefix}_loss"] = np.asarray(loss)
        record[f"{prefix}_lr"] = np.asarray(optimizer.param_groups[0]["lr"])
        for name, p in model.named_parameters():
            record[f"{prefix}_after/{name}"] = p.detach().numpy().copy()  # copies: the tensors move on
            if p.grad is not None:
                record[f"{prefix}_grad/{name}"] = p.grad.numpy().copy()
        for name, v in ema.module.state_dict().items():
            record[f"{prefix}_ema/{name}"] = v.detach().numpy().copy()

    model, ema, optimizer, scheduler = setup(False, 0.6, None)
    record.update({f"plc_before/{k}": v.detach().numpy().copy() for k, v in model.state_dict().items()})
    torch.manual_seed(7)  # the dropout masks of the step's forward
    loss = first_stage.train([batches[0]], model, ema, optimizer, scheduler, 0, ns, logger)
    dump("plc", model, ema, optimizer, loss)

    stage1 = {k: v.detach().clone() for k, v in model.state_dict().items()}
    model, ema, optimizer, scheduler = setup(True, 0.9, stage1)
    record.update({f"lac_before/{k}": v.detach().numpy().copy() for k, v in model.state_dict().items()})
    queue, labels, ptr = torch.zeros(QUEUE, 2, FEAT), torch.zeros(QUEUE), 0
    for step in (1, 2):  # the second step sees the first one's queue entries as constants
        torch.manual_seed(7 + step)
        loss, queue, labels, ptr = second_stage.train([batches[step]], model, ema, optimizer, scheduler,
                                                      LACLoss(temperature=TEMPERATURE), 0, ns, logger, queue, labels,
                                                      ptr)
        dump(f"lac{step}", model, ema, optimizer, loss)
        record.update({f"lac{step}_queue": queue.detach().numpy().copy(), f"lac{step}_queue_labels": labels.numpy().copy(),
                       f"lac{step}_queue_ptr": np.asarray(ptr)})
    np.savez(args.out, **record)
    print(f"wrote {args.out}: stage-1 loss {record['plc_loss']:.6f}, stage-2 losses {record['lac1_loss']:.6f}, "
          f"{record['lac2_loss']:.6f}")


# ----------------------------------------------------------------------------------------------- ours
def _our_draw(row: np.ndarray):
    from spmlkit.data.strong_augment import StrongDraw

    v = [float(x) for x in row]
    ops = tuple((int(v[7 + 6 * k]), int(v[8 + 6 * k]), bool(v[9 + 6 * k]), int(v[10 + 6 * k]), int(v[11 + 6 * k]),
                 int(v[12 + 6 * k])) for k in range(2))
    jitter = (tuple(int(x) for x in v[20:24]), tuple(v[24:28])) if v[19] else None
    return bool(v[0]), StrongDraw(bool(v[1]), tuple(int(x) for x in v[2:7]), ops, jitter, bool(v[28]))


def _map_weights(official_state: dict, model) -> dict:
    """The code's parameter names -> spmlkit's (:class:`~spmlkit.models.LabelQueryNet`)."""
    import torch

    out = {}
    for name, value in official_state.items():
        t = torch.as_tensor(value)
        if name.startswith("backbone.0.body."):
            key = "backbone." + name[len("backbone.0.body."):]
        elif name.startswith("backbone.1."):
            continue  # the position encoding: a constant
        elif name.startswith("encoder.encoder.layers."):
            key = "head.encoder." + name[len("encoder.encoder.layers."):]
        elif name.startswith("encoder.decoder.layers."):
            key = "head.decoder." + name[len("encoder.decoder.layers."):]
        elif name.startswith("encoder.decoder.norm."):
            key = "head.decoder_norm." + name[len("encoder.decoder.norm."):]
        elif name == "query_embed.weight":
            key = "head.queries.weight"
        elif name in ("fc.W", "fc.b"):
            key, t = ("head.weight", t[0]) if name == "fc.W" else ("head.bias", t[0])
        elif name.startswith("proj."):
            key = "head.projector." + name[len("proj."):]
        else:
            raise KeyError(name)
        out[key] = t
    own = model.state_dict()
    for key in own:  # BatchNorm's step counters: the code's frozen BatchNorm has none
        if key.endswith("num_batches_tracked"):
            out[key] = own[key]
    return out


def ours(args: argparse.Namespace) -> None:
    import torch

    from spmlkit import losses
    from spmlkit.data.strong_augment import strong_view
    from spmlkit.models import LabelQueryNet, create_backbone
    from spmlkit.models.parts import constant_batchnorm, freeze_batchnorm, train_only
    from spmlkit.training.config import RunConfig
    from spmlkit.training.recipe import Recipe
    from spmlkit.training.trainer import _optimizer

    rec = dict(np.load(args.record))
    report: list[tuple[str, float]] = []

    def compare(what: str, a, b) -> None:
        report.append((what, float(np.max(np.abs(np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64))))))

    # the views, from the recorded draws
    batches = []
    for b in range(3):
        weak, strong = [], []
        for k in range(BATCH):
            flip, draw = _our_draw(rec[f"b{b}_draws"][k])
            source = rec[f"b{b}_source{k}"]
            weak.append(source[:, ::-1] if flip else source)
            strong.append(strong_view(source, draw))
        to_input = lambda px: torch.from_numpy(np.ascontiguousarray(np.stack(px))).permute(0, 3, 1, 2).float().div(255)
        w, s = to_input(weak), to_input(strong)
        compare(f"batch {b}: weak view pixels", w.numpy(), rec[f"b{b}_weak"])
        compare(f"batch {b}: strong view pixels", s.numpy(), rec[f"b{b}_strong"])
        labels = torch.as_tensor(rec[f"b{b}_targets"])
        batches.append((torch.cat([w, s]), labels))

    config = RunConfig(optimizer="adamw", lr=LR, weight_decay=WD, lr_schedule="onecycle", warmup_frac=0.2,
                       ema_decay=EMA_DECAY, freeze_bn=True, epochs=EPOCHS)

    def setup(stage: str):
        body, dim = create_backbone("torchvision:resnet18", pretrained=False)
        model = LabelQueryNet(body, dim, CLASSES, embed_dim=FEAT if stage == "lac" else None)
        before = {k[len(stage) + 8:]: v for k, v in rec.items() if k.startswith(f"{stage}_before/")}
        model.load_state_dict(_map_weights(before, model))
        constant_batchnorm(model)  # the code's FrozenBatchNorm2d
        train_only(model, ["layer2", "layer3", "layer4", "head"])
        optimizer = _optimizer(config, model.param_groups(LR))
        recipe = Recipe(config.recipe, model, optimizer, epochs=EPOCHS, steps=STEPS)
        return model, optimizer, recipe

    def step(model, optimizer, recipe, loss_fn, x, labels, embed: bool):
        model.train()
        freeze_batchnorm(model)
        logits, _, emb, _ = model(x)  # a projector's embeddings come out of the same forward (LAC's stage 2)
        emb = emb.view(2, BATCH, *emb.shape[1:]) if embed else None
        value = loss_fn(logits[:BATCH], labels, strong=logits[BATCH:], embeddings=emb)
        optimizer.zero_grad(set_to_none=True)
        value.backward()
        optimizer.step()
        recipe.after_step(model)
        return float(value.detach())

    def check(stage: str, model, optimizer, recipe, loss) -> None:
        compare(f"{stage}: loss", loss, rec[f"{stage}_loss"])
        official_names = {k[len(stage) + 7:] for k in rec if k.startswith(f"{stage}_after/")}
        mapped_after = _map_weights({n: rec[f"{stage}_after/{n}"] for n in official_names}, model)
        mapped_grad = _map_weights({n: rec[f"{stage}_grad/{n}"] for n in official_names if f"{stage}_grad/{n}" in rec},
                                   model)
        ema_names = {k[len(stage) + 5:] for k in rec if k.startswith(f"{stage}_ema/")}
        mapped_ema = _map_weights({n: rec[f"{stage}_ema/{n}"] for n in ema_names}, model)
        params = dict(model.named_parameters())
        grads = [(k, params[k].grad) for k in mapped_grad if k in params and params[k].grad is not None]
        import os
        if os.environ.get("LAC_DEBUG"):
            for k, g in grads:
                d = (g - mapped_grad[k]).abs().max().item()
                print(f"  {k}: {d:.3g} (scale {mapped_grad[k].abs().max().item():.3g})")
        compare(f"{stage}: gradients ({len(grads)} tensors)", np.concatenate([g.numpy().ravel() for _, g in grads]),
                np.concatenate([mapped_grad[k].numpy().ravel() for k, _ in grads]))
        names = [k for k in mapped_after if k in params]
        compare(f"{stage}: updated weights ({len(names)} tensors)",
                np.concatenate([params[k].detach().numpy().ravel() for k in names]),
                np.concatenate([mapped_after[k].numpy().ravel() for k in names]))
        ema = recipe.ema.module.state_dict()
        keys = [k for k in mapped_ema if k in ema and not k.endswith("num_batches_tracked")]
        compare(f"{stage}: EMA weights ({len(keys)} tensors)", np.concatenate([ema[k].numpy().ravel() for k in keys]),
                np.concatenate([mapped_ema[k].numpy().ravel() for k in keys]))
        compare(f"{stage}: lr after the step", optimizer.param_groups[0]["lr"], rec[f"{stage}_lr"])

    model, optimizer, recipe = setup("plc")
    torch.manual_seed(7)
    loss = step(model, optimizer, recipe, losses.create("plc", threshold=0.6), *batches[0], embed=False)
    check("plc", model, optimizer, recipe, loss)

    model, optimizer, recipe = setup("lac")
    fn = losses.create("lac", threshold=0.9, temperature=TEMPERATURE, queue_size=QUEUE)
    for n in (1, 2):
        stage = f"lac{n}"
        if n == 2:  # step 2 from the code's weights after step 1 (Adam's first step is ±lr wherever a
            # gradient is rounding noise, so the weights after it differ there; see docs/methods.md, "plc")
            names = {k[len("lac1_after/"):] for k in rec if k.startswith("lac1_after/")}
            start = _map_weights({k: rec[f"lac1_after/{k}"] for k in names}, model)
            with torch.no_grad():
                for k, p in model.named_parameters():
                    if k in start:  # the code's BatchNorm scales are constants, equal already
                        p.copy_(start[k])
        torch.manual_seed(7 + n)
        loss = step(model, optimizer, recipe, fn, *batches[n], embed=True)
        check(stage, model, optimizer, recipe, loss)
        filled = int(fn.queue_state[1])
        compare(f"{stage}: memory queue embeddings", fn.queue[:filled].numpy(), rec[f"{stage}_queue"][:filled])
        compare(f"{stage}: memory queue classes", fn.queue_labels.numpy(), rec[f"{stage}_queue_labels"])
        compare(f"{stage}: queue pointer", int(fn.queue_state[0]), rec[f"{stage}_queue_ptr"])
    width = max(len(w) for w, _ in report)
    for what, diff in report:
        print(f"{what:<{width}}  max |official - spmlkit| = {diff:.3g}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="side", required=True)
    o = sub.add_parser("official", help="run the official code and write the record")
    o.add_argument("--code", required=True, help="the unpacked official repository")
    o.add_argument("--randaugment", required=True, help="a folder holding the randaugment package")
    o.add_argument("--out", required=True, help="the .npz to write")
    u = sub.add_parser("ours", help="take the same step with spmlkit and compare")
    u.add_argument("--record", required=True, help="the .npz the official side wrote")
    args = parser.parse_args()
    official(args) if args.side == "official" else ours(args)


if __name__ == "__main__":
    main()
