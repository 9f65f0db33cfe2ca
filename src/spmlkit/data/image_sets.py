"""An image dataset's official train and test lists, ready for the protocol: one entry point.

:func:`load_image_set` reads every kind of image dataset a run or ``spmlkit extract`` can name
(docs/architecture.md, "Who owns what"): the digits mosaic, generated in memory; a benchmark,
read from its prepared folder and prepared from its official files on first use; users' own
data, which must have been prepared (its options are not run options). It takes plain values,
not a run's configuration, because data/ sits below training/ (docs/architecture.md,
"Layers"): ``training/run_data.load_image_data`` passes a run's values in, and code that has no
run (a notebook, a test) calls this directly.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

if TYPE_CHECKING:  # the data formats and torch's Dataset are imported when an image set is read
    from torch.utils.data import Dataset

    from .formats import PreparedDataset

__all__ = ["DIGITS_MOSAIC", "ImageData", "load_image_set"]

log = logging.getLogger(__name__)

#: the names the digits mosaic answers to (the registry lists the first)
DIGITS_MOSAIC: tuple[str, ...] = ("digits-mosaic", "digits_mosaic")


@dataclass
class ImageData:
    """The official train and test lists of an image dataset, ready for the protocol."""

    name: str
    class_names: tuple[str, ...]
    Y_train: np.ndarray  # full 0/1 labels of the official train list
    Y_test: np.ndarray
    train_dataset: Callable[[], Dataset]  # un-augmented dataset over the train list (flips come from the sampler)
    test_dataset: Callable[[], Dataset]
    paths: dict[str, list[str]] = field(default_factory=dict)
    #: how to turn an image file into the model's input (recorded in best.pt for predict)
    transform_spec: dict[str, Any] = field(default_factory=dict)
    #: users' own data: its observed {-1, 0, 1} labels of the train list, read with the rest of its folder
    observed: np.ndarray | None = None


def load_image_set(
    dataset: str,
    *,
    image_size: int,
    root: str | None = None,
    prepared: str | None = None,
    variant: str | None = None,
    subset: int | None = None,
    mosaic_train: int | None = None,
    mosaic_test: int | None = None,
) -> ImageData:
    """Build :class:`ImageData` for ``dataset`` at ``image_size`` x ``image_size`` pixels.

    ``digits-mosaic`` is generated in memory (seed 0, ``mosaic_train`` and ``mosaic_test``
    images, the generator's own counts when None; documented in :mod:`spmlkit.data.digits_mosaic`);
    a benchmark dataset is read from its prepared folder (``prepared``, default under
    ``<root>/spmlkit-prepared/``, per ``variant``), created with ``spmlkit prepare`` semantics
    on first use. ``subset`` (the first N rows of the official train list a run reads) only
    narrows which unreadable images stop the run; the rows themselves are cut by the caller.

    Users' own data (``spmlkit prepare folder|csv``, dataset "folder" or "csv") is never
    prepared on the fly (its options are not run options): it needs its prepared folder. Its
    ``Y_train`` is None (only observed labels exist, in ``observed``) and its ``Y_test`` is
    None when it was prepared without a labelled test set.
    """
    if dataset in DIGITS_MOSAIC:
        return _digits_mosaic(image_size, mosaic_train, mosaic_test)
    from .formats import USER_DATASETS, load_prepared, prepare

    user_data = dataset in USER_DATASETS
    if not user_data:
        from .registry import resolve_dataset

        resolve_dataset(dataset)  # fail early, with the closest name, on a dataset spmlkit does not know
    from .images import ImageFileDataset, ImageTransform

    folder = _prepared_dir(dataset, root=root, prepared=prepared, variant=variant)
    expect = None if dataset == "prepared" else dataset
    if not (folder / "meta.json").is_file():
        if user_data:
            raise FileNotFoundError(
                f"no prepared data at {folder}; prepare your images first (`spmlkit prepare folder --root DIR` "
                "or `spmlkit prepare csv --labels FILE --images DIR`) and pass the folder it reports with --prepared"
            )
        if expect is None or not root:
            raise FileNotFoundError(
                f"no prepared dataset at {folder}; run `spmlkit prepare {dataset} --root DIR` "
                "or pass --root (the folder you downloaded the dataset into)"
            )
        log.info("preparing %s from %s into %s", dataset, root, folder)
        options = {"variant": variant} if variant else {}
        prepare(dataset, root, folder, **options)
    ds = load_prepared(folder, expect_dataset=expect, expect_variant=variant)
    _refuse_bad_images(ds, folder, dataset=dataset, root=root, prepared=prepared, variant=variant, subset=subset)
    train_paths, test_paths = [str(p) for p in ds.paths("train")], [str(p) for p in ds.paths("test")]
    transform = ImageTransform(image_size)
    from .formats.image_cache import open_cache

    # `spmlkit prepare --cache-size S` (S >= image_size): pre-resized pixels read instead of the files
    cache = open_cache(folder, ds, image_size)
    train_cache, test_cache = (cache.split("train"), cache.split("test")) if cache else (None, None)
    return ImageData(
        name=ds.dataset,
        class_names=tuple(ds.class_names),
        Y_train=None if ds.observed is not None else np.asarray(ds.train_labels),  # users' data: observed only
        observed=None if ds.observed is None else np.asarray(ds.observed),
        Y_test=None if ds.test_labels is None else np.asarray(ds.test_labels),  # None: no labelled test set
        train_dataset=lambda: ImageFileDataset(train_paths, transform, cache=train_cache),
        test_dataset=lambda: ImageFileDataset(test_paths, transform, cache=test_cache),
        paths={"train": train_paths, "test": test_paths},
        transform_spec=transform.spec(),
    )


def _prepared_dir(dataset: str, *, root: str | None, prepared: str | None, variant: str | None) -> Path:
    """The prepared folder a run of ``dataset`` reads: ``prepared`` when given, else its default under ``root``."""
    if prepared:
        return Path(prepared)
    if root:
        from .formats import default_prepared_dir

        return default_prepared_dir(dataset, root, variant)
    raise ValueError(
        f"dataset {dataset!r} needs --root (where the dataset was unpacked) or --prepared "
        "(a folder written by `spmlkit prepare`)"
    )


_SHOW_BAD = 3


def _refuse_bad_images(ds: PreparedDataset, folder: Path, *, dataset: str, root: str | None, prepared: str | None,
                       variant: str | None, subset: int | None) -> None:
    """Stop before the first epoch when ``spmlkit prepare --check`` found unreadable images in the run's lists.

    Training reads every listed image (``skip_bad=False``: dropping examples would change
    the results), so a listed bad image would otherwise crash the run mid-epoch, possibly
    hours in. Only images of the lists this run reads count: the official train list (its
    first ``subset`` rows when set) and the test list.
    """
    import shlex

    from .formats.prepared import BAD_IMAGES

    if not ds.bad_images:
        return
    train_rows = ds.train_images if subset is None else ds.train_images[:subset]
    used = set(train_rows) | set(ds.test_images)
    bad = [b for b in ds.bad_images if b.path in used]
    if not bad:
        return
    shown = ", ".join(str(ds.root / b.path) for b in bad[:_SHOW_BAD])
    more = f" and {len(bad) - _SHOW_BAD} more" if len(bad) > _SHOW_BAD else ""
    named = dataset if dataset != "prepared" else ds.dataset
    variant = ds.meta.get("variant") or variant
    command = " ".join([
        "spmlkit prepare", named, *(["--variant", shlex.quote(variant)] if variant else []),
        "--root", shlex.quote(root) if root else "DIR",
        *(["--out", shlex.quote(str(folder))] if prepared else []), "--check",
    ])
    raise ValueError(
        f"{len(bad)} image{'s' if len(bad) != 1 else ''} of the {ds.dataset} lists this run trains and tests on "
        f"cannot be read ({shown}{more}; the full list with reasons is in {folder / BAD_IMAGES}); "
        f"re-download {'them' if len(bad) != 1 else 'it'} (replace each with a readable copy), then prepare again "
        f"with `{command}`"
        + ("" if root else " (DIR: the folder the dataset was unpacked into)") + " before training"
    )


def _digits_mosaic(image_size: int, num_train: int | None, num_test: int | None) -> ImageData:
    from .digits_mosaic import DigitsMosaicDataset, make_digits_mosaic

    counts = {key: value for key, value in (("num_train", num_train), ("num_test", num_test)) if value is not None}
    mosaic = make_digits_mosaic(**counts, seed=0, image_size=image_size)
    return ImageData(
        name="digits-mosaic",
        class_names=tuple(mosaic.class_names),
        Y_train=mosaic.train_labels,
        Y_test=mosaic.test_labels,
        train_dataset=lambda: DigitsMosaicDataset(mosaic.train_images),
        test_dataset=lambda: DigitsMosaicDataset(mosaic.test_images),
        transform_spec=DigitsMosaicDataset(mosaic.test_images[:1]).transform.spec(),
    )
