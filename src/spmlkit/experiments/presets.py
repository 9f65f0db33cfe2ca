"""Paper presets: each published (method, dataset) setting as a named training config.

``get_preset("em_apl/voc2012")`` returns the config overrides of that row of the papers
(docs/methods.md and docs/protocol.md, "Training protocols": backbone, image size, batch size, lr, epochs, early stopping and the
method's hyperparameters) and the published number it targets (docs/methods.md, "Published results"). Dataset
defaults (the base protocol of Cole et al. as used by EM) come first, then the paper's
protocol for the method, then the method's per-dataset hyperparameters.

Where a paper's values are lost or unpublished the preset says so in ``notes`` and uses
spmlkit's documented defaults; those rows reproduce the protocol, not necessarily the number.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..training.config import (RESUME_FREE, DataConfig, MethodConfig, RunConfig, check_min_lr, config_from_dict,
                               flat_settings, merged_plugins, saved_settings)
from ..training.defaults import FEATURE_DEFAULTS

__all__ = ["Preset", "DATASET_DEFAULTS", "OWN_LABELS", "PRESETS", "PROTOCOL_PRESETS", "RECIPE_DEFAULTS",
           "TABULAR_PROTOCOL", "get_preset", "list_presets", "dataset_defaults", "default_observation",
           "default_val_variant", "resolve_config", "hparams_preset", "preset_sources", "check_hparams_from"]

#: what a user's own data defaults to, whatever its kind (docs/protocol.md, "Your own data"): its own
#: labels ("given"), and selection on the observed positives of the held-out rows, the only labels it has
OWN_LABELS: dict[str, Any] = {"observation": "given", "val_variant": "observed"}


#: base protocol per dataset (docs/protocol.md, "Training protocols"; EM's chosen batch size and lr per dataset)
DATASET_DEFAULTS: dict[str, dict[str, Any]] = {
    "voc2012": {"backbone": "torchvision:resnet50", "pretrained": True, "image_size": 448, "batch_size": 8,
                "lr": 1e-5, "epochs": 10},
    "coco2014": {"backbone": "torchvision:resnet50", "pretrained": True, "image_size": 448, "batch_size": 16,
                 "lr": 1e-5, "epochs": 10},
    "nuswide": {"backbone": "torchvision:resnet50", "pretrained": True, "image_size": 448, "batch_size": 16,
                "lr": 1e-5, "epochs": 10},
    "cub": {"backbone": "torchvision:resnet50", "pretrained": True, "image_size": 448, "batch_size": 8,
            "lr": 1e-4, "epochs": 10},
    # PU-MLC trains on all of trainval (no validation split; val_frac 0.2 restores one)
    "voc2007": {"backbone": "torchvision:resnet101", "pretrained": True, "image_size": 448, "batch_size": 45,
                "lr": 4e-5, "epochs": 56, "observation": "ratio=0.1", "val_frac": 0.0},
    # feature runs (docs/protocol.md, "Training protocols"): a linear head on fixed features
    "yeast": dict(FEATURE_DEFAULTS),
    # the CPU demo: a small CNN from scratch on 32x32 mosaics of real handwritten digits
    "digits-mosaic": {"backbone": "small:cnn", "pretrained": False, "image_size": 32, "batch_size": 64,
                      "lr": 3e-3, "epochs": 10, "hflip": False},
    # users' own images (`spmlkit prepare folder|csv`; docs/protocol.md, "Your own data"). The labels are the
    # ones the user has ("given"), and nothing clean exists to select on, so the model is selected on the
    # observed positives of the held-out validation rows ("observed"). The network is the base protocol's
    # (ImageNet ResNet-50 at 448 x 448, Adam, 10 epochs): pretrained features matter most when a user has
    # few images. lr 1e-4 rather than VOC/COCO/NUS-WIDE's 1e-5: those were chosen on tens of thousands of
    # images with a clean validation set; 1e-4 is the base protocol's value for CUB, its smallest training
    # set (a small set gives few steps per epoch, so each must move further). Batch 16 as COCO and NUS-WIDE
    # (--batch-size 8, VOC's and CUB's, halves the memory on a smaller GPU).
    "folder": {"backbone": "torchvision:resnet50", "pretrained": True, "image_size": 448, "batch_size": 16,
               "lr": 1e-4, "epochs": 10, **OWN_LABELS},
}
DATASET_DEFAULTS["csv"] = dict(DATASET_DEFAULTS["folder"])  # the same images, labelled in a file

#: the tabular protocol of SMILE and CRISP (docs/protocol.md, "The tabular protocol"): every row of a feature set
#: partitioned 80 / 10 / 10 afresh by each run's seed (a trial), SMILE's MLP (one hidden layer as wide as the set has
#: labels), 10 epochs. The papers' grid (lr and weight decay in {1e-2, ..., 1e-5}, batch 8 or 16) and their 5 trials
#: are the sweep's axes (``spmlkit reproduce``, experiments/reproduce.py); ``spmlkit train --preset tabular`` trains
#: one point of it
TABULAR_PROTOCOL: dict[str, Any] = {"partition": "random", "head": "mlp", "hidden": "classes", "epochs": 10,
                                     "standardize": False}
#: protocols that ``--preset NAME`` names beside the (method, dataset) presets: settings of every data set and method
PROTOCOL_PRESETS: dict[str, dict[str, Any]] = {"tabular": TABULAR_PROTOCOL}

#: notes of the dataset-defaults presets (``get_preset("voc2007")``)
_DATASET_NOTES = {
    "voc2007": "PU-MLC protocol: trains on all of trainval and keeps the last epoch (val_frac 0.0); "
               "--val-frac 0.2 (config val_frac: 0.2) restores a held-out validation split",
}

_D4 = ("voc2012", "coco2014", "nuswide", "cub")


def _per(values: tuple, key: str) -> dict[str, dict[str, Any]]:
    """``{dataset: {key: value}}`` for the four SPML datasets in order VOC, COCO, NUS, CUB."""
    return {d: {key: v} for d, v in zip(_D4, values)}


def _merge(*tables: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for t in tables:
        for d, kv in t.items():
            out.setdefault(d, {}).update(kv)
    return out


#: EM's early stopping: stop at the first epoch that is not strictly better (docs/protocol.md, "Training protocols")
_EM_PROTOCOL = {"patience": 0}
#: LL and GR train the head at 10x lr and stop when val mAP drops below best - 3 / - 2 points
_LL_PROTOCOL = {"head_lr_mult": 10.0, "lr": 1e-5, "batch_size": 16, "epochs": 10, "stop_drop": 0.03}
_GR_PROTOCOL = {"head_lr_mult": 10.0, "stop_drop": 0.02}
#: the BoostLU code (docs/methods.md, "boostlu_ll_r"): LL's Adam, lr and batch for every dataset, all 10
#: epochs with the best validation epoch kept (no early stop)
_BOOSTLU_PROTOCOL = {"head_lr_mult": 10.0, "lr": 1e-5, "batch_size": 16, "epochs": 10}
_BOOSTLU_NOTES = ("the official BoostLU code's values, the same for every dataset: alpha 5 (its README's command), "
                  "delta_rel {delta} % ({scheme}), no early stop; also compare BoostLU Table 1 "
                  "(the paper's own runs)")

#: MIME's official code around its loss: the label-query transformer, Adamax, 10x lr after the backbone, the stem and
#: layer1 frozen, BatchNorm constant (docs/methods.md, "mime")
_MIME_PROTOCOL = {"image_head": "label_query", "bottleneck": 256, "bottleneck_samples": 10, "optimizer": "adamax",
                  "lr": 1e-4, "head_lr_mult": 10.0, "weight_decay": 0.0, "epochs": 10,
                  "train_only": ["layer2", "layer3", "layer4", "head"], "constant_bn": True}

#: SMILE's published hyperparameters per feature dataset: the official code's README commands (--bias, --p,
#: --mu, --rate; lr 1e-3, batch 16 and 10 epochs of an MLP with hidden width = number of labels are the code's
#: defaults, which these presets leave to spmlkit's feature protocol). Every set of the README that spmlkit reads
#: (its other six, rcv1subset1, Corel16k001, iaprtc12, espgame, mirflickr and Image, it does not). SMILE's own
#: copies of the sets differ from MULAN's where noted (docs/methods.md, "smile")
SMILE_TABULAR_HPARAMS: dict[str, dict[str, Any]] = {
    "cal500": {"bias": False, "p": 0.01, "mu": 0.01, "rate": 0.1},
    "yeast": {"bias": False, "p": 0.05, "mu": 0.5, "rate": 0.1},
    "scene": {"bias": False, "p": 0.075, "mu": 0.3, "rate": 0.5},
    "corel5k": {"bias": False, "p": 0.025, "mu": 0.1, "rate": 0.1},
    "delicious": {"bias": True, "p": 0.01, "mu": 0.01},
    "tmc2007": {"bias": False, "p": 0.025, "mu": 0.1, "rate": 0.3},
}
_SMILE_TABULAR_NOTES = ("the official README's command for {dataset} (bias, p, mu, rate) on spmlkit's feature protocol "
                        "(linear head, lr 3e-3, batch 64, 20 epochs; the code's own: an MLP with hidden width = labels, "
                        "lr 1e-3, batch 16, 10 epochs){extra}")
_SMILE_TABULAR_EXTRA = {"tmc2007": "; SMILE's tmc2007 has 981 features, MULAN's tmc2007-500 keeps 500"}
_SMILE_IMAGE_NOTES = ("SMILE's image hyperparameters are unpublished: the official code's defaults (mu 0.5, p 0.5, "
                      "unobserved entries weighted 1/(C-1)); the k-NN graph is built from the initial backbone's "
                      "pooled features of the training images (docs/methods.md, \"smile\")")

#: (method, {dataset: config overrides incl. hparams}, protocol overrides, source, notes)
_TABLE: list[tuple[str, dict[str, dict[str, Any]], dict[str, Any], str, str]] = [
    ("bce", {d: {} for d in _D4}, _EM_PROTOCOL, "EM Table 1", "full labels"),
    ("iun", {d: {} for d in _D4}, _EM_PROTOCOL, "EM Table 1", "1 positive + all negatives"),
    ("an", {d: {} for d in _D4}, _EM_PROTOCOL, "EM Table 1", ""),
    ("dw", _per((0.1, 0.1, 0.1, 0.02), "weight"), _EM_PROTOCOL, "EM Table 1", ""),
    ("l1r", _per((1e-6, 1e-7, 1e-7, 1e-9), "penalty"), _EM_PROTOCOL, "EM Table 1", ""),
    ("l2r", _per((1e-6, 1e-7, 1e-6, 1e-8), "penalty"), _EM_PROTOCOL, "EM Table 1", ""),
    ("an_ls", _per((0.1, 0.1, 0.1, 0.1), "ls_coef"), _EM_PROTOCOL, "EM Table 1", "the LS row"),
    ("n_ls", _per((0.3, 0.1, 0.1, 0.1), "ls_coef"), _EM_PROTOCOL, "EM Table 1", ""),
    ("entmin", _per((0.01, 0.9, 0.4, 0.4), "weight"), _EM_PROTOCOL, "EM Table 1", ""),
    ("focal", _per((0.75, 0.75, 0.75, 0.75), "alpha"), _EM_PROTOCOL, "EM Table 1", "gamma = 2"),
    ("asl", _merge(_per((0.0,) * 4, "gamma_pos"), _per((2.0, 2.0, 2.0, 1.0), "gamma_neg"),
                   _per((0.2, 0.2, 0.2, 0.0), "clip")), _EM_PROTOCOL, "EM Table 1", ""),
    ("wan", {d: {} for d in _D4}, {}, "CRISP Table 1",
     "gamma = 1/(C-1); CRISP's lr/batch per data set unpublished: the base protocol's"),
    ("epr", _per((1.5, 2.9, 1.9, 31.4), "expected_num_pos"), {}, "Cole et al. 2021",
     "no EM-table row; targets CRISP Table 1"),
    ("role", _per((1.5, 2.9, 1.9, 31.4), "expected_num_pos"), _EM_PROTOCOL, "EM Table 1", ""),
    ("em", _per((0.2, 0.1, 0.1, 0.01), "alpha"), _EM_PROTOCOL, "EM Table 1", ""),
    ("em_apl", _merge(_per((0.2, 0.1, 0.1, 0.01), "alpha"), _per((0.02, 0.9, 0.2, 0.4), "beta"),
                      _per((5, 5, 4, 3), "warmup_epochs"), _per((0.9,) * 4, "theta")),
     _EM_PROTOCOL, "EM Table 1", ""),
    ("hill", {d: {} for d in ("voc2012", "coco2014")}, {}, "GR Table 2", "Hill defaults (lambda 1.5, margin 1, gamma 2)"),
    ("splc", {d: {} for d in _D4}, {}, "GR Table 2", "SPLC defaults (tau 0.6, margin 1, gamma 2)"),
    ("ll_r", {d: {} for d in _D4}, _LL_PROTOCOL, "OPML Table II", "delta_rel per dataset unpublished: 0.2"),
    ("ll_ct", {d: {} for d in _D4}, _LL_PROTOCOL, "OPML Table II", "delta_rel per dataset unpublished: 0.2"),
    ("ll_cp", {d: {} for d in _D4}, _LL_PROTOCOL, "OPML Table II", "delta_rel per dataset unpublished: 0.2"),
    ("gr", _merge(_per((8, 16, 16, 8), "batch_size"), _per((1e-5, 1e-5, 1e-5, 5e-5), "lr"),
                  _per((8, 8, 10, 10), "epochs"), _per((1.0, 1.0, 1.0, 1.5), "q3"),
                  {"voc2012": {"schedule": {"w": [0, 2], "b": [-2, -2], "mu": [0.5, 0.8], "sigma": [2, 0.5]}}},
                  {d: {"schedule": {"w": [0, 10], "b": [-2, -8], "mu": [0.5, 0.8], "sigma": [2, 0.5]}}
                   for d in ("coco2014", "nuswide", "cub")}),
     _GR_PROTOCOL, "GR Table 2", "start values other than VOC unpublished: code defaults"),
    ("zlpr", {d: {} for d in _D4}, {"optimizer": "sgd"}, "OPML Table III", "OPML's lr/batch/epochs are lost"),
    ("opml", {d: {} for d in _D4}, {"optimizer": "sgd"}, "OPML Table II", "a, b and lr/batch/epochs are lost"),
    ("opml_sp", {d: {} for d in _D4}, {"optimizer": "sgd"}, "OPML Table II",
     "a, b, r, rho and epochs are lost: spmlkit defaults"),
    # CRISP: 10 epochs, batch from {8, 16}, lr and weight decay from {1e-2, 1e-3, 1e-4, 1e-5} chosen on
    # validation, δ = τ = 0.01 (its Appendix A.6); which grid values won is unpublished
    ("crisp", {d: {"delta": 0.01, "tau": 0.01} for d in _D4}, {"epochs": 10}, "CRISP Table 1",
     "delta = tau = 0.01 as published; the lr, weight decay and batch it chose per dataset on validation are "
     "unpublished: the base protocol's lr and batch (both inside its grid) and weight decay 0 (its grid has none)"),
    # BoostLU + LL: the code's delta_rel per scheme (its config.py) and alpha 5 on every dataset
    ("boostlu_ll_r", {d: {"delta_rel": 0.5, "boost_alpha": 5.0} for d in _D4}, _BOOSTLU_PROTOCOL, "CRISP Table 1",
     _BOOSTLU_NOTES.format(delta=0.5, scheme="LL-R")),
    ("boostlu_ll_ct", {d: {"delta_rel": 0.2, "boost_alpha": 5.0} for d in _D4}, _BOOSTLU_PROTOCOL, "CRISP Table 1",
     _BOOSTLU_NOTES.format(delta=0.2, scheme="LL-Ct")),
    ("boostlu_ll_cp", {d: {"delta_rel": 0.1, "boost_alpha": 5.0} for d in _D4}, _BOOSTLU_PROTOCOL, "CRISP Table 1",
     _BOOSTLU_NOTES.format(delta=0.1, scheme="LL-Cp")),
    # MIME as its official code trains it (docs/methods.md, "mime"): the label-query transformer and a Gaussian
    # bottleneck of width 256 (10 draws) before the classifier, Adamax at lr 1e-4 with 10x for everything after the
    # backbone, no weight decay, 10 epochs, the stem and layer1 frozen and BatchNorm constant; beta 1e-4,
    # pseudo-positives above 0.95 after every epoch from the second (CUB: the fifth) on; batch 32 / 32 / 16 / 16
    ("mime", _merge(_per((32, 32, 16, 16), "batch_size"), _per((2, 2, 2, 5), "start_epoch"),
                    {d: {"beta": 1e-4, "threshold": 0.95} for d in _D4}),
     _MIME_PROTOCOL, "GR Table 2",
     "the official code's recipe; its own paper's table is not readable in our copy: the target is GR Table 2's "
     "MIME row; still different: predictions and pseudo-labels read the codes' means (the code samples them), "
     "every training row gets pseudo-labels, from unflipped images"),
    # PU-MLC's COCO list is every train2014 image in JSON order (docs/protocol.md, "MS-COCO 2014"), and it
    # trains on the whole official train list (no validation split; docs/protocol.md, "Known-label ratio")
    ("smile", {d: {} for d in _D4}, {}, "GR Table 2", _SMILE_IMAGE_NOTES),
    ("pu_mlc", {"voc2007": {"gamma": 0.85, "alpha": 2.0},
                "coco2014": {"gamma": 0.55, "alpha": 1.0, "backbone": "torchvision:resnet101", "batch_size": 35,
                             "lr": 1e-4, "epochs": 41, "observation": "ratio=0.1", "dataset_variant": "pu_mlc"}},
     {"lgconv": True, "weight_decay": 1e-4, "val_frac": 0.0}, "PU-MLC Table I",
     ("spmlkit's simpler recipe (every weight trains, BatchNorm in training mode, constant lr, no EMA, no crops; "
      "pu_mlc/<dataset>-official is the official code's); "
      "10% known labels; plain ResNet-101 + LgConv head instead of the SST head; trains on the whole "
      "official train list and keeps the last epoch (val_frac 0.0, as PU-MLC); --val-frac 0.2 (config "
      "val_frac: 0.2) restores a held-out validation split with selection on val")),
]

#: Yeast hyperparameters, chosen on *validation* mAP only by ``benchmarks/tune_yeast.py`` (grids
#: listed there); methods not named use their recipes' defaults. Yeast is dense (4.2 positives
#: of 14 per gene), and like EM on CUB (31 of 312) it prefers a small EM weight alpha.
#: OPML-SP's correction epoch is half the 20 epochs, as it was before recipes carried a default.
YEAST_HPARAMS: dict[str, dict[str, Any]] = {
    "dw": {"weight": 0.05},
    "l1r": {"penalty": 1e-3},
    "l2r": {"penalty": 0.1},
    "em": {"alpha": 0.005},
    "em_apl": {"alpha": 0.005, "beta": 0.9, "warmup_epochs": 4},
    "opml": {"a": 64.0, "b": 0.1},
    "opml_sp": {"a": 16.0, "b": 0.25, "rho": 0.05, "highrank_lam": 0.001, "r": 4.0, "start_epoch": 10},
}

#: the PU-MLC code's recipe around its loss (docs/protocol.md, "Recipes"): what trains (the LgConv global branches,
#: layer4 and the head) with every BatchNorm in eval mode, Adam with weight decay 1e-4 on a one-cycle schedule of 80
#: epochs (20 % warm-up, OneCycleLR's other defaults) that the code stops early, a weight EMA updated every step and
#: validated beside the plain weights, multi-scale crops, and LgConv as the code builds it (a projection bias,
#: gamma ~ N(0, 1e-4)). The batch is the global batch of the code's two GPUs (2 x 45 VOC, 2 x 35 COCO), and each
#: epoch's last, shorter batch is dropped as the code's loader does
_PU_MLC_OFFICIAL_RECIPE: dict[str, Any] = {
    "backbone": "torchvision:resnet101", "pretrained": True, "lgconv": True, "lgconv_bias": True,
    "lgconv_gamma_init": "normal", "train_only": ["lgconv_global", "layer4", "head"], "freeze_bn": True,
    "optimizer": "adam", "weight_decay": 1e-4, "lr_schedule": "onecycle", "schedule_epochs": 80, "warmup_frac": 0.2,
    "augment": "multiscale_crop", "crop_scale": 512, "crop_sizes": [512, 448, 384, 320, 256], "image_size": 448,
    "hflip": True, "batch_per": "global", "drop_last": True, "val_frac": 0.0,
}
#: per dataset: the global batch, lr, the epochs the code trains (its Stop_epoch + 1) and the EMA decay
_PU_MLC_OFFICIAL: dict[str, dict[str, Any]] = {
    "voc2007": {"batch_size": 90, "lr": 4e-5, "epochs": 56, "ema_decay": 0.991},
    "coco2014": {"batch_size": 70, "lr": 1e-4, "epochs": 41, "ema_decay": 0.9997},
}
_PU_MLC_OFFICIAL_NOTES = (
    "the official PU-MLC code's recipe: only the LgConv global branches, layer4 and the head train, every BatchNorm "
    "frozen; global batch {batch} (2 GPUs x {half}); one-cycle over 80 epochs stopped after {epochs}; EMA {ema} "
    "validated beside the plain weights; multi-scale crops; LgConv with projection bias and N(0, 1e-4) gamma. Still "
    "different: a linear head instead of the SST head, no selection on the test set (keeps the last epoch, EMA "
    "weights; --val-frac 0.2 (config val_frac: 0.2) selects on validation over both); "
    'see docs/protocol.md, "Recipes"')

#: the LAC code's recipe for both of its stages (docs/methods.md, "plc"): its label-query transformer on an ImageNet
#: ResNet-50 whose BatchNorm is constant and whose stem and layer1 do not train, AdamW (weight decay 1e-2) on a
#: one-cycle schedule peaking at 1e-4 (20 % warm-up), a weight EMA of decay 0.9997 validated beside the plain weights,
#: batch 32 with the last short batch dropped, 40 epochs with its early stop (9 epochs past the best)
_LAC_RECIPE: dict[str, Any] = {
    "backbone": "torchvision:resnet50", "pretrained": True, "image_size": 448, "image_head": "label_query",
    "constant_bn": True, "train_only": ["layer2", "layer3", "layer4", "head"], "optimizer": "adamw", "lr": 1e-4,
    "weight_decay": 1e-2, "lr_schedule": "onecycle", "warmup_frac": 0.2, "ema_decay": 0.9997, "batch_size": 32,
    "drop_last": True, "epochs": 40, "patience": 9,
}
#: each stage's hyperparameters, the code's README (its COCO command lines; the paper's per-dataset values are not
#: in the code): stage 1 (plc) tau 0.6, stage 2 (lac) tau 0.9, temperature 0.5, a queue of 512, both weights 1
_LAC_STAGES: dict[str, dict[str, Any]] = {
    "plc": {"threshold": 0.6, "plc_weight": 1.0},
    "lac": {"threshold": 0.9, "plc_weight": 1.0, "lac_weight": 1.0, "temperature": 0.5, "queue_size": 512},
}
_LAC_NOTES = {
    "plc": "LAC's first stage as its code trains it (label-query transformer, constant BatchNorm, AdamW, one-cycle, "
           "EMA); the code's README values (tau 0.6), the same on every dataset; inputs ImageNet-normalised where the "
           "code feeds raw [0, 1] pixels; see docs/methods.md, \"plc\"",
    "lac": "LAC's second stage: start it from a plc run with --init-weights RUN/best.pt (the code starts from its "
           "first stage's best weights); the code's README values (tau 0.9, T 0.5, queue 512); no published number "
           "spmlkit could read for LAC itself; see docs/methods.md, \"lac\"",
}

_CONFIG_KEYS = {"backbone", "pretrained", "image_size", "batch_size", "lr", "epochs", "observation", "patience",
                "head_lr_mult", "optimizer", "lgconv", "weight_decay", "linear_init_epochs", "linear_init_lr",
                "stop_drop", "hflip", "dataset_variant", "val_frac"}


@dataclass(frozen=True)
class Preset:
    name: str  # "<method>/<dataset>"
    method: str
    dataset: str
    config: dict[str, Any]  # TrainConfig overrides (hparams inside)
    source: str  # the paper table whose number it targets
    notes: str = ""
    targets: tuple = field(default=())  # published (source, mean, std) rows

    @property
    def target(self) -> tuple[str, float, float | None] | None:
        return self.targets[0] if self.targets else None


def _build() -> dict[str, Preset]:
    presets: dict[str, Preset] = {}
    for method, per_dataset, protocol, source, notes in _TABLE:
        for dataset, values in per_dataset.items():
            cfg: dict[str, Any] = {**DATASET_DEFAULTS[dataset], **protocol, "dataset": dataset, "method": method}
            hparams = {}
            for k, v in values.items():
                (cfg.__setitem__(k, v) if k in _CONFIG_KEYS else hparams.__setitem__(k, v))
            cfg["hparams"] = hparams
            name = f"{method}/{dataset}"
            presets[name] = Preset(name, method, dataset, cfg, source, notes, _targets(method, dataset, cfg, source))
    for method, hparams in YEAST_HPARAMS.items():
        cfg = {**DATASET_DEFAULTS["yeast"], "dataset": "yeast", "method": method, "hparams": dict(hparams)}
        presets[f"{method}/yeast"] = Preset(f"{method}/yeast", method, "yeast", cfg, "spmlkit (chosen on validation)",
                                            "tuned by benchmarks/tune_yeast.py on validation mAP")
    for dataset, hparams in SMILE_TABULAR_HPARAMS.items():
        cfg = {**FEATURE_DEFAULTS, "dataset": dataset, "method": "smile", "hparams": dict(hparams)}
        notes = _SMILE_TABULAR_NOTES.format(dataset=dataset, extra=_SMILE_TABULAR_EXTRA.get(dataset, ""))
        presets[f"smile/{dataset}"] = Preset(f"smile/{dataset}", "smile", dataset, cfg, "SMILE code README", notes)
    # PU-MLC as its official code trains it; pu_mlc/<dataset> stays spmlkit's simpler recipe (everything trains,
    # BatchNorm in training mode, constant lr, no EMA, resize without crops)
    for dataset, values in _PU_MLC_OFFICIAL.items():
        base = presets[f"pu_mlc/{dataset}"]
        cfg = {**base.config, **_PU_MLC_OFFICIAL_RECIPE, **values, "hparams": dict(base.config["hparams"])}
        name = f"pu_mlc/{dataset}-official"
        notes = _PU_MLC_OFFICIAL_NOTES.format(batch=values["batch_size"], half=values["batch_size"] // 2,
                                              epochs=values["epochs"], ema=values["ema_decay"])
        presets[name] = Preset(name, "pu_mlc", dataset, cfg, base.source, notes, base.targets)
    # LAC's two stages as its code trains them (docs/methods.md, "plc" and "lac")
    for method, hparams in _LAC_STAGES.items():
        for dataset in _D4:
            cfg = {**DATASET_DEFAULTS[dataset], **_LAC_RECIPE, "dataset": dataset, "method": method,
                   "hparams": dict(hparams)}
            name = f"{method}/{dataset}"
            presets[name] = Preset(name, method, dataset, cfg, "CRISP Table 1", _LAC_NOTES[method],
                                   _targets(method, dataset, cfg, "CRISP Table 1"))
    # ROLE + LinearInit: 25 linear epochs on frozen features, then 10 end-to-end (docs/methods.md, "role")
    for dataset, (bs, lr) in zip(_D4, ((16, 1e-3), (16, 1e-3), (16, 1e-3), (8, 1e-3))):
        base = presets[f"role/{dataset}"]
        cfg = {**base.config, "linear_init_epochs": 25, "linear_init_lr": lr, "batch_size": bs}
        presets[f"role_li/{dataset}"] = Preset(f"role_li/{dataset}", "role", dataset, cfg, "EM Table 1",
                                               "ROLE + LinearInit", _targets("role_li", dataset, cfg, "EM Table 1"))
    return presets


def _targets(method: str, dataset: str, cfg: dict[str, Any], source: str) -> tuple:
    try:
        from .published import published
    except ImportError:  # pragma: no cover - published numbers are optional metadata
        return ()
    rows = published(method, dataset)
    preferred = [r for r in rows if str(getattr(r, "source", "")).startswith(source)]
    return tuple(preferred or rows)


PRESETS: dict[str, Preset] = _build()


def list_presets() -> list[Preset]:
    return [PRESETS[k] for k in sorted(PRESETS)]


def get_preset(name: str) -> Preset:
    if name in PRESETS:
        return PRESETS[name]
    if name in PROTOCOL_PRESETS:
        return Preset(name, "", "", dict(PROTOCOL_PRESETS[name]), "protocol",
                      'docs/protocol.md, "The tabular protocol"')
    if "/" not in name and name in DATASET_DEFAULTS:
        return Preset(name, "", name, {**DATASET_DEFAULTS[name], "dataset": name}, "dataset defaults",
                      _DATASET_NOTES.get(name, ""))
    close = [k for k in PRESETS if k.split("/")[0] == name.split("/")[0] or k.endswith("/" + name.split("/")[-1])]
    hint = f" (e.g. {', '.join(close[:6])})" if close else ""
    raise ValueError(f"unknown preset {name!r}{hint}; `spmlkit presets` lists all {len(PRESETS)} of them")


def dataset_defaults(dataset: str) -> dict[str, Any]:
    """The defaults of a dataset: its table entry, the feature defaults for any other feature
    dataset (a feature folder; one of a user's own observed labels also defaults to them,
    :data:`OWN_LABELS`), nothing for an unknown name (the run will say what is wrong)."""
    if dataset in DATASET_DEFAULTS:
        return dict(DATASET_DEFAULTS[dataset])
    from ..data import registry

    if not registry.is_feature_dataset(dataset):
        return {}
    ref = registry.resolve_dataset(dataset)
    if ref.observed:  # a paper's data file: its authors' observed positives, its own validation rows (full labels)
        return {**FEATURE_DEFAULTS, "observation": "given"}
    return {**FEATURE_DEFAULTS, **(OWN_LABELS if ref.labels == "observed" else {})}


def _defaults_of(dataset: str) -> dict[str, Any]:
    """:func:`dataset_defaults` of a dataset argument, a folder written by ``spmlkit prepare`` included."""
    name = prepared_identity(dataset)[0] if _is_prepared_folder(dataset) else dataset
    return dataset_defaults(name)


def default_val_variant(dataset: str) -> str:
    """The validation labels a dataset selects on when nobody says: ``clean`` where full labels
    exist, ``observed`` for users' own data (a name ``folder``/``csv``, a folder they prepared or
    a feature folder of their own labels), which brings only the labels it has (docs/protocol.md,
    "Your own data")."""
    return _defaults_of(dataset).get("val_variant", "clean")


def default_observation(dataset: str) -> str:
    """The observation a dataset trains under when nobody says: ``given`` (its own labels) for a
    user's data, else the dataset's own default (``single_positive``, PU-MLC's ``ratio=0.1`` for
    VOC 2007), as ``spmlkit train`` resolves it."""
    return _defaults_of(dataset).get("observation", DataConfig.observation)


#: ``hparams_from`` meaning: each method's recipe defaults, no preset's hyperparameters
RECIPE_DEFAULTS = "defaults"


def preset_sources() -> tuple[str, ...]:
    """The data sets some preset was tuned on, in ``spmlkit presets`` order: the values
    ``hparams_from`` takes besides :data:`RECIPE_DEFAULTS`."""
    return tuple(dict.fromkeys(p.dataset for p in list_presets() if p.name == f"{p.method}/{p.dataset}"))


def check_hparams_from(source: str | None) -> None:
    """Refuse an ``hparams_from`` that names neither the recipe defaults nor a data set with presets."""
    if source is not None and source != RECIPE_DEFAULTS and source not in preset_sources():
        raise ValueError(f"--hparams-from {source!r}: no preset was tuned on {source!r}; give {RECIPE_DEFAULTS} "
                         f"(each method's recipe defaults) or one of {', '.join(preset_sources())}")


def hparams_preset(method: str, dataset: str, hparams_from: str | None) -> Preset | None:
    """The preset whose hyperparameters a run of ``method`` on ``dataset`` takes: with
    ``hparams_from`` None the (method, dataset) preset when one exists (what ``train`` does);
    :data:`RECIPE_DEFAULTS` none; a data set's name that data set's preset of the method, on
    whatever data set the run trains (docs/leaderboard.md, "One source of hyperparameters")."""
    if hparams_from == RECIPE_DEFAULTS:
        return None
    return PRESETS.get(f"{method}/{dataset if hparams_from is None else hparams_from}")


def resolve_config(
    values: dict[str, Any] | None = None,
    *,
    preset: str | None = None,
    file_values: dict[str, Any] | None = None,
    file_name: str = "config file",
    resume_values: dict[str, Any] | None = None,
    hparams_from: str | None = None,
) -> RunConfig:
    """The one way every entry point builds a run's configuration. Later layers win:

    1. the :class:`~spmlkit.training.config.RunConfig` defaults;
    2. the dataset's defaults (:func:`dataset_defaults`);
    3. the preset: the one named, or else the (method, dataset) preset when one exists, so
       ``--dataset yeast --method em_apl`` trains with the same hyperparameters as the
       benchmark's row. ``hparams_from`` changes the second case (a benchmark across data
       sets, where every method's hyperparameters come from one source): ``"defaults"``
       applies no preset, a data set's name applies only the *hyperparameters* of the
       method's preset on that data set (:func:`hparams_preset`);
    4. a config file (or a sweep's ``settings``);
    5. ``values``: options given explicitly (the command line, a sweep's grid point);
    6. ``resume_values``: the saved configuration of the run being resumed (``--resume``), for
       every setting that changes a number; so ``spmlkit train --out RUN --resume`` needs no other
       option. A typed option that disagrees with it is refused by the run folder, never dropped.

    Every layer may name its settings flat or in sections (:mod:`~spmlkit.training.config`);
    ``hparams`` merge key by key across layers, and so do ``plugins``, which are loaded before
    anything is looked up (a plug-in's dataset has feature defaults, its method may have a preset;
    docs/plugins.md), whichever process builds the configuration.
    """
    from ..plugins import load_plugins

    values = flat_settings(dict(values or {}), where="options")
    file_values = flat_settings(dict(file_values or {}), where=file_name)
    resume_values = saved_settings(dict(resume_values or {}))
    plugins: list[str] = []
    for where, layer in (("options", values), (file_name, file_values), ("the run being resumed", resume_values)):
        plugins = merged_plugins(plugins, layer.get("plugins"), where=where)
    load_plugins(plugins)
    named = get_preset(preset) if preset else None
    dataset = values.get("dataset") or file_values.get("dataset") or (named.dataset if named else None)
    prepared = values.get("prepared") or file_values.get("prepared")
    if dataset is not None and not prepared and _is_prepared_folder(dataset):
        prepared = values["prepared"] = dataset  # a prepared folder named as the dataset (a sweep's `datasets`)
        dataset = None
    if dataset is None and prepared:  # a prepared folder alone says which dataset (and variant) it holds
        dataset, variant = prepared_identity(prepared)
        if variant is not None and "dataset_variant" not in values and "dataset_variant" not in file_values:
            values["dataset_variant"] = variant
    dataset = dataset or resume_values.get("dataset") or DataConfig.dataset
    method = values.get("method") or file_values.get("method") or (named.method if named and named.method else None) \
        or resume_values.get("method") or MethodConfig.name
    check_hparams_from(hparams_from)
    source = None
    if named is None and hparams_from is None:
        named = PRESETS.get(f"{method}/{dataset}")
    elif named is None:
        source = hparams_preset(method, dataset, hparams_from)
    layers = [("dataset defaults", dataset_defaults(dataset))]
    if named is not None:
        layers.append((f"preset {named.name}", named.config))
    if source is not None:
        layers.append((f"the hyperparameters of preset {source.name}", {"hparams": source.config["hparams"]}))
    if file_values:
        layers.append((file_name, file_values))
    layers.append(("options", {**values, "dataset": dataset, "method": method}))
    if resume_values:
        # the run being resumed decides what it computes; where it is written and how it is fed stay
        # the user's. What the user chose explicitly must agree with it: used or refused, never dropped
        kept = {k: v for k, v in resume_values.items() if k in RunConfig().flat() and k not in RESUME_FREE}
        if resume_values.get("plugins"):  # its plug-ins load again (the user's are added to them)
            kept["plugins"] = resume_values["plugins"]
        chosen = {**(named.config if preset else {}), **file_values, **values}
        _check_agrees_with_resumed(chosen, kept)
        layers.append(("the run being resumed", kept))
    config = None
    for where, layer in layers:
        config = config_from_dict(layer, base=config, where=where)
    check_min_lr(config)  # settings of two layers: checked on the whole
    return config


def _check_agrees_with_resumed(chosen: dict[str, Any], saved: dict[str, Any]) -> None:
    """Refuse explicitly chosen settings that differ from the run being resumed, naming each."""
    differ = []
    for key, value in chosen.items():
        if key not in saved or key == "plugins":  # plug-ins add up (resolve_config)
            continue
        if key == "hparams":
            differ += [f"hparam {k}={v!r} (the run has {saved['hparams'].get(k)!r})" for k, v in (value or {}).items()
                       if saved.get("hparams", {}).get(k) != v]
        elif value != saved[key]:
            differ.append(f"{key}={value!r} (the run has {saved[key]!r})")
    if differ:
        raise ValueError(f"--resume continues a run with its own settings, but {'; '.join(differ)}; resume without "
                         "those options, or start a new run folder (another --out, or --overwrite)")


def _is_prepared_folder(dataset: str) -> bool:
    from ..data import registry

    try:
        return registry.resolve_dataset(dataset).form == "prepared-folder"
    except ValueError:
        return False  # an unknown name: the run says what is wrong


def prepared_identity(path: str) -> tuple[str, str | None]:
    """``(dataset, variant)`` recorded in a folder written by ``spmlkit prepare``."""
    import json
    from pathlib import Path

    from ..data.formats.prepared import META, recorded_variant

    meta_path = Path(path) / META
    if not meta_path.is_file():
        raise FileNotFoundError(f"{path} is not a folder written by `spmlkit prepare` (no {META}); "
                                "run `spmlkit prepare DATASET --root DIR --out FOLDER` first")
    try:
        meta = json.loads(meta_path.read_text())
        return str(meta["dataset"]), recorded_variant(meta)
    except (ValueError, KeyError) as exc:
        raise ValueError(f"{meta_path} is damaged ({exc}); prepare the dataset again") from None
