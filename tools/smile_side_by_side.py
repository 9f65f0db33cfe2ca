"""SMILE, one training step side by side: the official code (palm-ml/smile) and spmlkit's ``smile``.

Not part of the package: nothing in ``src/`` or ``tests/`` imports it. It runs in two Python
environments, because the official code needs DGL, and DGL does not install beside current
PyTorch (docs/methods.md, "smile"):

* spmlkit's environment plans a Yeast run of ``smile`` and writes its training rows (as the model
  sees them, standardised) and observed labels to ``OUT/data.npz``;
* the official environment (Python 3.11, torch 2.2.1, dgl 2.1.0, torchdata 0.7.1, torchvision
  0.17.1, pillow, numpy < 2, scipy, scikit-learn, pandas, pyyaml, pydantic) runs the official
  ``train_smile2.py``, unchanged, on them for one step, and writes what it computed to
  ``OUT/official.npz``. What a CPU run needs is done from outside the code: a stub ``nni`` module,
  ``.cuda()`` as a no-op, loaders with 0 workers and a seeded generator, a fresh working folder (the
  code caches its graph in ``middle/random_adj/``), the global seed set before ``train``. The step's
  values are recorded by wrapping what the code calls (its model classes, ``torch.optim.Adam``, its
  two loss functions and torch's Dirichlet sampler); the run stops after the first step. It also
  runs DGL's ``GraphConv`` on a small graph;
* spmlkit's environment loads the official initial weights, batch and Beta draw into ``smile``,
  takes the same step through spmlkit's method and optimiser, and prints each quantity with the
  largest difference (``OUT/comparison.json`` keeps them).

Run it (the official code at commit 8feb9b8, e.g. ``git clone https://github.com/palm-ml/smile``)::

    PYTHONPATH=src python tools/smile_side_by_side.py --official-code PATH/smile \\
        --official-python PATH/smile-env/bin/python --out /tmp/smile-side-by-side

The official environment, once::

    python3.11 -m venv smile-env && smile-env/bin/pip install --isolated torch==2.2.1 dgl==2.1.0 \\
        torchdata==0.7.1 torchvision==0.17.1 "pillow<11" "numpy<2" scipy scikit-learn pandas pyyaml pydantic
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

#: the README's Yeast command: --bias 0 --p 0.05 --mu 0.5 --rate 0.1 (lr 1e-3 and batch 16 are the defaults)
YEAST_ARGS = {"bias": 0, "p": 0.05, "mu": 0.5, "rate": 0.1, "lr": 0.001, "bs": 16}
LABELS = ("model", "encoder", "encoder_z", "decoder")  # the official modules, in the order train() builds them


# --------------------------------------------------------------------------- spmlkit's side: the data
def write_data(out: Path, seed: int) -> None:
    """Yeast's training rows as a ``smile`` run sees them, its observed and full labels."""
    import torch

    from spmlkit.experiments.presets import resolve_config
    from spmlkit.training.distributed import Distributed
    from spmlkit.training.plan import plan_run
    from spmlkit.training.trainer import _source

    plan = plan_run(resolve_config({"dataset": "yeast", "method": "smile", "seed": seed}))
    X = _source(plan, Distributed()).train_features(torch.nn.Identity()).numpy()
    observed = (plan.train_labels == 1).astype(np.float32)
    np.savez(out / "data.npz", X=X.astype(np.float32), Y_obs=observed, Y=plan.split.truth_train.astype(np.float32))


# --------------------------------------------------------------------------- the official side
def run_official(code: Path, out: Path, seed: int) -> None:
    """One step of the official ``train_smile2.py`` on ``OUT/data.npz``; writes ``OUT/official.npz``."""
    import types

    import scipy.io
    import torch

    data = np.load(out / "data.npz")
    work = out / "official-work"
    (work / "middle" / "random_adj").mkdir(parents=True, exist_ok=True)
    (work / "SPL_Datasets_rad").mkdir(exist_ok=True)
    n = len(data["X"])
    rows = np.arange(n).reshape(1, -1)
    scipy.io.savemat(work / "SPL_Datasets_rad" / "yeast.mat", {
        "X": data["X"].astype(np.float32), "Y": data["Y"], "Y_obs": data["Y_obs"],
        "tr_idx": rows, "va_idx": rows[:, :50], "te_idx": rows[:, 50:100]})
    os.chdir(work)
    sys.path.insert(0, str(code))
    sys.modules["nni"] = types.ModuleType("nni")  # imported only; every call is commented out
    torch.Tensor.cuda = lambda self, *a, **k: self
    torch.nn.Module.cuda = lambda self, *a, **k: self
    sys.argv = ["train_smile2.py", "--ds", "yeast", "--ep", "1", "--nw", "0",
                *[f"--{k}={v}" for k, v in YEAST_ARGS.items()]]
    import utils  # the official utils module

    loader = utils.DataLoader

    def seeded_loader(dataset, batch_size, shuffle, num_workers):
        return loader(dataset, batch_size=batch_size, shuffle=shuffle, num_workers=0,
                      generator=torch.Generator().manual_seed(seed))

    utils.DataLoader = seeded_loader
    import train_smile2 as official

    record: dict[str, np.ndarray] = {}
    made: list[torch.nn.Module] = []

    def recorded(cls):
        class Recorded(cls):
            def __init__(self, *a, **k):
                super().__init__(*a, **k)
                made.append(self)

            if cls is official.GCN:
                def forward(self, g, inputs):
                    out = super().forward(g, inputs)
                    record.setdefault("gcn_logits", out.detach().numpy().copy())
                    return out
        return Recorded

    for name in ("MLPNet", "GCN", "Decoder"):
        setattr(official, name, recorded(getattr(official, name)))

    def named():
        return {f"{label}.{k}": p for label, m in zip(LABELS, made) for k, p in m.named_parameters()}

    class Stop(Exception):
        pass

    class RecordingAdam(torch.optim.Adam):
        made_count = 0

        def __init__(self, groups, *a, **k):
            super().__init__(groups, *a, **k)
            self.which = ("classifier", "enhancement")[RecordingAdam.made_count]
            RecordingAdam.made_count += 1
            if self.which == "classifier":
                for key, p in named().items():
                    record[f"init/{key}"] = p.detach().numpy().copy()

        def step(self, closure=None):
            for key, p in named().items():
                if p.grad is not None and f"grad/{key}" not in record:
                    record[f"grad/{key}"] = p.grad.detach().numpy().copy()
            result = super().step(closure)
            if self.which == "enhancement":
                for key, p in named().items():
                    record[f"after/{key}"] = p.detach().numpy().copy()
                raise Stop
            return result

    torch.optim.Adam = RecordingAdam
    sampler = torch._sample_dirichlet

    def recording_sampler(concentration, *a, **k):
        record["rng_state_before_draw"] = torch.get_rng_state().numpy().copy()
        x = sampler(concentration, *a, **k)
        record["dirichlet_draw"] = x.detach().numpy().copy()
        return x

    torch._sample_dirichlet = recording_sampler
    classifier_loss, enhancement_loss = official.weighted_bce_loss, official.vae_loss

    def recording_classifier(preds, obs, weights, bias=True, rate=1.0):
        value = classifier_loss(preds, obs, weights, bias, rate)
        record.update(classifier_loss=value.detach().numpy(), classifier_target=weights.detach().numpy().copy())
        return value

    def recording_enhancement(args, X, Y_obs, D, G_A, X_rec, Y_rec, A_rec, idx):
        value, align, rest = enhancement_loss(args, X, Y_obs, D, G_A, X_rec, Y_rec, A_rec, idx)
        with torch.no_grad():
            parts = {"align": align, "rec_x": torch.nn.functional.mse_loss(X_rec, X),
                     "rec_y": official.loss_an(Y_rec, Y_obs), "rec_a": torch.nn.functional.mse_loss(A_rec, G_A),
                     "kl": official.beta_kl_loss(D, 1 - D, 1)}
        record.update({f"part/{k}": v.detach().numpy() for k, v in parts.items()})
        record.update(enhancement_loss=value.detach().numpy(), batch_idx=np.asarray(idx), distribution=D.detach().numpy(),
                      reconstructed=X_rec.detach().numpy(), draw=Y_rec.detach().numpy(),
                      adjacency=G_A.detach().numpy(), labels=Y_obs.detach().numpy())
        return value, align, rest

    official.weighted_bce_loss, official.vae_loss = recording_classifier, recording_enhancement
    torch.manual_seed(seed)  # set_seed inside train() is commented out
    try:
        official.train(official.args)
    except Stop:
        pass
    record["adjacency_full"] = np.load(work / "middle" / "random_adj" / "yeast.npy").astype(np.uint8)
    record["versions"] = np.array(f"torch {torch.__version__}, dgl {sys.modules['dgl'].__version__}, "
                                  f"numpy {np.__version__}, python {sys.version.split()[0]}")
    np.savez(out / "official.npz", **record)
    graphconv_check(official, out)


def graphconv_check(official, out: Path) -> None:
    """DGL's GraphConv (as SMILE builds it) on a 9-row graph with a row nobody points to; both orders
    of product and sum (3 -> 5 sums first, 5 -> 3 multiplies first); forward and gradients."""
    import torch
    from dgl.nn.pytorch import GraphConv
    from gen_adj import gen_adj_matrix_2

    gen = torch.Generator().manual_seed(7)
    X = torch.randn(9, 5, generator=gen)
    X[8] += 40.0  # far from everyone: no row picks it, so its in-degree is 0
    g, adj = gen_adj_matrix_2(X.numpy(), k=3, path=str(out / "official-work" / "small_graph.npy"))
    rec = {"X": X.numpy(), "adjacency": adj.numpy()}
    for dims in ((5, 3), (3, 5)):
        conv = GraphConv(*dims, norm="both", weight=True, bias=True, allow_zero_in_degree=True)
        with torch.no_grad():
            conv.bias.copy_(torch.randn(dims[1], generator=gen))
        x = (X if dims[0] == 5 else torch.randn(9, 3, generator=gen)).clone().requires_grad_()
        y = conv(g, x)
        upstream = torch.randn(y.shape, generator=gen)
        (y * upstream).sum().backward()
        tag = f"{dims[0]}to{dims[1]}"
        rec.update({f"{tag}/x": x.detach().numpy(), f"{tag}/weight": conv.weight.detach().numpy(),
                    f"{tag}/bias": conv.bias.detach().numpy(), f"{tag}/out": y.detach().numpy(),
                    f"{tag}/upstream": upstream.numpy(), f"{tag}/grad_x": x.grad.numpy(),
                    f"{tag}/grad_weight": conv.weight.grad.numpy(), f"{tag}/grad_bias": conv.bias.grad.numpy()})
    np.savez(out / "graphconv.npz", **rec)


# --------------------------------------------------------------------------- spmlkit's side: the step
#: official parameter -> spmlkit parameter (the classifier head, then the loss's networks)
def _our_name(key: str) -> tuple[str, str]:
    label, rest = key.split(".", 1)
    if label == "model":
        return "head", {"fc1": "net.0", "fc2": "net.3"}[rest.split(".")[0]] + "." + rest.split(".")[1]
    if label == "encoder":
        return "loss", f"encoder.{rest}"
    if label == "encoder_z":
        return "loss", {"fc1": "latent.0", "fc2": "latent.2"}[rest.split(".")[0]] + "." + rest.split(".")[1]
    layer, kind = rest.split(".")[1:]
    return "loss", {"fc1": "reconstruct.0", "fc2": "reconstruct.2"}[layer] + "." + kind


def compare(out: Path) -> list[dict]:
    """Our step on the official weights, batch and draw; one row per quantity compared."""
    import torch

    from spmlkit.experiments.presets import resolve_config
    from spmlkit.labels import LabelBatch, PseudoLabels
    from spmlkit.methods import METHODS, RunInfo
    from spmlkit.models import FeatureHead, ModelOutput
    from spmlkit.models.graph import GraphConv, KnnGraph
    from spmlkit.training.trainer import _optimizer

    torch.set_num_threads(1)
    off = np.load(out / "official.npz")
    data = np.load(out / "data.npz")
    X = torch.from_numpy(data["X"])
    n, dim = X.shape
    classes = data["Y_obs"].shape[1]
    rows: list[dict] = []

    def row(what: str, official: np.ndarray, ours: torch.Tensor | np.ndarray) -> None:
        ours = ours.detach().numpy() if isinstance(ours, torch.Tensor) else np.asarray(ours)
        official = np.asarray(official, dtype=np.float64)
        diff = float(np.max(np.abs(official - ours.astype(np.float64)))) if official.size else 0.0
        shown = float(official) if official.size == 1 else float(np.max(np.abs(official)))
        rows.append({"quantity": what, "shape": list(official.shape), "official": shown,
                     "ours": float(ours) if ours.size == 1 else float(np.max(np.abs(ours))), "max_abs_diff": diff})

    # the graph, and DGL's GraphConv on a small one
    hparams = {"bias": False, "p": YEAST_ARGS["p"], "mu": YEAST_ARGS["mu"], "rate": YEAST_ARGS["rate"]}
    observed = np.where(data["Y_obs"] > 0, 1, 0).astype(np.int8)
    info = RunInfo(num_train=n, num_classes=classes, observed=observed, expected_num_pos=1.0, epochs=1, seed=0,
                   features=lambda: X)
    loss = METHODS["smile"](info, **hparams)  # the method: its networks, its draws, its two losses
    ours_adj = np.zeros((n, n), dtype=np.uint8)
    ours_adj[np.repeat(np.arange(n), loss.k), loss.encoder.graph.neighbours.reshape(-1).numpy()] = 1
    rows.append({"quantity": "k-NN graph: edges that differ", "shape": [n, n],
                 "official": int(off["adjacency_full"].sum()), "ours": int(ours_adj.sum()),
                 "max_abs_diff": int((ours_adj != off["adjacency_full"]).sum())})
    small = np.load(out / "graphconv.npz")
    graph = KnnGraph(torch.from_numpy(small["X"]), 3)
    row("GraphConv check: 9-row graph, edges", small["adjacency"], _dense(graph))
    for tag in ("5to3", "3to5"):
        d_in, d_out = (5, 3) if tag == "5to3" else (3, 5)
        conv = GraphConv(d_in, d_out)
        with torch.no_grad():
            conv.weight.copy_(torch.from_numpy(small[f"{tag}/weight"]))
            conv.bias.copy_(torch.from_numpy(small[f"{tag}/bias"]))
        x = torch.from_numpy(small[f"{tag}/x"]).requires_grad_()
        y = conv(graph, x)
        (y * torch.from_numpy(small[f"{tag}/upstream"])).sum().backward()
        row(f"GraphConv check {d_in}->{d_out}: output", small[f"{tag}/out"], y)
        row(f"GraphConv check {d_in}->{d_out}: grad input", small[f"{tag}/grad_x"], x.grad)
        row(f"GraphConv check {d_in}->{d_out}: grad weight", small[f"{tag}/grad_weight"], conv.weight.grad)
        row(f"GraphConv check {d_in}->{d_out}: grad bias", small[f"{tag}/grad_bias"], conv.bias.grad)

    # the step: the official initial weights, batch and Beta draw
    head = FeatureHead(dim, classes, "mlp", hidden=classes)
    modules = {"head": head, "loss": loss}
    keys = [k[len("init/"):] for k in off.files if k.startswith("init/")]
    with torch.no_grad():
        for key in keys:
            where, name = _our_name(key)
            modules[where].get_parameter(name).copy_(torch.from_numpy(off[f"init/{key}"]))
    draw = torch.from_numpy(off["dirichlet_draw"])
    loss.sample = lambda concentration: draw
    idx = torch.from_numpy(off["batch_idx"]).long()
    labels = torch.from_numpy(observed[idx.numpy()]).float()
    row("observed labels of the batch", off["labels"], labels)
    logits = head(X[idx]).logits
    parts = loss.terms(logits, labels, idx)
    row("GCN logits, every training row", off["gcn_logits"], loss.encoder())
    row("D of the batch", off["distribution"], parts.distribution)
    row("classifier targets", off["classifier_target"],
        (loss.mu * parts.distribution + (1 - loss.mu) * torch.where(labels > 0, 1.0, loss.p)).detach())
    row("Beta draw (replayed)", off["draw"], parts.draw)
    generator = torch.Generator()
    generator.set_state(torch.from_numpy(off["rng_state_before_draw"]))
    pair = torch.stack([parts.distribution + 1e-5, 1 - parts.distribution + 1e-5], -1).detach()
    row("Beta draw by this torch from the official generator state", off["draw"],
        torch._sample_dirichlet(pair, generator=generator)[..., 0])
    row("reconstructed x", off["reconstructed"], parts.reconstructed)
    row("adjacency of the batch", off["adjacency"], parts.adjacency)
    row("classifier loss", off["classifier_loss"], parts.classifier)
    row("enhancement loss", off["enhancement_loss"], parts.enhancement)
    from spmlkit.losses.smile import _assume_negative, beta_kl_term

    positive = labels > 0
    ours_parts = {"align": _assume_negative(parts.distribution, positive),
                  "rec_x": torch.nn.functional.mse_loss(parts.reconstructed, X[idx]),
                  "rec_y": _assume_negative(parts.draw, positive),
                  "rec_a": torch.nn.functional.mse_loss(parts.draw @ parts.draw.T, parts.adjacency),
                  "kl": beta_kl_term(parts.distribution)}
    for name, value in ours_parts.items():
        row(f"enhancement part {name}", off[f"part/{name}"], value)
    batch = LabelBatch(labels, PseudoLabels(torch.zeros_like(labels, dtype=torch.bool), torch.zeros_like(labels)), idx)
    total = loss.loss(ModelOutput(logits), batch)
    row("the step's loss through the method's loss hook = classifier + enhancement",
        off["classifier_loss"] + off["enhancement_loss"], total)
    total.backward()
    before = {key: modules[_our_name(key)[0]].get_parameter(_our_name(key)[1]).detach().clone() for key in keys}
    for key in keys:
        where, name = _our_name(key)
        row(f"gradient {key}", off[f"grad/{key}"], modules[where].get_parameter(name).grad)
    config = resolve_config({"dataset": "yeast", "method": "smile", "lr": YEAST_ARGS["lr"], "optimizer": "adam"})
    optimizer = _optimizer(config, head.param_groups(config.optimisation.lr) + loss.param_groups(config.optimisation.lr))
    optimizer.step()
    for key in keys:
        where, name = _our_name(key)
        row(f"after Adam {key}", off[f"after/{key}"], modules[where].get_parameter(name))
    # the same update by torch's single-tensor Adam, the official code's (fused is spmlkit's)
    for key in keys:
        where, name = _our_name(key)
        p = torch.nn.Parameter(before[key].clone())
        p.grad = modules[where].get_parameter(name).grad
        torch.optim.Adam([p], lr=YEAST_ARGS["lr"], foreach=False).step()
        row(f"after single-tensor Adam {key}", off[f"after/{key}"], p)
    return rows


def _dense(graph) -> np.ndarray:
    n = graph.num_rows
    adj = np.zeros((n, n), dtype=np.float32)
    adj[np.repeat(np.arange(n), graph.k), graph.neighbours.reshape(-1).numpy()] = 1
    return adj


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--official-code", type=Path, help="a checkout of palm-ml/smile (commit 8feb9b8)")
    parser.add_argument("--official-python", help="the official environment's python (see the module docstring)")
    parser.add_argument("--out", type=Path, default=Path("smile-side-by-side"),
                        help="a new folder for the data, the official record and the comparison "
                             "(default: smile-side-by-side)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the weights, the batch and the draws (default: 0)")
    parser.add_argument("--role", choices=("all", "official"), default="all",
                        help="all: run both sides (default); official: the official side only (called by 'all')")
    args = parser.parse_args()
    if args.role == "official":
        run_official(args.official_code.resolve(), args.out.resolve(), args.seed)
        return
    if args.official_code is None or args.official_python is None:
        parser.error("--official-code and --official-python are needed")
    args.out.mkdir(parents=True, exist_ok=False)
    write_data(args.out, args.seed)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"DGLBACKEND": "pytorch"}
    subprocess.run([args.official_python, str(Path(__file__).resolve()), "--role", "official", "--official-code",
                    str(args.official_code), "--out", str(args.out), "--seed", str(args.seed)], check=True, env=env)
    rows = compare(args.out)
    import torch

    versions = str(np.load(args.out / "official.npz")["versions"])
    ours = f"spmlkit with torch {torch.__version__}, numpy {np.__version__}, python {sys.version.split()[0]}"
    (args.out / "comparison.json").write_text(json.dumps({"official": versions, "ours": ours, "rows": rows}, indent=1))
    print(f"official side: {versions}\nour side: {ours}")
    print(f"{'quantity':<62} {'official':>13} {'ours':>13} {'max |diff|':>11}")
    for r in rows:
        print(f"{r['quantity']:<62} {r['official']:>13.6g} {r['ours']:>13.6g} {r['max_abs_diff']:>11.3g}")


if __name__ == "__main__":
    main()
