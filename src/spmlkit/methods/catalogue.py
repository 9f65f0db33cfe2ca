"""spmlkit's methods, registered in the order every list shows them (``spmlkit methods``, a
benchmark's table): the references, the baselines, then the state of the art.

A method that is its parts and nothing more is one line (:func:`~spmlkit.methods.loss_method`); a
method with parts of its own is a class in a module of its own, registered here by name.
"""

from __future__ import annotations

from .base import Meaning
from .boostlu import BoostLU
from .crisp import CRISP, CRISPTruePrior
from .loss_method import loss_method
from .opml_sp import OPMLSP
from .penalty import L1R, L2R
from .pu_mlc import PUMLC
from .registry import register
from .smile import SMILE

__all__: list[str] = []

_COLE = "Cole et al., CVPR 2021"
_EM = "Zhou et al., ECCV 2022"
_LAC = "Xie, Xiao, Huang, NeurIPS 2022 (LAC)"
_BOOSTLU = "Kim et al., CVPR 2023"
#: why LAC's two stages need images (docs/methods.md, "plc")
_TWO_VIEWS = Meaning(False, "it learns from a weak and a strong augmentation of each image (flip vs cutout, "
                            "RandAugment, colour jitter); a row of fixed features has no augmentations to be "
                            "consistent across")
#: the label-query head, which LAC's stages (and MIME's code) train
_LABEL_QUERIES = {"image_head": "label_query"}

register("bce", "full labels (oracle reference): BCE on the complete label matrix", paper=_COLE)(
    loss_method("bce", labels="full"))
register("iun", "one positive + all negatives (1P & all N) with BCE", paper=_COLE)(
    loss_method("iun", labels="1p_alln"))
register("an", "assume negative: every unobserved label is a negative", paper=_COLE)(loss_method("an"))
register("an_ls", "AN with label smoothing on all labels", paper=_COLE)(loss_method("an_ls"))
register("n_ls", "AN with label smoothing on the assumed negatives only", paper=_EM)(loss_method("n_ls"))
register("wan", "weighted AN: assumed negatives weighted 1/(C-1)", paper=_COLE)(loss_method("wan"))
register("dw", "down-weighted AN: assumed negatives weighted by w", paper=_EM)(loss_method("dw"))
register("l1r", "AN + L1 penalty on all parameters", paper=_EM)(L1R)
register("l2r", "AN + L2 penalty on all parameters", paper=_EM)(L2R)
register("epr", "expected positive regulariser", paper=_COLE)(
    loss_method("epr", data_defaults=("expected_num_pos",)))
register("role", "regularised online label estimation", paper=_COLE)(
    loss_method("role", data_defaults=("expected_num_pos",)))
register("entmin", "entropy minimisation on unobserved labels", paper=_EM)(loss_method("entmin"))
register("focal", "focal loss under the AN assumption", paper="Lin et al., ICCV 2017")(loss_method("focal"))
register("asl", "asymmetric loss under the AN assumption", paper="Ridnik et al., ICCV 2021")(loss_method("asl"))
register("hill", "Hill loss for missing labels", paper="Zhang et al., 2021")(loss_method("hill"))
register("splc", "self-paced loss correction with focal margin", paper="Zhang et al., 2021")(loss_method("splc"))
register("ll_r", "large-loss rejection", paper="Kim et al., CVPR 2022")(loss_method("ll_r"))
register("ll_ct", "large-loss temporary correction", paper="Kim et al., CVPR 2022")(loss_method("ll_ct"))
register("ll_cp", "large-loss permanent correction", paper="Kim et al., CVPR 2022")(loss_method("ll_cp"))
register("em", "entropy maximisation on unobserved labels", paper=_EM)(loss_method("em", threshold=0.75))
register("em_apl", "EM + asymmetric pseudo-labelling", paper=_EM)(
    loss_method("em_apl", labeling="apl", threshold=0.75))
register("gr", "generalised robust loss with scheduled k(p), v(p)", paper="Chen et al., IJCAI 2024")(
    loss_method("gr", loss_kwargs={"schedule": True}))
register("zlpr", "zero-bounded log-sum-exp & pairwise rank loss", paper="Su et al., 2022")(loss_method("zlpr"))
register("opml", "push one pair of labels apart", paper="Li, Wang, Chen (OPML)")(loss_method("opml"))
register("opml_sp", "OPML-SP: soft OPML + high-rank + AP-based correction", paper="Li, Wang, Chen (OPML)")(OPMLSP)
register("pu_mlc", "variational PU learning with re-balancing and mixup", paper="Yuan, Zhang, Huang, ICME 2024")(PUMLC)
register("crisp", "class priors estimated after every epoch + unbiased risk with those priors",
         paper="Liu, Xu, Wang, Geng (CRISP)")(CRISP)
register("crisp_true_prior", "CRISP's risk with the training rows' true class priors (reference: it sees the truth's "
         "priors)", paper="Liu, Xu, Wang, Geng (CRISP)")(CRISPTruePrior)
register("smile", "label enhancement: soft targets from a GCN's Beta label distributions on a k-NN graph",
         paper="Xu et al., NeurIPS 2022")(SMILE)
register("plc", "LAC stage 1: AN on a weak view + hard pseudo-label consistency on a strong view", paper=_LAC)(
    loss_method("plc", on_features=_TWO_VIEWS, model_settings=_LABEL_QUERIES))
register("lac", "LAC stage 2: PLC + label-aware contrast of label-wise embeddings over a memory queue", paper=_LAC)(
    loss_method("lac", on_features=_TWO_VIEWS, model_settings=_LABEL_QUERIES))
register("boostlu_ll_r", "BoostLU (boosted class activation maps) + large-loss rejection", paper=_BOOSTLU)(
    loss_method("ll_r", base=BoostLU))
register("boostlu_ll_ct", "BoostLU (boosted class activation maps) + large-loss temporary correction",
         paper=_BOOSTLU)(loss_method("ll_ct", base=BoostLU))
# the BoostLU code records every entry it corrects (loss >= lambda), the LL code those above lambda
register("boostlu_ll_cp", "BoostLU (boosted class activation maps) + large-loss permanent correction",
         paper=_BOOSTLU)(loss_method("ll_cp", base=BoostLU, loss_kwargs={"record": "ge"}))
register("mime", "Gaussian bottleneck before the classifier (KL-regularised) + confident predictions become positive "
         "pseudo-labels", paper="Liu, Xu, Lv, Geng, ICML 2023 (MIME)")(
    loss_method("mime", labeling="confident_positives", model_settings={"bottleneck": 256},
                on_features=Meaning(True, "the label-query transformer (a feature row has no feature map for class "
                                          "queries to read): the bottleneck reads the row, one code per row")))
