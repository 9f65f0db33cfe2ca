"""The readers of the official dataset layouts, by name: which datasets :func:`~spmlkit.data.formats.prepare` knows.

A registry of its own, below both the prepared form (:mod:`.prepared` checks a folder's
variant against it) and :func:`~spmlkit.data.formats.prepare` (which runs a reader), so that
neither imports the other.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from .coco import COCO_VARIANTS, parse_coco2014
from .common import ParsedDataset
from .cub import parse_cub
from .nuswide import parse_nuswide
from .voc import parse_voc2007, parse_voc2012

__all__ = ["DATASETS", "VARIANTS", "dataset_options", "dataset_variants", "reader"]

_READERS: dict[str, Callable[..., ParsedDataset]] = {
    "voc2012": parse_voc2012,
    "voc2007": parse_voc2007,
    "coco2014": parse_coco2014,
    "nuswide": parse_nuswide,
    "cub": parse_cub,
}
DATASETS: tuple[str, ...] = tuple(_READERS)
"""Names accepted by :func:`prepare`."""

VARIANTS: dict[str, tuple[str, ...]] = {"coco2014": COCO_VARIANTS}
"""Datasets whose reader takes a ``variant`` option, with its values (the default first)."""


def reader(dataset: str) -> Callable[..., ParsedDataset]:
    """The function that reads ``dataset``'s official layout (an unknown name lists the known ones)."""
    if dataset not in _READERS:
        raise ValueError(f"unknown dataset {dataset!r}; choose one of {list(DATASETS)}")
    return _READERS[dataset]


def dataset_options(dataset: str) -> dict[str, Any]:
    """The reader options of ``dataset`` with their defaults (e.g. coco2014: ``{"variant": "spml"}``)."""
    parameters = inspect.signature(reader(dataset)).parameters
    return {name: p.default for name, p in parameters.items() if p.kind is inspect.Parameter.KEYWORD_ONLY}


def dataset_variants(dataset: str) -> tuple[str, ...]:
    """The values of ``dataset``'s ``variant`` option, the default first; empty if it has none.

    A variant selects another image list of the same official files (coco2014: "spml", the
    annotated images of the SPML papers, or "pu_mlc", every image as PU-MLC uses them).
    """
    reader(dataset)  # an unknown name fails here with the list of known ones
    return VARIANTS.get(dataset, ())
