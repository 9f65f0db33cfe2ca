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
- ``CRISP``: Liu, Xu, Wang, Geng, "Can Class-Priors Help Single-Positive Multi-Label
  Learning?", Table 1 (SPML, ResNet-50, 5 trials): the CRISP row, the target of the ``crisp``
  image presets, the PLC row, the target of the ``plc`` presets, and its BoostLU+LL-R / -CT /
  -CP rows, the targets of the ``boostlu_*`` presets. Its numbers have three decimals.
- ``BoostLU``: Kim et al., "Bridging the Gap between Model Explanations in Partially Annotated
  Multi-label Classification", CVPR 2023, Table 1 (single positive label, ResNet-50): its own
  LL-R / LL-Ct / LL-Cp runs and each with BoostLU (means only; the rows it copies from EM
  Table 1 are left out).

Numbers are mAP in percent, as printed (mean over runs, and the std where printed). Method
and dataset names are spmlkit's (:data:`METHOD_LABELS` maps them back to the papers'
labels); methods that spmlkit does not implement keep a lower-case form of the paper's name
(``mime``, ``sarb``, ...). Observations use spmlkit's text form
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
    mean: float  # mAP %
    std: float | None
    note: str = ""

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
#: CRISP Table 1 (mean ± std over 5 trials): the proposed method's row and the BoostLU rows
_CRISP_T1 = {
    "boostlu_ll_r": ((89.224, 0.017), (73.272, 0.006), (49.590, 0.021), (19.136, 0.009)),
    "boostlu_ll_cp": ((88.358, 0.212), (70.820, 0.030), (47.810, 0.166), (18.166, 0.063)),
    "boostlu_ll_ct": ((88.528, 0.053), (71.742, 0.006), (48.216, 0.021), (17.952, 0.007)),
    "crisp": ((89.820, 0.191), (74.640, 0.219), (49.996, 0.316), (21.650, 0.178)),
    # LAC's first stage (Xie et al., NeurIPS 2022), as CRISP ran it
    "plc": ((88.021, 0.121), (70.422, 0.062), (46.211, 0.155), (21.840, 0.237)),
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
    rows += _rows4("CRISP Table 1", _SP, _CRISP_T1)
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
) -> list[PublishedRow]:
    """Every published row matching the given (non-None) filters, in table order."""
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
    ]


def published(
    method: str, dataset: str, *, source: str | None = None, observation: str | None = None
) -> list[Published]:
    """The published mAP (%) of ``method`` on ``dataset``, one entry per table that lists it.

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
        for r in published_rows(method, dataset, source=source, observation=observation)
    ]
