"""Networks: backbones (torchvision / timm / a small CPU net), the SPML head, LgConv, and the parts
methods add. Every network returns a :class:`ModelOutput` (``.logits``, and the outputs only some
networks have) and derives from :class:`SPMLModel` (what the trainer asks of a network).

``build_model("torchvision:resnet50", num_classes, pretrained=True)`` is the model of every
SPML paper (docs/protocol.md, "Training protocols"): ImageNet-V1 ResNet-50 -> global average
pooling -> linear layer. ``lgconv=True`` adds PU-MLC's local-global convolutions
(docs/methods.md, "pu_mlc"); ``cam_boost=alpha`` BoostLU's boosted class activation maps
(docs/methods.md, "boostlu_ll_r"). :class:`LabelQueryNet` is the LAC code's label-query
transformer head (docs/methods.md, "lac"). :class:`GaussianBottleneck` and :class:`BottleneckNet` put
MIME's Gaussian bottleneck before the classifier (docs/methods.md, "mime").
"""

from .backbones import SMALL_MODELS, SmallResNet, create_backbone, torchvision_weights
from .bottleneck import BottleneckNet, GaussianBottleneck, build_bottleneck_net
from .cam import boost_lu, boosted_logits, class_activation_maps, spatial_map_reason
from .head import FeatureHead, SPMLNet, build_model, global_average_pool
from .label_query import LabelQueryHead, LabelQueryNet, sine_positions
from .lgconv import LgConv, convert_lgconv, count_lgconv, lgconv_branch_parameters, skip_reason
from .output import OUTPUTS, ModelOutput, SPMLModel

__all__ = [
    "SMALL_MODELS",
    "BottleneckNet",
    "FeatureHead",
    "GaussianBottleneck",
    "LabelQueryHead",
    "LabelQueryNet",
    "LgConv",
    "ModelOutput",
    "OUTPUTS",
    "SPMLModel",
    "SPMLNet",
    "SmallResNet",
    "boost_lu",
    "boosted_logits",
    "build_bottleneck_net",
    "build_model",
    "class_activation_maps",
    "convert_lgconv",
    "count_lgconv",
    "create_backbone",
    "global_average_pool",
    "lgconv_branch_parameters",
    "sine_positions",
    "skip_reason",
    "spatial_map_reason",
    "torchvision_weights",
]
