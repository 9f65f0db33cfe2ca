"""The method catalogue: each published method as a recipe of a loss, label setting,
regularisers and a between-epoch label-state algorithm.

A *loss* (:mod:`spmlkit.losses`) is a formula; a *method* is what a paper trains: EM+APL is
the ``em_apl`` loss plus the APL algorithm, OPML-SP is soft OPML plus the high-rank
regulariser plus AP-based correction, the "full labels" reference is BCE trained on the
complete label matrix. Training loops read a :class:`Method` and never branch on method
names, so adding a method is adding a recipe here. A recipe may also change the image model's
head (``head``: BoostLU's boosted class activation maps, :data:`HEADS`); such a method needs a
backbone's spatial map and so trains on images only (:func:`feature_runs_reason`).

Hyperparameters: a method's loss hyperparameters default to the loss's own defaults (one
source of truth, :func:`spmlkit.losses.hyperparameters`); ``loss_kwargs`` only records where
a recipe deliberately differs. :func:`resolve_hparams` routes user overrides to the loss, the
label-state algorithm or the method-level knobs and rejects unknown names.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from . import losses

__all__ = ["HEADS", "Method", "METHODS", "cam_boost", "feature_runs_reason", "get_method", "methods_for",
           "resolve_hparams", "ResolvedMethod"]


@dataclass(frozen=True)
class Method:
    name: str
    loss: str
    description: str
    paper: str
    #: which label matrix trains it: "observed" (the simulated partial labels), "full" (the
    #: complete truth, oracle reference), "1p_alln" (one positive plus every true negative)
    labels: str = "observed"
    loss_kwargs: dict[str, Any] = field(default_factory=dict)
    #: between-epoch label-state algorithm: None, "apl", "opml_correction" or "class_prior"
    labeling: str | None = None
    labeling_kwargs: dict[str, Any] = field(default_factory=dict)
    #: extra regularising losses added to the main loss: (loss name, kwargs)
    regularizers: tuple[tuple[str, dict[str, Any]], ...] = ()
    #: parameter-norm penalty on all trainable parameters: ("l1" | "l2", lambda)
    weight_penalty: tuple[str, float] | None = None
    #: PU-MLC's mixup consistency term (needs an extra forward pass)
    mixup: bool = False
    #: decision threshold for thresholded metrics (EM authors advise 0.75 for EM models)
    threshold: float = 0.5
    #: loss hyperparameters whose default is a statistic of the training data rather than a
    #: constant: EPR's and ROLE's expected number of positives per example is the dataset's
    #: true mean (docs/methods.md, "epr"); a value set by the user or a preset wins
    data_defaults: tuple[str, ...] = ()
    #: under torch.distributed, whose batch the loss's statistics are computed on by default:
    #: "global" (the whole global batch, as one process) or "process" (each process's slice,
    #: what PU-MLC's two-GPU code does for its temperature, prior and mixup)
    batch_statistics: str = "global"
    #: what the method changes in the image model's head: None, or "boostlu" (BoostLU's boosted
    #: class activation maps, docs/methods.md, "boostlu_ll_r"), whose alpha is the knob
    #: ``boost_alpha``. A head that needs a spatial map has no meaning on pooled features, so
    #: such a method trains on images only (:func:`feature_runs_reason`)
    head: str | None = None

    @property
    def on_features(self) -> bool:
        """Whether the method has a meaning on a feature data set (pooled features, a linear head)."""
        return feature_runs_reason(self) is None


def _m(*args: Any, **kwargs: Any) -> Method:
    return Method(*args, **kwargs)


#: the heads a recipe may name (Method.head): what each does and needs of the backbone, in the
#: words of ``spmlkit methods`` and of every refusal; and its knob with the knob's default
HEADS: dict[str, dict[str, Any]] = {
    "boostlu": {"does": "BoostLU boosts class activation maps",
                "needs": "a convolutional backbone's spatial feature map [B, D, h, w]",
                "knob": "boost_alpha", "default": 5.0},
}


def feature_runs_reason(method: Method) -> str | None:
    """Why ``method`` has no meaning on a feature data set (None: it has one)."""
    if method.head is None:
        return None
    head = HEADS[method.head]
    return f"{head['does']}, which need {head['needs']}; pooled features have none"


def methods_for(kind: str) -> tuple[str, ...]:
    """Every method that has a meaning on data of ``kind`` (``"features"`` or ``"images"``), in
    catalogue order: what a benchmark compares when nobody names methods."""
    return tuple(name for name, m in METHODS.items() if kind != "features" or m.on_features)


def cam_boost(resolved: ResolvedMethod) -> float | None:
    """BoostLU's alpha of a resolved method (its ``boost_alpha`` knob, else the default), or None
    for a method whose head is the plain one."""
    head = resolved.method.head
    if head != "boostlu":
        return None
    value = resolved.knobs.get(HEADS[head]["knob"], HEADS[head]["default"])
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (value > 0 and value < float("inf")):
        raise ValueError(f"method {resolved.method.name!r}: boost_alpha (BoostLU's alpha) must be a positive number, "
                         f"got {value!r}")
    return float(value)


_COLE = "Cole et al., CVPR 2021"
_EM = "Zhou et al., ECCV 2022"
_BOOSTLU = "Kim et al., CVPR 2023"
METHODS: dict[str, Method] = {
    m.name: m
    for m in [
        _m("bce", "bce", "full labels (oracle reference): BCE on the complete label matrix", _COLE, labels="full"),
        _m("iun", "iun", "one positive + all negatives (1P & all N) with BCE", _COLE, labels="1p_alln"),
        _m("an", "an", "assume negative: every unobserved label is a negative", _COLE),
        _m("an_ls", "an_ls", "AN with label smoothing on all labels", _COLE),
        _m("n_ls", "n_ls", "AN with label smoothing on the assumed negatives only", _EM),
        _m("wan", "wan", "weighted AN: assumed negatives weighted 1/(C-1)", _COLE),
        _m("dw", "dw", "down-weighted AN: assumed negatives weighted by w", _EM),
        _m("l1r", "an", "AN + L1 penalty on all parameters", _EM, weight_penalty=("l1", 1e-6)),
        _m("l2r", "an", "AN + L2 penalty on all parameters", _EM, weight_penalty=("l2", 1e-6)),
        _m("epr", "epr", "expected positive regulariser", _COLE, data_defaults=("expected_num_pos",)),
        _m("role", "role", "regularised online label estimation", _COLE,
           data_defaults=("expected_num_pos",)),
        _m("entmin", "entmin", "entropy minimisation on unobserved labels", _EM),
        _m("focal", "focal", "focal loss under the AN assumption", "Lin et al., ICCV 2017"),
        _m("asl", "asl", "asymmetric loss under the AN assumption", "Ridnik et al., ICCV 2021"),
        _m("hill", "hill", "Hill loss for missing labels", "Zhang et al., 2021"),
        _m("splc", "splc", "self-paced loss correction with focal margin", "Zhang et al., 2021"),
        _m("ll_r", "ll_r", "large-loss rejection", "Kim et al., CVPR 2022"),
        _m("ll_ct", "ll_ct", "large-loss temporary correction", "Kim et al., CVPR 2022"),
        _m("ll_cp", "ll_cp", "large-loss permanent correction", "Kim et al., CVPR 2022"),
        _m("em", "em", "entropy maximisation on unobserved labels", _EM, threshold=0.75),
        _m("em_apl", "em_apl", "EM + asymmetric pseudo-labelling", _EM, labeling="apl", threshold=0.75),
        _m("gr", "gr", "generalised robust loss with scheduled k(p), v(p)", "Chen et al., IJCAI 2024",
           loss_kwargs={"schedule": True}),
        _m("zlpr", "zlpr", "zero-bounded log-sum-exp & pairwise rank loss", "Su et al., 2022"),
        _m("opml", "opml", "push one pair of labels apart", "Li, Wang, Chen (OPML)"),
        _m("opml_sp", "opml_soft", "OPML-SP: soft OPML + high-rank + AP-based correction",
           "Li, Wang, Chen (OPML)", labeling="opml_correction", labeling_kwargs={"rho": 0.02, "start_epoch": 5},
           regularizers=(("highrank", {}),)),
        _m("pu_mlc", "pu_mlc", "variational PU learning with re-balancing and mixup",
           "Yuan, Zhang, Huang, ICME 2024", mixup=True, batch_statistics="process"),
        _m("crisp", "crisp", "class priors estimated after every epoch + unbiased risk with those priors",
           "Liu, Xu, Wang, Geng (CRISP)", labeling="class_prior"),
        _m("boostlu_ll_r", "ll_r", "BoostLU (boosted class activation maps) + large-loss rejection", _BOOSTLU,
           head="boostlu"),
        _m("boostlu_ll_ct", "ll_ct", "BoostLU (boosted class activation maps) + large-loss temporary correction",
           _BOOSTLU, head="boostlu"),
        # the BoostLU code records every entry it corrects (loss >= lambda), the LL code those above lambda
        _m("boostlu_ll_cp", "ll_cp", "BoostLU (boosted class activation maps) + large-loss permanent correction",
           _BOOSTLU, head="boostlu", loss_kwargs={"record": "ge"}),
    ]
}

#: method-level knobs that are not loss or label-algorithm hyperparameters
_METHOD_KNOBS = {"penalty": "weight of the L1/L2 parameter penalty (l1r, l2r)",
                 "highrank_lam": "weight of the high-rank regulariser (opml_sp)",
                 "mixup_weight": "weight of PU-MLC's mixup consistency term (pu_mlc)",
                 "boost_alpha": "BoostLU's factor on the positive class activation scores (boostlu_*)"}


def get_method(name: str) -> Method:
    if name not in METHODS:
        raise ValueError(f"unknown method {name!r}; valid methods are: {', '.join(METHODS)}")
    return METHODS[name]


def labeling_hyperparameters(name: str | None) -> dict[str, Any]:
    """Hyperparameters (and defaults) of a label-state algorithm; run arguments excluded."""
    if name is None:
        return {}
    from . import labeling

    return labeling.hyperparameters(name)


@dataclass(frozen=True)
class ResolvedMethod:
    """A method with every override routed to where it belongs."""

    method: Method
    loss_kwargs: dict[str, Any]
    labeling_kwargs: dict[str, Any]
    knobs: dict[str, Any]


def resolve_hparams(method: str | Method, overrides: dict[str, Any] | None = None) -> ResolvedMethod:
    """Route ``overrides`` to the loss, the label-state algorithm or method-level knobs.

    A name is looked up in that order; an unknown name raises ``ValueError`` listing every
    valid one for this method.
    """
    m = get_method(method) if isinstance(method, str) else method
    overrides = dict(overrides or {})
    loss_valid = losses.hyperparameters(m.loss)
    lab_valid = labeling_hyperparameters(m.labeling)
    knob_valid = {
        k for k in _METHOD_KNOBS
        if (k == "penalty" and m.weight_penalty) or (k == "highrank_lam" and m.regularizers)
        or (k == "mixup_weight" and m.mixup) or (m.head is not None and k == HEADS[m.head]["knob"])
    }
    loss_kwargs, lab_kwargs, knobs = dict(m.loss_kwargs), dict(m.labeling_kwargs), {}
    for key, value in overrides.items():
        if key in loss_valid:
            loss_kwargs[key] = value
        elif key in lab_valid:
            lab_kwargs[key] = value
        elif key in knob_valid:
            knobs[key] = value
        else:
            valid = sorted(set(loss_valid) | set(lab_valid) | knob_valid)
            raise ValueError(
                f"method {m.name!r} has no hyperparameter {key!r}; valid ones are: {', '.join(valid)}"
            )
    return ResolvedMethod(m, loss_kwargs, lab_kwargs, knobs)
