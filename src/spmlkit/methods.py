"""The method catalogue: each published method as a recipe of a loss, label setting,
regularisers and a between-epoch label-state algorithm.

A *loss* (:mod:`spmlkit.losses`) is a formula; a *method* is what a paper trains: EM+APL is
the ``em_apl`` loss plus the APL algorithm, OPML-SP is soft OPML plus the high-rank
regulariser plus AP-based correction, the "full labels" reference is BCE trained on the
complete label matrix. Training loops read a :class:`Method` and never branch on method
names, so adding a method is adding a recipe here. A recipe may also change the image model's
head (``head``: BoostLU's boosted class activation maps, :data:`HEADS`); such a method needs a
backbone's spatial map and so trains on images only (``images_only``).

Hyperparameters: a method's loss hyperparameters default to the loss's own defaults (one
source of truth, :func:`spmlkit.losses.hyperparameters`); ``loss_kwargs`` only records where
a recipe deliberately differs. :func:`resolve_hparams` routes user overrides to the loss, the
label-state algorithm or the method-level knobs and rejects unknown names.

A user's method joins the same catalogue (docs/plugins.md): :func:`register` takes a
:class:`Method` as it takes spmlkit's own, and a loss registered with
:func:`spmlkit.losses.register` is also a method of its name (the loss on the observed labels,
nothing around it) unless it says ``method=False``.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any

from . import losses
from .names import BUILTIN, REGISTRY, NameTaken, Registry, origin_of

__all__ = ["HEADS", "Method", "METHODS", "bottleneck_width", "cam_boost", "get_method", "register", "resolve_hparams",
           "ResolvedMethod"]


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
    #: between-epoch label-state algorithm: None, "apl", "opml_correction", "class_prior" or "confident_positives"
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
    #: why the method has no meaning on a feature dataset ("" when it has one): such runs are refused
    #: in one line, and ``spmlkit methods`` shows the reason
    images_only: str = ""
    #: what the method changes in the image model's head: None, or "boostlu" (BoostLU's boosted
    #: class activation maps, docs/methods.md, "boostlu_ll_r"), whose alpha is the knob
    #: ``boost_alpha`` (:data:`HEADS`). Such a head needs a spatial map, so the recipe also says
    #: ``images_only``
    head: str | None = None
    #: the width of the Gaussian bottleneck the method's model classifies through (MIME: 256), used
    #: unless a run sets ``bottleneck`` itself; 0: none (docs/methods.md, "mime")
    bottleneck: int = 0
    #: what of the method a feature run goes without, and why ("" when nothing): `spmlkit methods` shows it
    features_without: str = ""

    @property
    def sees_more_labels(self) -> bool:
        """Whether it trains on more labels than the observation gives the other methods (full
        labels, or one positive and every negative): a reference that bounds what the missing
        labels cost, shown beside a leaderboard's ranks rather than in them (docs/leaderboard.md,
        "References beside the ranks")."""
        return self.labels != "observed"


def _m(*args: Any, **kwargs: Any) -> Method:
    return Method(*args, **kwargs)


#: the heads a recipe may name (Method.head): what each does and needs of the backbone, in the
#: words of every refusal; and its knob with the knob's default
HEADS: dict[str, dict[str, Any]] = {
    "boostlu": {"does": "BoostLU boosts class activation maps",
                "needs": "a convolutional backbone's spatial feature map [B, D, h, w]",
                "knob": "boost_alpha", "default": 5.0},
}


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


#: every method by name: the method family of the one registry (spmlkit.names)
METHODS: Registry[Method] = REGISTRY.method
#: methods made from a loss of the same name (:func:`_method_of_loss`), which that loss's author may
#: replace with a recipe of their own
_DERIVED: set[str] = set()
#: the label settings a recipe may train on (Method.labels)
_LABELS = ("observed", "full", "1p_alln")


def register(method: Method) -> Method:
    """Add a recipe to the catalogue, spmlkit's own and a user's alike (docs/plugins.md).

    Its loss (and label algorithm, and regularisers) must be registered first, so a typo fails
    here, when the recipe is registered, not in the middle of a run. A recipe may take the
    place of the method its own loss made (a loss is a method of its name unless registered
    with ``method=False``); any other name that is taken is refused."""
    origin = origin_of(sys._getframe(1).f_globals.get("__name__", ""))
    if not isinstance(method, Method):
        raise TypeError(f"methods.register takes a spmlkit.methods.Method, got {type(method).__name__}")
    if method.labels not in _LABELS:
        raise ValueError(f"method {method.name!r}: labels must be one of {', '.join(_LABELS)}, got {method.labels!r}")
    if isinstance(method.bottleneck, bool) or not isinstance(method.bottleneck, int) or method.bottleneck < 0:
        raise ValueError(f"method {method.name!r}: bottleneck must be an integer >= 0 (0: none), got {method.bottleneck!r}")
    for loss in (method.loss, *(name for name, _ in method.regularizers)):
        losses.loss_class(loss)  # an unknown loss: one line naming the closest
    if method.labeling is not None:
        from . import labeling

        labeling.ALGORITHMS.get(method.labeling)
    if method.name in _DERIVED and METHODS.origin(method.name) == origin:
        _DERIVED.discard(method.name)
        return METHODS.replace(method.name, method)
    return METHODS.register(method.name, method, origin=origin)


_COLE = "Cole et al., CVPR 2021"
_LAC = "Xie, Xiao, Huang, NeurIPS 2022 (LAC)"
#: why LAC's two stages need images (docs/methods.md, "plc")
_TWO_VIEWS = ("it learns from a weak and a strong augmentation of each image (flip vs cutout, RandAugment, colour "
              "jitter); a row of fixed features has no augmentations to be consistent across")
_EM = "Zhou et al., ECCV 2022"
_BOOSTLU = "Kim et al., CVPR 2023"
#: why BoostLU's methods need images (docs/methods.md, "boostlu_ll_r")
_BOOSTED_CAMS = (f"{HEADS['boostlu']['does']}, which need {HEADS['boostlu']['needs']}; pooled features have "
                 "none")
for _recipe in [
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
        _m("smile", "smile", "label enhancement: soft targets from a GCN's Beta label distributions on a k-NN graph",
           "Xu et al., NeurIPS 2022"),
        _m("plc", "plc", "LAC stage 1: AN on a weak view + hard pseudo-label consistency on a strong view", _LAC,
           images_only=_TWO_VIEWS),
        _m("lac", "lac", "LAC stage 2: PLC + label-aware contrast of label-wise embeddings over a memory queue", _LAC,
           images_only=_TWO_VIEWS),
        _m("boostlu_ll_r", "ll_r", "BoostLU (boosted class activation maps) + large-loss rejection", _BOOSTLU,
           head="boostlu", images_only=_BOOSTED_CAMS),
        _m("boostlu_ll_ct", "ll_ct", "BoostLU (boosted class activation maps) + large-loss temporary correction",
           _BOOSTLU, head="boostlu", images_only=_BOOSTED_CAMS),
        # the BoostLU code records every entry it corrects (loss >= lambda), the LL code those above lambda
        _m("boostlu_ll_cp", "ll_cp", "BoostLU (boosted class activation maps) + large-loss permanent correction",
           _BOOSTLU, head="boostlu", images_only=_BOOSTED_CAMS, loss_kwargs={"record": "ge"}),
        _m("mime", "mime", "Gaussian bottleneck before the classifier (KL-regularised) + confident predictions "
           "become positive pseudo-labels", "Liu, Xu, Lv, Geng, ICML 2023 (MIME)", labeling="confident_positives",
           bottleneck=256,
           features_without="the label-query transformer (a feature row has no feature map for class queries to "
                            "read): the bottleneck reads the row, one code per row"),
    ]:
    register(_recipe)


def _method_of_loss(name: str, entry: Any, origin: str) -> None:
    """A loss registered without ``method=False`` is also a method of its name: the loss on the
    observed labels, nothing around it. A recipe of that name that trains this loss (spmlkit's
    ``an`` for the loss ``an``) already is that method; a method of that name that trains
    another loss makes the loss's name a mistake, said when the loss is registered."""
    if not entry.method:
        return
    if name in METHODS:
        if METHODS[name].loss == name:
            return
        held = METHODS.origin(name)
        who = "spmlkit's method" if held == BUILTIN else f"the method of {held}"
        raise NameTaken(f"loss {name!r} would also be the method {name!r}, but {who} of that name trains the loss "
                        f"{METHODS[name].loss!r}; give the loss another name, or register it with method=False")
    paper = "" if origin == BUILTIN else f"plug-in {origin}"
    METHODS.register(name, Method(name, name, entry.description, paper), origin=origin)
    _DERIVED.add(name)


REGISTRY.loss.subscribe(_method_of_loss)

#: method-level knobs that are not loss or label-algorithm hyperparameters
_METHOD_KNOBS = {"penalty": "weight of the L1/L2 parameter penalty (l1r, l2r)",
                 "highrank_lam": "weight of the high-rank regulariser (opml_sp)",
                 "mixup_weight": "weight of PU-MLC's mixup consistency term (pu_mlc)",
                 "boost_alpha": "BoostLU's factor on the positive class activation scores (boostlu_*)"}


def bottleneck_width(method: str | Method, value: int | None) -> int:
    """The bottleneck width a run's model has: ``value`` (the run's ``bottleneck`` setting) when set,
    else the method's own (:attr:`Method.bottleneck`; 0 means none)."""
    if value is not None:
        return int(value)
    return (get_method(method) if isinstance(method, str) else method).bottleneck


def get_method(name: str) -> Method:
    """The recipe ``name``; an unknown name is one line with the closest name and every valid one."""
    return METHODS.get(name)


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
