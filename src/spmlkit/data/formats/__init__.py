"""Image datasets from their official on-disk layouts to spmlkit's prepared form.

:func:`prepare` reads a dataset exactly as a user downloads and unpacks it (PASCAL VOC
2012 / 2007, MS-COCO 2014, NUS-WIDE, CUB-200-2011; docs/protocol.md, "Datasets"), applies
the reference selection and ordering so that the bit-exact split and observation generator
(docs/protocol.md, "Train/val split" and "Observed labels") give the published splits,
checks the images, and writes the small prepared form documented in :mod:`.prepared`; :func:`load_prepared` reads it back, validated.

Users' own partially labelled images come in two forms (docs/protocol.md, "Your own data"):
a folder per label (:func:`read_folder` / :func:`prepare_folder`, :mod:`.folder`) or a
labels file (:func:`read_csv_labels` / :func:`prepare_csv`, :mod:`.csv_labels`), each with
an optional fully labelled test list in either form (:mod:`.user_prepare`). They are
prepared into the same form, marked ``observation: given`` with their observed {-1, 0, 1}
labels (:data:`USER_DATASETS` names them in ``meta.json``).

Example::

    from spmlkit.data.formats import prepare, load_prepared
    prepare("voc2012", "/data/pascal", "/data/prepared/voc2012")
    ds = load_prepared("/data/prepared/voc2012")
    ds.train_labels.shape   # (5717, 20)
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from .check import BadImage, ProgressCallback, require_images, verify_images
from .common import (
    AnnotationError,
    DatasetNotFoundError,
    MissingImagesError,
    ParsedDataset,
    PrepareError,
)
from .prepared import (
    FORMAT_VERSION,
    PreparedDataset,
    PreparedFormatError,
    PreparedMismatchError,
    check_prepared_dir,
    load_prepared,
    recorded_variant,
    write_prepared,
)
from .user_data import USER_DATASETS, UserData, UserDataError, default_user_out
from .user_prepare import prepare_csv, prepare_folder, read_csv_labels, read_folder
from .readers import DATASETS, VARIANTS, dataset_options, dataset_variants, reader
from .voc import VOC_CLASSES

__all__ = [
    "DATASETS",
    "FORMAT_VERSION",
    "USER_DATASETS",
    "VOC_CLASSES",
    "AnnotationError",
    "BadImage",
    "DatasetNotFoundError",
    "MissingImagesError",
    "PrepareError",
    "PreparedDataset",
    "PreparedFormatError",
    "PreparedMismatchError",
    "UserData",
    "UserDataError",
    "dataset_options",
    "dataset_variants",
    "default_prepared_dir",
    "load_prepared",
    "parse",
    "prepare",
    "prepare_csv",
    "prepare_folder",
    "read_csv_labels",
    "read_folder",
    "recorded_variant",
]

_log = logging.getLogger(__name__)

_PREPARED_FOLDER = "spmlkit-prepared"  # under the dataset root: one prepared folder per dataset variant


def default_prepared_dir(dataset: str, root: str | Path, variant: str | None = None) -> Path:
    """Where ``spmlkit prepare`` writes ``dataset`` when no ``--out`` is given.

    ``<root>/spmlkit-prepared/<dataset>`` for the default variant (``variant`` None or equal
    to the default, e.g. "spml" for coco2014) and for datasets without variants;
    ``<root>/spmlkit-prepared/<dataset>-<variant>`` otherwise (coco2014 "pu_mlc" ->
    ``coco2014-pu_mlc``). Each variant gets its own folder because the variants hold
    different image lists: sharing one folder let a run prepared for one paper silently
    train on the other paper's list.

    Users' own data (:data:`USER_DATASETS`) goes to ``<root>/spmlkit-prepared/folder`` or
    ``.../csv``, ``root`` being the image folder (``--root`` of the folder form, ``--images``
    of the CSV form); it has no variants.

    Raises:
        ValueError: ``dataset`` is unknown, or ``variant`` is not one of its variants.
    """
    if dataset in USER_DATASETS:
        if variant is not None:
            raise ValueError(f"{dataset} (your own data) has no variants, got variant {variant!r}; drop --variant")
        return default_user_out(root, dataset)
    variants = dataset_variants(dataset)
    folder = Path(root) / _PREPARED_FOLDER
    if variant is None or (variants and variant == variants[0]):
        return folder / dataset
    if variant not in variants:
        if not variants:
            raise ValueError(
                f"{dataset} has no variants, got variant {variant!r}; drop --variant "
                f"(datasets with variants: {', '.join(f'{d} {list(v)}' for d, v in VARIANTS.items())})"
            )
        raise ValueError(f"unknown variant {variant!r} of {dataset}; choose one of {list(variants)} (--variant)")
    return folder / f"{dataset}-{variant}"


def parse(dataset: str, root: str | Path, **options: Any) -> ParsedDataset:
    """Read ``dataset`` from ``root`` without checking images or writing anything."""
    allowed = dataset_options(dataset)
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        listed = ", ".join(f"{k}={v!r}" for k, v in allowed.items()) or "none"
        raise ValueError(f"unknown option(s) {unknown} for {dataset}; its options are: {listed}")
    return reader(dataset)(Path(root), **options)


def prepare(
    dataset: str,
    root: str | Path,
    out: str | Path,
    *,
    check: bool = False,
    check_exists: bool = True,
    progress: ProgressCallback | None = None,
    cache_size: int | None = None,
    **options: Any,
) -> PreparedDataset:
    """Read ``dataset`` from its official layout under ``root`` and write the prepared form to ``out``.

    ``dataset`` is one of :data:`DATASETS`; ``options`` are the dataset's reader options
    (:func:`dataset_options`; e.g. ``variant="pu_mlc"`` for coco2014, ``mode="raw"`` for
    nuswide). Every listed image must exist unless ``check_exists=False`` (labels only);
    ``check=True`` also opens every image with PIL and records the unreadable ones in the
    result, ``meta.json`` and ``bad_images.txt`` without stopping the scan (``progress(done,
    total)`` is called per image). Missing files, a wrong root and annotation files that do
    not parse raise :class:`DatasetNotFoundError`, :class:`AnnotationError` or
    :class:`MissingImagesError`, each naming the path and what was expected.

    The ``variant`` option is also recorded as ``meta["variant"]`` (None for datasets
    without variants); :func:`default_prepared_dir` gives each variant its own ``out``.

    ``cache_size=S`` also writes every train and test image resized to ``S x S`` into
    ``out/image_cache`` (:func:`.image_cache.write_image_cache`), which runs at an
    image size <= S then read instead of decoding the original JPEGs every epoch
    (docs/protocol.md, "Pre-resized image cache").
    """
    if cache_size is not None and (not isinstance(cache_size, int) or isinstance(cache_size, bool) or cache_size < 1):
        raise ValueError(f"cache_size must be a positive number of pixels, got {cache_size!r} (--cache-size)")
    check_prepared_dir(out)  # refused before the dataset is read, not after
    parsed = parse(dataset, root, **options)
    all_images = parsed.train.images + parsed.test.images
    if check_exists and not parsed.images_checked:
        require_images(parsed.base, all_images, parsed.image_hint)
    bad = verify_images(parsed.base, all_images, progress) if check else None
    if bad:
        # Reported as a value (result.bad_images, meta.json, bad_images.txt) that the caller
        # prints; a log record rather than warnings.warn keeps the CLI free of a Python
        # warning with its source line.
        shown = ", ".join(b.path for b in bad[:3]) + (", ..." if len(bad) > 3 else "")
        _log.info(
            "%d of %d images could not be read (%s); they are listed in %s",
            len(bad), len(all_images), shown, Path(out) / "bad_images.txt",
        )  # fmt: skip
    recorded = {**dataset_options(dataset), **parsed.details, **options}
    result = write_prepared(
        out,
        dataset=dataset,
        class_names=parsed.class_names,
        train_images=parsed.train.images,
        train_labels=parsed.train.labels,
        test_images=parsed.test.images,
        test_labels=parsed.test.labels,
        root=parsed.base,
        selection=parsed.notes,
        options={k: _jsonable(v) for k, v in recorded.items()},
        reference_counts=parsed.reference_counts,
        images_exist_checked=check_exists or parsed.images_checked,
        bad_images=bad,
        variant=recorded.get("variant"),
    )
    if cache_size is None:
        return result
    from .image_cache import write_image_cache

    write_image_cache(out, cache_size)
    return load_prepared(out)  # with the cache recorded in its meta


def _jsonable(value: Any) -> Any:
    """Options as JSON values (paths and sequences of names become strings and lists)."""
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return repr(value)
