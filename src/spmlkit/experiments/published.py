"""Published mAP numbers of the SPML papers, as data, transcribed from the tables named below.

Sources, by short name:

- ``EM``: Zhou et al., "Acknowledging the Unknown for Multi-label Learning with Single
  Positive Labels", ECCV 2022, Table 1 (SPML, ResNet-50).
- ``OPML``: Li, Wang, Chen, "Pushing One Pair of Labels Apart Each Time in Multi-Label
  Learning", Table II (SPML; the rows it copies from EM Table 1 are included and noted),
  Table III (losses under SPML) and Table V (full labels).
- ``GR``: Chen et al., "Boosting Single Positive Multi-label Classification with Generalized
  Robust Loss", IJCAI 2024, Table 2.
- ``PU-MLC``: Yuan, Zhang, Huang, "Positive Label Is All You Need for Multi-Label
  Classification", ICME 2024, Table I (mAP by known-label ratio; no stds published).
- ``CRISP``: Liu, Xu, Wang, Geng, "Can Class-Priors Help Single-Positive Multi-Label Learning?"
  (arXiv 2309.13886, the version with Tables 1-13), Table 1 (mAP on the four image sets under the
  reference protocol, 5 trials) and Tables 2, 8, 9, 10 and 11 (ranking loss, average precision,
  coverage, Hamming loss and one-error on six MULAN-style sets under the tabular protocol:
  random 80/10/10 partitions, 5 trials, SMILE's metric code; docs/protocol.md, "The tabular
  protocol" and "Metric conventions"). Its Table 1 rows are the targets of the image presets of the
  methods spmlkit has (``crisp``, ``plc``, ``boostlu_*``, ``wan``, ``epr``, and the others beside
  their own papers'). Its numbers have three decimals.
- ``BoostLU``: Kim et al., "Bridging the Gap between Model Explanations in Partially Annotated
  Multi-label Classification", CVPR 2023, Table 1 (single positive label, ResNet-50): its own
  LL-R / LL-Ct / LL-Cp runs and each with BoostLU (means only; the rows it copies from EM
  Table 1 are left out).

Each row names its ``metric``: ``map`` rows are mAP in percent, as printed (mean over runs,
and the std where printed); the tabular rows of CRISP (``ranking_loss``, ``example_ap``,
``coverage``, ``hamming_loss``, ``one_error``) are fractions as printed, in SMILE's convention
(coverage divided by the number of labels). Method
and dataset names are spmlkit's (:data:`METHOD_LABELS` maps them back to the papers'
labels); methods that spmlkit does not implement keep a lower-case form of the paper's name
(``sarb``, ``mle``, ...), and so do data sets spmlkit cannot read (CRISP's
``image`` and ``mirflickr``). Observations use spmlkit's text form
(:class:`spmlkit.protocol.Observation`): ``single_positive``, ``full``, ``ratio=0.1``.
Note that ``bce`` and ``iun`` rows of the SPML tables are the references "All P. & All N."
and "1 P. & All N.", i.e. methods that see more labels, listed under the SPML setting.

When the same method has several published numbers (EM on VOC: 89.09 in EM, 88.67 in GR),
compare with the paper whose protocol is reproduced (EM paper, Table 1 for a run of EM's
protocol; GR paper, Table 2 for a run of GR's).
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = [
    "CRISP_METHODS",
    "CRISP_TABULAR_DATASETS",
    "CRISP_TABULAR_METRICS",
    "DATASET_LABELS",
    "METHOD_LABELS",
    "PUBLISHED_ROWS",
    "SOURCES",
    "Published",
    "PublishedRow",
    "display_name",
    "published",
    "published_rows",
]


class Published(NamedTuple):
    """One published number: paper short name, mean and std (None if not printed) in
    percent, the table it comes from and the observation setting."""

    source: str
    mean: float
    std: float | None
    table: str
    observation: str


class PublishedRow(NamedTuple):
    table: str  # e.g. "EM Table 1"
    method: str  # spmlkit name
    dataset: str  # spmlkit name
    observation: str  # spmlkit observation text
    mean: float  # as printed: mAP in %, the tabular metrics as fractions
    std: float | None
    note: str = ""
    metric: str = "map"  # map | ranking_loss | example_ap | coverage | hamming_loss | one_error

    @property
    def source(self) -> str:
        """The paper's short name: the table name up to " Table"."""
        return self.table.split(" Table")[0]


#: spmlkit method name -> label used in the papers; the order is the canonical row order
#: of tables and of the colour palette
METHOD_LABELS: dict[str, str] = {
    "bce": "All P. & All N. (BCE)",
    "iun": "1 P. & All N. (BCE)",
    "an": "AN",
    "wan": "WAN",
    "dw": "DW",
    "l1r": "L1R",
    "l2r": "L2R",
    "an_ls": "LS",
    "n_ls": "N-LS",
    "epr": "EPR",
    "entmin": "EntMin",
    "focal": "Focal",
    "asl": "ASL",
    "hill": "Hill",
    "splc": "SPLC",
    "role": "ROLE",
    "role_li": "ROLE+LI",
    "ll_r": "LL-R",
    "ll_ct": "LL-Ct",
    "ll_cp": "LL-Cp",
    "em": "EM",
    "em_apl": "EM+APL",
    "zlpr": "ZLPR",
    "opml": "OPML",
    "opml_sp": "OPML-SP",
    "gr": "GR",
    "pu_mlc": "PU-MLC",
    "crisp": "CRISP",
    "crisp_true_prior": "CRISP (true priors)",
    "smile": "SMILE",
    "plc": "PLC",
    "lac": "LAC",
    "boostlu_ll_r": "BoostLU+LL-R",
    "boostlu_ll_ct": "BoostLU+LL-Ct",
    "boostlu_ll_cp": "BoostLU+LL-Cp",
    "mime": "MIME",
}

#: spmlkit dataset name -> label used in the papers; the order is the canonical column order
DATASET_LABELS: dict[str, str] = {
    "voc2012": "VOC",
    "coco2014": "COCO",
    "nuswide": "NUS",
    "cub": "CUB",
    "voc2007": "VOC07",
}


def display_name(method: str) -> str:
    """The papers' label of an spmlkit method name (the name itself if unknown)."""
    return METHOD_LABELS.get(method, method)


_DS4 = ("voc2012", "coco2014", "nuswide", "cub")
_SP = "single_positive"


def _rows4(table: str, observation: str, body: dict[str, tuple], note: str = "") -> list[PublishedRow]:
    """Rows of a 4-dataset table; ``body`` maps a method to 4 ``(mean, std)`` pairs or None."""
    out = []
    for method, cells in body.items():
        for ds, cell in zip(_DS4, cells, strict=True):
            if cell is not None:
                out.append(PublishedRow(table, method, ds, observation, cell[0], cell[1], note))
    return out


_EM_T1 = {
    "bce": ((89.42, 0.27), (76.78, 0.13), (52.08, 0.20), (30.90, 0.64)),
    "iun": ((87.60, 0.31), (71.39, 0.19), (46.45, 0.27), (20.65, 1.11)),
    "an": ((85.89, 0.38), (64.92, 0.19), (42.27, 0.56), (18.31, 0.47)),
    "dw": ((86.98, 0.36), (67.59, 0.11), (45.71, 0.23), (19.15, 0.56)),
    "l1r": ((85.97, 0.31), (64.44, 0.20), (42.15, 0.46), (17.59, 1.82)),
    "l2r": ((85.96, 0.36), (64.41, 0.24), (42.72, 0.12), (17.71, 1.79)),
    "an_ls": ((87.90, 0.21), (67.15, 0.13), (43.77, 0.29), (16.26, 0.45)),
    "n_ls": ((88.12, 0.32), (67.15, 0.10), (43.86, 0.54), (16.82, 0.42)),
    "entmin": ((53.16, 2.81), (32.52, 5.55), (19.38, 3.64), (13.08, 0.15)),
    "focal": ((87.59, 0.58), (68.79, 0.14), (47.00, 0.14), (19.80, 0.30)),
    "asl": ((87.76, 0.51), (68.78, 0.32), (46.93, 0.30), (18.81, 0.48)),
    "role": ((87.77, 0.22), (67.04, 0.19), (41.63, 0.35), (13.66, 0.24)),
    "role_li": ((88.26, 0.21), (69.12, 0.13), (45.98, 0.26), (14.86, 0.72)),
    "em": ((89.09, 0.17), (70.70, 0.31), (47.15, 0.11), (20.85, 0.42)),
    "em_apl": ((89.19, 0.31), (70.87, 0.23), (47.59, 0.22), (21.84, 0.34)),
}
#: rows of EM Table 1 marked with a dagger, copied into OPML Table II
_EM_DAGGER = ("bce", "iun", "an", "dw", "l1r", "l2r", "an_ls", "n_ls", "role", "role_li", "em", "em_apl")

_OPML_T2_OWN = {
    "ll_r": ((88.79, 0.03), (70.36, 0.21), (48.10, 0.12), (20.55, 0.18)),
    "ll_ct": ((88.80, 0.11), (70.27, 0.08), (48.18, 0.17), (20.53, 0.18)),
    "ll_cp": ((88.37, 0.23), (70.37, 0.13), (47.92, 0.02), (20.55, 0.22)),
    "opml": ((87.77, 0.04), (68.93, 0.06), (47.93, 0.05), (22.30, 0.08)),
    "opml_sp": ((89.20, 0.03), (71.75, 0.07), (50.14, 0.09), (24.11, 0.22)),
}
_OPML_T3 = {
    "zlpr": ((87.63, 0.03), (68.41, 0.24), (47.72, 0.14), (21.02, 0.12)),
    "opml": ((87.77, 0.04), (68.93, 0.06), (47.93, 0.05), (22.30, 0.08)),
}
_OPML_T5 = {
    "bce": ((89.42, 0.27), (76.78, 0.13), (52.08, 0.20), (30.90, 0.64)),
    "focal": ((90.74, 0.07), (77.35, 0.13), (53.20, 0.08), (33.36, 0.05)),
    "asl": ((90.60, 0.36), (77.61, 0.32), (52.84, 0.17), (33.37, 0.19)),
    "zlpr": ((90.96, 0.05), (76.35, 0.10), (53.40, 0.15), (33.27, 0.12)),
    "opml": ((91.36, 0.06), (76.71, 0.16), (53.98, 0.20), (33.72, 0.08)),
}
_GR_T2 = {
    "an": ((85.89, 0.38), (64.92, 0.19), (42.49, 0.34), (18.66, 0.09)),
    "an_ls": ((87.55, 0.14), (67.07, 0.20), (43.62, 0.34), (16.45, 0.27)),
    "focal": ((87.59, 0.58), (68.79, 0.14), (47.00, 0.14), (19.80, 0.30)),
    "hill": ((87.71, 0.26), (71.43, 0.18), None, None),
    "splc": ((88.43, 0.34), (71.56, 0.12), (47.24, 0.17), (18.61, 0.14)),
    "ll_r": ((89.15, 0.16), (71.77, 0.15), (48.05, 0.07), (19.00, 0.02)),
    "ll_ct": ((88.97, 0.15), (71.20, 0.29), (48.00, 0.08), (19.31, 0.16)),
    "ll_cp": ((88.62, 0.23), (70.84, 0.33), (47.93, 0.01), (19.01, 0.10)),
    "role": ((88.26, 0.21), (69.12, 0.13), (41.95, 0.21), (14.80, 0.61)),
    "em": ((88.67, 0.08), (70.64, 0.09), (47.25, 0.30), (20.69, 0.53)),
    "em_apl": ((89.19, 0.31), (70.87, 0.23), (47.78, 0.18), (21.20, 0.79)),
    "smile": ((87.31, 0.15), (70.43, 0.21), (47.24, 0.17), (18.61, 0.14)),
    "mime": ((89.20, 0.16), (72.92, 0.26), (48.74, 0.43), (21.89, 0.35)),
    "gr": ((89.83, 0.12), (73.17, 0.36), (49.08, 0.04), (21.64, 0.32)),
}
#: BoostLU Table 1 (single positive label): the paper's own large-loss runs, each without and with
#: BoostLU; means only (no stds printed)
_BOOSTLU_T1 = {
    "ll_r": ((88.27, None), (70.70, None), (48.76, None), (19.56, None)),
    "boostlu_ll_r": ((89.29, None), (72.89, None), (49.59, None), (19.80, None)),
    "ll_ct": ((87.79, None), (70.29, None), (48.08, None), (19.06, None)),
    "boostlu_ll_ct": ((88.61, None), (71.78, None), (48.37, None), (19.25, None)),
    "ll_cp": ((87.44, None), (70.27, None), (47.92, None), (19.21, None)),
    "boostlu_ll_cp": ((87.81, None), (71.41, None), (48.61, None), (19.34, None)),
}
#: PU-MLC Table I: mAP at known-label ratios 10%..90% (ratio=0.1 .. ratio=0.9)
_PU_T1 = {
    "coco2014": {
        "asl": (69.7, 74.0, 75.1, 76.8, 77.5, 78.1, 78.7, 79.1, 79.7),
        "cl": (26.7, 31.8, 51.5, 65.4, 70.0, 71.9, 74.0, 77.4, 78.0),
        "partial_bce": (61.6, 70.5, 74.1, 76.3, 77.2, 77.7, 78.2, 78.4, 78.5),
        "sst": (68.1, 73.5, 75.9, 77.3, 78.1, 78.9, 79.2, 79.6, 79.9),
        "sarb": (72.5, 76.0, 77.6, 78.7, 79.6, 79.8, 80.0, 80.5, 80.8),
        "pu_mlc": (75.7, 78.6, 80.2, 81.3, 82.0, 82.6, 83.0, 83.5, 83.8),
        "dualcoop_clip": (78.7, 80.9, 81.7, 82.0, 82.5, 82.7, 82.8, 83.0, 83.1),
        "pu_mlc_clip": (80.2, 83.2, 84.4, 85.6, 85.9, 86.6, 87.0, 87.1, 87.5),
    },
    "voc2007": {
        "asl": (82.9, 88.6, 90.0, 91.2, 91.7, 92.2, 92.4, 92.5, 92.6),
        "cl": (44.7, 76.8, 88.6, 90.2, 90.7, 91.1, 91.6, 91.7, 91.9),
        "partial_bce": (80.7, 88.4, 89.9, 90.7, 91.2, 91.8, 92.3, 92.4, 92.5),
        "sst": (81.5, 89.0, 90.3, 91.0, 91.6, 92.0, 92.5, 92.6, 92.7),
        "sarb": (85.7, 89.8, 91.8, 92.0, 92.3, 92.7, 92.9, 93.1, 93.2),
        "pu_mlc": (88.0, 90.7, 91.9, 92.0, 92.4, 92.7, 93.0, 93.4, 93.5),
        "dualcoop_clip": (90.3, 92.2, 92.8, 93.3, 93.6, 93.9, 94.0, 94.1, 94.2),
        "pu_mlc_clip": (91.3, 92.9, 93.3, 93.7, 93.8, 94.3, 94.5, 94.6, 94.8),
    },
}
_PU_NOTES = {
    "pu_mlc": "",
    "dualcoop_clip": "CLIP-pretrained backbone",
    "pu_mlc_clip": "CLIP-pretrained backbone",
}


#: CRISP's row labels -> spmlkit method names (lower-case paper names where spmlkit has no such method);
#: CRISP describes its ROLE as trained with LinearInit on the image sets (its Section 5.1)
CRISP_METHODS: dict[str, str] = {
    "AN": "an", "AN-LS": "an_ls", "WAN": "wan", "EPR": "epr", "ROLE": "role", "EM": "em", "EM-APL": "em_apl",
    "SMILE": "smile", "PLC": "plc", "LL-R": "ll_r", "LL-CP": "ll_cp", "LL-CT": "ll_ct", "BOOSTLU+LL-R": "boostlu_ll_r",
    "BOOSTLU+LL-CP": "boostlu_ll_cp", "BOOSTLU+LL-CT": "boostlu_ll_ct", "CRISP": "crisp",
}
_CRISP_T1 = {  # mAP (%), VOC / COCO / NUS / CUB
    "AN": ((85.546, 0.294), (64.326, 0.204), (42.494, 0.338), (18.656, 0.090)),
    "AN-LS": ((87.548, 0.137), (67.074, 0.196), (43.616, 0.342), (16.446, 0.269)),
    "WAN": ((87.138, 0.240), (65.552, 0.171), (45.785, 0.192), (14.622, 1.300)),
    "EPR": ((85.228, 0.444), (63.604, 0.249), (45.240, 0.338), (19.842, 0.423)),
    "ROLE": ((88.088, 0.167), (67.022, 0.141), (41.949, 0.205), (14.798, 0.613)),
    "EM": ((88.674, 0.077), (70.636, 0.094), (47.254, 0.297), (20.692, 0.527)),
    "EM-APL": ((88.860, 0.080), (70.758, 0.215), (47.778, 0.181), (21.202, 0.792)),
    "SMILE": ((87.314, 0.150), (70.431, 0.213), (47.241, 0.172), (18.611, 0.144)),
    "PLC": ((88.021, 0.121), (70.422, 0.062), (46.211, 0.155), (21.840, 0.237)),
    "LL-R": ((87.784, 0.063), (70.078, 0.008), (48.048, 0.074), (18.966, 0.022)),
    "LL-CP": ((87.466, 0.031), (70.460, 0.032), (48.000, 0.077), (19.310, 0.164)),
    "LL-CT": ((87.054, 0.214), (70.384, 0.058), (47.930, 0.010), (19.012, 0.097)),
    "BOOSTLU+LL-R": ((89.224, 0.017), (73.272, 0.006), (49.590, 0.021), (19.136, 0.009)),
    "BOOSTLU+LL-CP": ((88.358, 0.212), (70.820, 0.030), (47.810, 0.166), (18.166, 0.063)),
    "BOOSTLU+LL-CT": ((88.528, 0.053), (71.742, 0.006), (48.216, 0.021), (17.952, 0.007)),
    "CRISP": ((89.820, 0.191), (74.640, 0.219), (49.996, 0.316), (21.650, 0.178)),
}
#: CRISP's tabular tables: name -> (metric, rows); columns in the order of :data:`CRISP_TABULAR_DATASETS`
CRISP_TABULAR_DATASETS = ("image", "scene", "yeast", "corel5k", "mirflickr", "delicious")
_CRISP_TABULAR: dict[str, tuple[str, dict[str, str]]] = {
    "CRISP Table 2": ("ranking_loss", {
        "AN": "0.432 0.067 0.321 0.113 0.383 0.066 0.140 0.000 0.125 0.002 0.131 0.000",
        "AN-LS": "0.378 0.041 0.246 0.064 0.365 0.031 0.186 0.003 0.163 0.006 0.213 0.007",
        "WAN": "0.354 0.051 0.216 0.023 0.212 0.021 0.129 0.000 0.121 0.002 0.126 0.000",
        "EPR": "0.401 0.053 0.291 0.056 0.208 0.010 0.139 0.000 0.119 0.001 0.126 0.000",
        "ROLE": "0.340 0.059 0.174 0.028 0.213 0.017 0.259 0.004 0.182 0.014 0.336 0.007",
        "EM": "0.471 0.044 0.322 0.115 0.261 0.030 0.155 0.002 0.134 0.004 0.164 0.001",
        "EM-APL": "0.508 0.028 0.420 0.069 0.245 0.026 0.135 0.001 0.138 0.003 0.163 0.003",
        "SMILE": "0.260 0.020 0.161 0.045 0.167 0.002 0.125 0.003 0.120 0.002 0.126 0.000",
        "LL-R": "0.346 0.072 0.155 0.021 0.227 0.001 0.114 0.001 0.123 0.003 0.129 0.002",
        "LL-CP": "0.329 0.041 0.148 0.017 0.215 0.000 0.114 0.003 0.124 0.003 0.160 0.001",
        "LL-CT": "0.327 0.019 0.180 0.038 0.238 0.001 0.115 0.001 0.124 0.002 0.160 0.000",
        "CRISP": "0.164 0.027 0.112 0.021 0.164 0.001 0.113 0.001 0.118 0.001 0.122 0.000"}),
    "CRISP Table 8": ("example_ap", {
        "AN": "0.534 0.061 0.580 0.104 0.531 0.079 0.217 0.003 0.615 0.004 0.317 0.002",
        "AN-LS": "0.574 0.037 0.631 0.072 0.538 0.044 0.230 0.002 0.587 0.006 0.261 0.006",
        "WAN": "0.576 0.041 0.661 0.033 0.698 0.017 0.241 0.002 0.621 0.004 0.315 0.000",
        "EPR": "0.539 0.028 0.597 0.062 0.710 0.008 0.214 0.001 0.628 0.003 0.314 0.000",
        "ROLE": "0.606 0.041 0.700 0.040 0.711 0.013 0.203 0.003 0.516 0.027 0.130 0.003",
        "EM": "0.486 0.031 0.549 0.103 0.642 0.029 0.294 0.002 0.614 0.003 0.293 0.001",
        "EM-APL": "0.467 0.026 0.448 0.049 0.654 0.040 0.275 0.003 0.589 0.007 0.311 0.001",
        "SMILE": "0.670 0.021 0.722 0.071 0.751 0.004 0.295 0.004 0.629 0.003 0.318 0.001",
        "LL-R": "0.605 0.058 0.714 0.035 0.658 0.006 0.268 0.002 0.625 0.001 0.296 0.004",
        "LL-CP": "0.595 0.031 0.735 0.028 0.700 0.000 0.259 0.004 0.621 0.007 0.251 0.007",
        "LL-CT": "0.600 0.012 0.669 0.052 0.629 0.007 0.258 0.004 0.619 0.004 0.253 0.004",
        "CRISP": "0.749 0.037 0.795 0.031 0.758 0.002 0.304 0.003 0.628 0.003 0.319 0.001"}),
    "CRISP Table 9": ("coverage", {
        "AN": "0.374 0.050 0.279 0.094 0.707 0.045 0.330 0.001 0.342 0.003 0.653 0.001",
        "AN-LS": "0.334 0.033 0.217 0.052 0.703 0.012 0.441 0.009 0.433 0.015 0.830 0.016",
        "WAN": "0.313 0.040 0.192 0.019 0.512 0.045 0.309 0.001 0.334 0.002 0.632 0.001",
        "EPR": "0.352 0.043 0.254 0.046 0.506 0.011 0.328 0.001 0.332 0.002 0.637 0.001",
        "ROLE": "0.306 0.049 0.157 0.023 0.519 0.026 0.551 0.007 0.448 0.028 0.887 0.004",
        "EM": "0.407 0.036 0.281 0.096 0.575 0.042 0.382 0.005 0.359 0.010 0.753 0.004",
        "EM-APL": "0.438 0.022 0.360 0.057 0.556 0.045 0.335 0.005 0.369 0.005 0.765 0.006",
        "SMILE": "0.242 0.014 0.146 0.037 0.462 0.003 0.308 0.007 0.328 0.004 0.628 0.003",
        "LL-R": "0.311 0.059 0.141 0.017 0.512 0.002 0.274 0.002 0.335 0.006 0.622 0.001",
        "LL-CP": "0.296 0.031 0.136 0.016 0.518 0.001 0.272 0.008 0.337 0.005 0.708 0.004",
        "LL-CT": "0.297 0.017 0.161 0.031 0.509 0.001 0.277 0.005 0.335 0.003 0.708 0.002",
        "CRISP": "0.164 0.012 0.082 0.018 0.455 0.002 0.276 0.002 0.324 0.001 0.620 0.001"}),
    "CRISP Table 10": ("hamming_loss", {
        "AN": "0.229 0.000 0.176 0.001 0.306 0.000 0.010 0.000 0.127 0.000 0.019 0.000",
        "AN-LS": "0.229 0.000 0.168 0.004 0.306 0.000 0.010 0.000 0.127 0.000 0.019 0.000",
        "WAN": "0.411 0.060 0.299 0.035 0.285 0.016 0.156 0.001 0.191 0.006 0.102 0.000",
        "EPR": "0.370 0.043 0.220 0.026 0.234 0.007 0.016 0.000 0.136 0.002 0.020 0.000",
        "ROLE": "0.256 0.018 0.176 0.017 0.279 0.010 0.010 0.000 0.128 0.000 0.019 0.000",
        "EM": "0.770 0.001 0.820 0.003 0.669 0.025 0.589 0.003 0.718 0.010 0.630 0.005",
        "EM-APL": "0.707 0.088 0.780 0.082 0.641 0.032 0.648 0.006 0.754 0.017 0.622 0.006",
        "SMILE": "0.219 0.009 0.182 0.021 0.208 0.002 0.010 0.000 0.127 0.001 0.081 0.008",
        "LL-R": "0.220 0.013 0.162 0.005 0.312 0.001 0.015 0.001 0.124 0.002 0.019 0.000",
        "LL-CP": "0.218 0.016 0.164 0.002 0.306 0.000 0.016 0.001 0.126 0.001 0.019 0.000",
        "LL-CT": "0.246 0.031 0.176 0.019 0.321 0.001 0.018 0.001 0.124 0.001 0.019 0.000",
        "CRISP": "0.165 0.023 0.140 0.013 0.211 0.001 0.010 0.000 0.121 0.002 0.019 0.000"}),
    "CRISP Table 11": ("one_error", {
        "AN": "0.708 0.096 0.626 0.123 0.489 0.194 0.758 0.002 0.358 0.005 0.410 0.012",
        "AN-LS": "0.643 0.052 0.578 0.111 0.495 0.130 0.736 0.009 0.360 0.015 0.454 0.013",
        "WAN": "0.670 0.060 0.543 0.060 0.239 0.002 0.727 0.012 0.352 0.010 0.404 0.002",
        "EPR": "0.703 0.046 0.615 0.090 0.240 0.003 0.764 0.000 0.362 0.015 0.441 0.008",
        "ROLE": "0.605 0.041 0.507 0.066 0.244 0.005 0.705 0.016 0.525 0.072 0.594 0.006",
        "EM": "0.769 0.036 0.681 0.119 0.326 0.079 0.656 0.009 0.365 0.008 0.446 0.009",
        "EM-APL": "0.773 0.045 0.812 0.059 0.341 0.109 0.690 0.007 0.434 0.023 0.405 0.006",
        "SMILE": "0.533 0.036 0.466 0.117 0.250 0.012 0.650 0.008 0.340 0.010 0.402 0.005",
        "LL-R": "0.597 0.084 0.490 0.054 0.436 0.087 0.715 0.006 0.342 0.016 0.543 0.041",
        "LL-CP": "0.629 0.043 0.450 0.051 0.240 0.000 0.731 0.016 0.357 0.016 0.490 0.028",
        "LL-CT": "0.616 0.019 0.574 0.074 0.552 0.097 0.726 0.022 0.375 0.012 0.475 0.019",
        "CRISP": "0.325 0.026 0.311 0.047 0.227 0.004 0.646 0.006 0.295 0.009 0.402 0.003"}),
}
#: the tabular metrics of CRISP's tables, in the order of its tables (2, 8, 9, 10, 11)
CRISP_TABULAR_METRICS = tuple(metric for metric, _ in _CRISP_TABULAR.values())
_CRISP_NOTE = "tabular protocol: random 80/10/10 partitions of the whole set, 5 trials; SMILE's metric code"


def _crisp_rows() -> list[PublishedRow]:
    """CRISP Table 1 (mAP %, reference protocol on the image sets) and its tabular Tables 2, 8-11."""
    out = []
    for label, cells in _CRISP_T1.items():
        note = "trained with LinearInit (CRISP Section 5.1)" if label == "ROLE" else ""
        for ds, (mean, std) in zip(_DS4, cells, strict=True):
            out.append(PublishedRow("CRISP Table 1", CRISP_METHODS[label], ds, _SP, mean, std, note))
    for table, (metric, body) in _CRISP_TABULAR.items():
        for label, text in body.items():
            values = [float(v) for v in text.split()]
            for k, ds in enumerate(CRISP_TABULAR_DATASETS):
                out.append(PublishedRow(table, CRISP_METHODS[label], ds, _SP, values[2 * k], values[2 * k + 1],
                                        _CRISP_NOTE, metric))
    return out


def _pu_mlc_rows() -> list[PublishedRow]:
    """Rows of PU-MLC Table I: one per (dataset, method, known-label ratio), no stds; rows the
    paper quotes from SARB's paper say so in their note."""
    out = []
    for ds, body in _PU_T1.items():
        for method, values in body.items():
            note = _PU_NOTES.get(method, "quoted from SARB")
            for k, v in enumerate(values, start=1):
                out.append(PublishedRow("PU-MLC Table I", method, ds, f"ratio={k / 10:g}", v, None, note))
    return out


def _build() -> tuple[PublishedRow, ...]:
    """Every row, papers in the order of :data:`SOURCES` and tables in each paper's order.

    The order is part of the behaviour: :func:`published_rows` returns rows in it, and a
    report's reference column takes the first match when a paper prints a method twice
    (``opml`` with source "OPML": Table II, not Table III).
    """
    rows: list[PublishedRow] = []
    rows += _rows4("EM Table 1", _SP, _EM_T1)
    rows += _rows4("OPML Table II", _SP, {m: _EM_T1[m] for m in _EM_DAGGER}, note="copied from EM Table 1")
    rows += _rows4("OPML Table II", _SP, _OPML_T2_OWN)
    rows += _rows4("OPML Table III", _SP, _OPML_T3)
    rows += _rows4("OPML Table V", "full", _OPML_T5)
    rows += _rows4("GR Table 2", _SP, _GR_T2)
    rows += _pu_mlc_rows()
    rows += _crisp_rows()
    rows += _rows4("BoostLU Table 1", _SP, _BOOSTLU_T1)
    return tuple(rows)


#: every published row (immutable)
PUBLISHED_ROWS: tuple[PublishedRow, ...] = _build()

#: paper short names, in the order of this module's docstring
SOURCES: tuple[str, ...] = ("EM", "OPML", "GR", "PU-MLC", "CRISP", "BoostLU")


def _matches_source(row: PublishedRow, source: str) -> bool:
    """A source filter is a paper short name ("EM") or a full table name ("OPML Table V")."""
    s = source.strip().lower()
    return row.source.lower() == s or row.table.lower() == s


def published_rows(
    method: str | None = None,
    dataset: str | None = None,
    *,
    source: str | None = None,
    observation: str | None = None,
    metric: str | None = None,
) -> list[PublishedRow]:
    """Every published row matching the given (non-None) filters, in table order (``metric``:
    ``map``, or one of CRISP's tabular metrics; None: every metric)."""
    if source is not None and not any(_matches_source(r, source) for r in PUBLISHED_ROWS):
        tables = sorted({r.table for r in PUBLISHED_ROWS})
        raise ValueError(
            f"unknown source {source!r}; use a paper ({', '.join(SOURCES)}) or a table ({', '.join(tables)})"
        )
    return [
        r
        for r in PUBLISHED_ROWS
        if (method is None or r.method == method)
        and (dataset is None or r.dataset == dataset)
        and (observation is None or r.observation == observation)
        and (source is None or _matches_source(r, source))
        and (metric is None or r.metric == metric)
    ]


def published(
    method: str, dataset: str, *, source: str | None = None, observation: str | None = None, metric: str = "map"
) -> list[Published]:
    """The published mAP (%) of ``method`` on ``dataset`` (or another ``metric`` of CRISP's
    tabular tables, as a fraction), one entry per table that lists it.

    Args:
        method: spmlkit method name (``em_apl``, ``an_ls``, ...).
        dataset: spmlkit dataset name (``voc2012``, ``coco2014``, ``nuswide``, ``cub``, ``voc2007``).
        source: keep one paper (``"EM"``, ``"OPML"``, ``"GR"``, ``"PU-MLC"``, ``"CRISP"``, ``"BoostLU"``) or one table
            (``"OPML Table V"``).
        observation: keep one setting (``"single_positive"``, ``"full"``, ``"ratio=0.3"``).

    Returns:
        ``[Published(source, mean, std, table, observation), ...]``; empty if unpublished.

    Example: ``published("em_apl", "voc2012", source="EM")`` ->
    ``[Published(source='EM', mean=89.19, std=0.31, table='EM Table 1', observation='single_positive')]``.
    """
    return [
        Published(r.source, r.mean, r.std, r.table, r.observation)
        for r in published_rows(method, dataset, source=source, observation=observation, metric=metric)
    ]
