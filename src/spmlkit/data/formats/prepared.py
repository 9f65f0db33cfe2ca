"""The prepared form of an image dataset: small, versioned, documented, checked on load.

``spmlkit prepare`` reads a dataset in its official on-disk layout once (docs/protocol.md,
"Datasets") and writes this form; everything downstream (split, observation, training)
reads only this form, so the slow and fragile parsing happens once and its result can
be inspected with a text editor.

Layout of ``out/`` (format version 1)::

    meta.json          what this is and how it was made (see below)
    train_images.txt   official train list: one image path per line, UTF-8, '/' separators,
                       relative to meta["root"]
    test_images.txt    official test list, same form
    train_labels.npy   uint8 0/1 matrix [N_train, C]; row i belongs to line i
    test_labels.npy    uint8 0/1 matrix [N_test, C]
    bad_images.txt     only after a check=True run: "path<TAB>reason" per unreadable image
    image_cache/       only after ``prepare --cache-size S``: the images pre-resized to S x S
                       (:mod:`spmlkit.data.formats.image_cache`), recorded as ``meta["image_cache"]``
    .spmlkit.json      the marker of an output folder (:mod:`spmlkit.output_dir`): written first,
                       it says the folder is a prepared dataset, so that a folder of the user's
                       own files is never written into (``--out`` is refused there instead)

Users' own data (``spmlkit prepare folder`` / ``spmlkit prepare csv``; docs/protocol.md,
"Your own data") has no full train labels: it records what was observed instead, and may
have no test list. Such a folder has ``meta["observation"] == "given"`` and, in place of
``train_labels.npy``::

    train_observed.npy int8 {-1, 0, 1} matrix [N_train, C]: +1 an observed positive, -1 an
                       observed negative, 0 unknown (docs/protocol.md, "Label encoding")

``test_images.txt`` and ``test_labels.npy`` (full 0/1 labels) are written only when the
user gave a fully labelled test set; without one ``counts["test"]`` is 0, the two files are
absent and :class:`PreparedDataset` has ``test_images == []`` and ``test_labels is None``.
``train_labels.npy`` is deliberately not written: an older spmlkit that does not know
``observation`` then stops on the missing file instead of taking observed positives for
full labels. Benchmark folders are written exactly as before (same files, same bytes, same
``meta.json`` keys), so the format version stays 1.

"train" is the official train list, which the reference protocol (docs/protocol.md,
"Train/val split") later divides into train and val; "test" is the official test list (VOC
2012 ``val``, COCO ``val2014``). Row order is the reference order of each dataset, which the
bit-exact split and observation generator (docs/protocol.md, "Train/val split" and
"Observed labels") depend on.

``meta.json`` keys: ``format_version`` (int), ``dataset``, ``variant`` (the reader's
``variant`` option, e.g. "spml" or "pu_mlc" for coco2014; null for a dataset that has no
variants), ``class_names`` (column order), ``num_classes``, ``counts`` ({"train", "test"}),
``positives_per_image`` (mean true positives per row, comparable with the table in
docs/protocol.md, "Datasets"), ``reference_counts`` and ``matches_reference_counts``
(published sizes, or null), ``root`` (absolute dataset folder the image paths are relative to), ``created_by`` ("spmlkit
<version>"), ``created_at`` (UTC, ISO 8601), ``selection`` (sentences describing the
selection rule and what it kept), ``options`` (reader options), ``check``
({"images_exist": bool, "verified": bool, "bad_images": int, "bad_examples": [...]}) and
``files`` (SHA-256 of each data file, verified on load so that a half-overwritten folder is
detected). ``image_cache`` is present only in a folder prepared with a pre-resized cache
(:func:`record_image_cache`; the cache is not among ``files``: hashing it would cost minutes per
load), so folders without one keep exactly the keys above. Folders written before
``variant`` was recorded are read with the variant found in ``options`` (null when there is
none), so they need no re-preparation.

The variant is recorded because two variants of one dataset have different rows (COCO 2014:
82,081 annotated images for the SPML papers, all 82,783 for PU-MLC), and a run that silently
trains on the other list would report numbers that cannot be compared with its paper;
``load_prepared(..., expect_dataset=..., expect_variant=...)`` refuses such a folder.

Files are written to a temporary name in ``out/`` and renamed into place; an old
``meta.json`` is removed first and the new one is written last, so an interrupted run
never leaves a folder that loads as valid with mixed contents.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from .check import BadImage
from .common import AnnotationError, DatasetNotFoundError, PrepareError
from ...io import atomic_write_bytes
from ...output_dir import PREPARED, check_output_dir, claim_output_dir

__all__ = [
    "FORMAT_VERSION",
    "PreparedDataset",
    "PreparedFormatError",
    "PreparedMismatchError",
    "check_prepared_dir",
    "claim_prepared_dir",
    "is_prepared_dir",
    "load_prepared",
    "record_image_cache",
    "recorded_variant",
    "write_prepared",
]

FORMAT_VERSION = 1
"""Version of the prepared layout written by this module; bump on any incompatible change."""

META = "meta.json"
BAD_IMAGES = "bad_images.txt"
OBSERVED = "train_observed.npy"  # users' own data: the {-1, 0, 1} labels it was given
_DATA_FILES = frozenset({"train_images.txt", "train_labels.npy", OBSERVED, "test_images.txt", "test_labels.npy"})
_SPLITS = ("train", "test")
_BAD_EXAMPLES = 20


class PreparedFormatError(PrepareError, ValueError):
    """A prepared folder is incomplete, from another format version, or inconsistent."""


class PreparedMismatchError(PrepareError, ValueError):
    """A valid prepared folder holds another dataset or variant than the caller expected.

    Separate from :class:`PreparedFormatError` because nothing is broken: the folder is fine,
    it is just not the list the run asked for (e.g. COCO's PU-MLC list in the SPML folder),
    and the fix is to prepare the other one, not to repair this one.
    """


@dataclass(eq=False)
class PreparedDataset:
    """A prepared dataset in memory: class names, both official lists and their labels.

    ``train_images[i]`` is a path relative to ``root`` and ``train_labels[i]`` its uint8 0/1
    label row (likewise for test). ``meta`` is the parsed ``meta.json``; ``bad_images`` is
    what a ``check=True`` run found (empty otherwise).

    Users' own data (``meta["observation"] == "given"``) knows only what was observed:
    ``observed`` is its int8 {-1, 0, 1} matrix and ``train_labels`` is None, so that nothing
    downstream can mistake observed positives for full labels. Without a labelled test set
    ``test_images`` is empty and ``test_labels`` None.
    """

    dataset: str
    class_names: list[str]
    train_images: list[str]
    train_labels: np.ndarray | None
    test_images: list[str]
    test_labels: np.ndarray | None
    root: Path
    meta: dict[str, Any] = field(default_factory=dict)
    bad_images: list[BadImage] = field(default_factory=list)
    observed: np.ndarray | None = None

    @property
    def num_classes(self) -> int:
        """Number of classes C (columns of the label matrices)."""
        return len(self.class_names)

    def images(self, split: str) -> list[str]:
        """Relative image paths of ``split`` ("train" or "test")."""
        return self._pick(split)[0]

    def labels(self, split: str) -> np.ndarray | None:
        """uint8 0/1 label matrix of ``split`` ("train" or "test"); None where the data has none."""
        return self._pick(split)[1]

    def paths(self, split: str) -> list[Path]:
        """Absolute image paths of ``split`` (``root / relative path``)."""
        return [self.root / rel for rel in self._pick(split)[0]]

    def _pick(self, split: str) -> tuple[list[str], np.ndarray | None]:
        if split == "train":
            return self.train_images, self.train_labels
        if split == "test":
            return self.test_images, self.test_labels
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")


def _npy_bytes(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


def _list_bytes(paths: Sequence[str]) -> bytes:
    for p in paths:
        if "\n" in p or "\r" in p:
            raise AnnotationError(f"image path {p!r} contains a line break and cannot be written to a list file")
    return "".join(f"{p}\n" for p in paths).encode("utf-8")


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _spmlkit_version() -> str:
    from spmlkit import __version__

    return __version__


def write_prepared(
    out: str | Path,
    *,
    dataset: str,
    class_names: Sequence[str],
    train_images: Sequence[str],
    train_labels: np.ndarray | None = None,
    test_images: Sequence[str] | None = None,
    test_labels: np.ndarray | None = None,
    root: str | Path,
    selection: Sequence[str] = (),
    options: dict[str, Any] | None = None,
    reference_counts: tuple[int, int] | None = None,
    images_exist_checked: bool = True,
    bad_images: Sequence[BadImage] | None = None,
    variant: str | None = None,
    train_observed: np.ndarray | None = None,
) -> PreparedDataset:
    """Write the prepared form to ``out`` (created if needed) and return it in memory.

    ``bad_images=None`` means no ``check=True`` scan ran (a stale ``bad_images.txt`` is
    removed); a list, even empty, writes ``bad_images.txt``. ``variant`` is recorded as
    ``meta["variant"]`` (None for datasets without variants) so that a later load can tell
    the variants of one dataset apart.

    A benchmark passes ``train_labels`` and its test list. Users' own data passes
    ``train_observed`` (the {-1, 0, 1} labels it was given) instead of ``train_labels``, and
    ``test_images``/``test_labels`` only if it has a fully labelled test set; the folder is
    then marked ``observation: given`` (see the module docstring for why no
    ``train_labels.npy`` is written). Data files of a previous preparation that this one does
    not write are removed, so a folder never mixes two datasets.
    """
    out = Path(out)
    class_names = [str(c) for c in class_names]
    given = train_observed is not None
    if given == (train_labels is not None):
        raise ValueError("write_prepared needs exactly one of train_labels (full 0/1 labels, a benchmark) and "
                         "train_observed ({-1, 0, 1} observed labels, users' own data)")
    if (test_images is None) != (test_labels is None):
        raise ValueError("test_images and test_labels go together: give both (a labelled test list) or neither")
    if test_images is None and not given:
        raise ValueError("a benchmark needs its official test list: give test_images and test_labels")
    train_list = list(train_images)
    # the full 0/1 label matrices, per split that has them (a benchmark: both; users' data: the test list if any)
    splits: dict[str, tuple[list[str], np.ndarray]] = {}
    if train_labels is not None:
        splits["train"] = (train_list, np.ascontiguousarray(train_labels, dtype=np.uint8))
    if test_images is not None:
        splits["test"] = (list(test_images), np.ascontiguousarray(test_labels, dtype=np.uint8))
    for name, (images, labels) in splits.items():
        if labels.shape != (len(images), len(class_names)):
            raise ValueError(f"{name} labels must have shape ({len(images)}, {len(class_names)}), got {labels.shape}")
    observed = None
    if given:
        raw = np.asarray(train_observed)
        if raw.shape != (len(train_list), len(class_names)):
            raise ValueError(f"train_observed must have shape ({len(train_list)}, {len(class_names)}), got {raw.shape}")
        if raw.size and not np.isin(raw, (-1, 0, 1)).all():
            raise ValueError("train_observed must contain only -1 (negative), 0 (unknown) and 1 (positive)")
        observed = np.ascontiguousarray(raw, dtype=np.int8)

    claim_prepared_dir(out)  # before anything is removed: never a file of someone else's
    (out / META).unlink(missing_ok=True)  # an interrupted run must not leave a loadable mix
    payloads = {"train_images.txt": _list_bytes(train_list)}
    if observed is not None:
        payloads[OBSERVED] = _npy_bytes(observed)
    for name, (images, labels) in splits.items():
        if name == "test":
            payloads["test_images.txt"] = _list_bytes(images)
        payloads[f"{name}_labels.npy"] = _npy_bytes(labels)
    for stale in sorted(_DATA_FILES - payloads.keys()):
        (out / stale).unlink(missing_ok=True)
    for filename, data in payloads.items():
        atomic_write_bytes(out / filename, data)

    bad = None if bad_images is None else list(bad_images)
    if bad is None:
        (out / BAD_IMAGES).unlink(missing_ok=True)
    else:
        atomic_write_bytes(out / BAD_IMAGES, "".join(f"{b.path}\t{b.reason}\n" for b in bad).encode("utf-8"))

    counts = {"train": len(train_list), "test": len(splits["test"][0]) if "test" in splits else 0}
    user_keys: dict[str, Any] = {}
    if observed is not None:
        rows = max(len(train_list), 1)
        user_keys = {
            "observation": "given",
            "observed_per_image": {"positives": float((observed == 1).sum() / rows),
                                   "negatives": float((observed == -1).sum() / rows)},
        }
    meta: dict[str, Any] = {
        "format_version": FORMAT_VERSION,
        "dataset": dataset,
        "variant": variant,
        "class_names": class_names,
        "num_classes": len(class_names),
        "counts": counts,
        **user_keys,
        "positives_per_image": {
            name: (float(labels.sum(axis=1).mean()) if len(images) else 0.0)
            for name, (images, labels) in splits.items()
        },
        "reference_counts": (
            None if reference_counts is None else {"train": reference_counts[0], "test": reference_counts[1]}
        ),
        "matches_reference_counts": (
            None if reference_counts is None else (counts["train"], counts["test"]) == tuple(reference_counts)
        ),
        "root": str(Path(root).resolve()),
        "created_by": f"spmlkit {_spmlkit_version()}",
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "selection": list(selection),
        "options": dict(options or {}),
        "check": {
            "images_exist": bool(images_exist_checked),
            "verified": bad is not None,
            "bad_images": 0 if bad is None else len(bad),
            "bad_examples": [] if bad is None else [{"path": b.path, "reason": b.reason} for b in bad[:_BAD_EXAMPLES]],
        },
        "files": {filename: _sha256(data) for filename, data in payloads.items()},
    }
    atomic_write_bytes(out / META, (json.dumps(meta, indent=2, ensure_ascii=False) + "\n").encode("utf-8"))
    return PreparedDataset(
        dataset=dataset,
        class_names=class_names,
        train_images=train_list,
        train_labels=splits["train"][1] if "train" in splits else None,
        test_images=splits["test"][0] if "test" in splits else [],
        test_labels=splits["test"][1] if "test" in splits else None,
        root=Path(meta["root"]),
        meta=meta,
        bad_images=bad or [],
        observed=observed,
    )


def is_prepared_dir(path: Path) -> bool:
    """Whether ``path`` (unmarked, docs/bad-input.md) holds a prepared dataset an earlier spmlkit
    wrote: its ``meta.json`` says ``created_by: spmlkit``, or (a preparation interrupted before
    ``meta.json``) it holds nothing but the files this module writes."""
    try:
        meta = json.loads((path / META).read_text(encoding="utf-8"))
        if isinstance(meta, dict) and str(meta.get("created_by", "")).startswith("spmlkit"):
            return True
    except (OSError, ValueError):
        pass
    own = _DATA_FILES | {BAD_IMAGES, "image_cache"}
    return all(name in own or (name.startswith(".") and name.endswith(".tmp")) for name in os.listdir(path))


def check_prepared_dir(out: str | Path) -> None:
    """Refuse at once an ``out`` that holds files spmlkit did not write (:mod:`spmlkit.output_dir`):
    called before a dataset is read, so the refusal comes before minutes of reading images."""
    check_output_dir(out, PREPARED, option="--out", recognise=is_prepared_dir)


def claim_prepared_dir(out: str | Path) -> Path:
    """Create and mark ``out`` as a prepared dataset, or refuse it as :func:`check_prepared_dir` does."""
    return claim_output_dir(out, PREPARED, option="--out", recognise=is_prepared_dir)


def _read_meta(out: Path) -> dict[str, Any]:
    meta_path = out / META
    if not meta_path.is_file():
        where = "does not exist" if not out.exists() else f"has no {META}"
        raise DatasetNotFoundError(
            f"{out} {where}: not a prepared dataset. Run `spmlkit prepare` (or "
            "spmlkit.data.formats.prepare) first, pointing its output at this folder."
        )
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise PreparedFormatError(f"{meta_path} is not valid JSON ({err}); re-run prepare") from err
    if not isinstance(meta, dict):
        raise PreparedFormatError(f"{meta_path} must hold a JSON object, got {type(meta).__name__}")
    version = meta.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise PreparedFormatError(f"{meta_path} has no integer format_version; re-run prepare")
    if version > FORMAT_VERSION:
        raise PreparedFormatError(
            f"{out} uses prepared format version {version}, but this spmlkit reads version "
            f"{FORMAT_VERSION}: upgrade spmlkit or re-run prepare with this version"
        )
    if version != FORMAT_VERSION:
        raise PreparedFormatError(
            f"{out} uses prepared format version {version}, which this spmlkit no longer reads "
            f"(it reads version {FORMAT_VERSION}); re-run prepare"
        )
    required = ("dataset", "class_names", "counts", "root", "files")
    absent = [key for key in required if key not in meta]
    if absent:
        raise PreparedFormatError(f"{meta_path} lacks the keys {absent}; re-run prepare")
    counts = meta["counts"]
    if not (isinstance(counts, dict) and all(isinstance(counts.get(s), int) for s in _SPLITS)):
        raise PreparedFormatError(f"{meta_path}: counts must map 'train' and 'test' to integers; re-run prepare")
    return meta


def record_image_cache(out: str | Path, entry: dict[str, Any] | None) -> None:
    """Set ``meta["image_cache"]`` of the prepared folder ``out`` to ``entry``, or remove it (None).

    The cache (:mod:`spmlkit.data.formats.image_cache`) is optional and written after the folder, so it
    is recorded by rewriting ``meta.json`` atomically with only this key changed: a folder
    without a cache keeps the exact keys and checksums it had.
    """
    out = Path(out)
    meta = _read_meta(out)
    if entry is None:
        if "image_cache" not in meta:
            return
        del meta["image_cache"]
    else:
        meta["image_cache"] = entry
    atomic_write_bytes(out / META, (json.dumps(meta, indent=2, ensure_ascii=False) + "\n").encode("utf-8"))


def _read_checked(out: Path, filename: str, expected_hash: str | None) -> bytes:
    path = out / filename
    if not path.is_file():
        raise PreparedFormatError(f"{path} is missing (the prepared folder is incomplete); re-run prepare")
    data = path.read_bytes()
    if expected_hash is not None and _sha256(data) != expected_hash:
        raise PreparedFormatError(
            f"{path} does not match the checksum recorded in {META} (modified or from another run); re-run prepare"
        )
    return data


def recorded_variant(meta: dict[str, Any]) -> str | None:
    """The variant a prepared folder holds, read from its parsed ``meta.json``.

    ``meta["variant"]`` where present. Folders written before that key existed recorded the
    variant only among the reader options, so ``meta["options"]["variant"]`` is the fallback;
    a dataset without variants gives None.
    """
    if "variant" in meta:
        value = meta["variant"]
    else:
        options = meta.get("options")
        value = options.get("variant") if isinstance(options, dict) else None
    return None if value is None else str(value)


def _default_variant(dataset: str) -> str | None:
    """The default variant of a dataset of :func:`spmlkit.data.formats.prepare`, else None."""
    from .readers import DATASETS, dataset_variants

    variants = dataset_variants(dataset) if dataset in DATASETS else ()
    return variants[0] if variants else None


def _describe(dataset: str, variant: str | None) -> str:
    """``coco2014 (variant 'pu_mlc')``, or the bare name for a dataset without variants."""
    return dataset if variant is None else f"{dataset} (variant {variant!r})"


def _check_expected(
    out: Path, meta: dict[str, Any], expect_dataset: str | None, expect_variant: str | None
) -> None:
    """Refuse a folder that holds another dataset or variant than the caller asked for.

    Checked before the data files are read, so a wrong folder fails at once, with the
    command that prepares the expected one. A named dataset without a named variant means
    its default variant: a run that names no variant trains on the default list, and a
    folder holding another list must not pass for it.
    """
    if expect_dataset is not None and expect_variant is None:
        expect_variant = _default_variant(expect_dataset)
    found_dataset, found_variant = str(meta["dataset"]), recorded_variant(meta)
    if (expect_dataset is None or expect_dataset == found_dataset) and (
        expect_variant is None or expect_variant == found_variant
    ):
        return
    wanted_dataset = found_dataset if expect_dataset is None else expect_dataset
    same_dataset = wanted_dataset == found_dataset
    root = shlex.quote(str(meta["root"])) if same_dataset else "DIR"
    variant_flag = "" if expect_variant is None else f" --variant {shlex.quote(expect_variant)}"
    command = f"spmlkit prepare {wanted_dataset}{variant_flag} --root {root}"
    root_note = "" if same_dataset else f" (DIR: the folder {wanted_dataset} was downloaded and unpacked into)"
    raise PreparedMismatchError(
        f"{out} holds the prepared {_describe(found_dataset, found_variant)}, but "
        f"{_describe(wanted_dataset, expect_variant)} was expected. Prepare it with `{command}`{root_note} "
        f"and use the folder it reports, or add `--out {shlex.quote(str(out))}` to that command to replace "
        "this folder."
    )


def load_prepared(
    out: str | Path,
    *,
    root: str | Path | None = None,
    expect_dataset: str | None = None,
    expect_variant: str | None = None,
) -> PreparedDataset:
    """Load and validate a prepared folder written by :func:`write_prepared`.

    Checks the format version, the checksums, that each label matrix is uint8 0/1 with one
    row per listed image and one column per class name. ``root`` overrides the recorded
    dataset folder (for data moved since preparation). A folder of users' own data
    (``observation: given``) gives ``observed`` (int8 {-1, 0, 1}, checked) with
    ``train_labels`` None, and an empty test list when it was prepared without one.

    ``expect_dataset`` / ``expect_variant``, when given, must equal the recorded dataset and
    variant (:func:`recorded_variant`; None for datasets without variants), else a
    :class:`PreparedMismatchError` (a ValueError) names what is there, what was expected and
    the ``spmlkit prepare`` command that makes it. With ``expect_dataset`` given,
    ``expect_variant=None`` means that dataset's default variant (coco2014: "spml"), as in
    :func:`~spmlkit.data.formats.default_prepared_dir`, so that a run naming no variant is
    not fed another variant's list. With both None nothing is checked, as before.
    """
    out = Path(out)
    meta = _read_meta(out)
    _check_expected(out, meta, expect_dataset, expect_variant)
    class_names = meta["class_names"]
    if not isinstance(class_names, list) or not all(isinstance(c, str) for c in class_names):
        raise PreparedFormatError(f"{out / META}: class_names must be a list of strings")
    hashes = meta["files"] if isinstance(meta["files"], dict) else {}
    observation = meta.get("observation")
    if observation not in (None, "given"):
        raise PreparedFormatError(
            f"{out / META} records observation {observation!r}, which this spmlkit does not know (it reads "
            "benchmark folders and 'given', users' own labels); re-run prepare with this spmlkit or upgrade it"
        )
    given = observation == "given"
    observed: np.ndarray | None = None
    loaded: dict[str, tuple[list[str], np.ndarray | None]] = {}
    for split in _SPLITS:
        if given and split == "test" and "test_images.txt" not in hashes:  # users' data without a test set
            if meta["counts"]["test"] != 0:
                raise PreparedFormatError(f"{out / META} counts {meta['counts']['test']} test images but lists no "
                                          "test files; re-run prepare")
            loaded[split] = ([], None)
            continue
        images = _read_checked(out, f"{split}_images.txt", hashes.get(f"{split}_images.txt"))
        image_list = images.decode("utf-8").splitlines()
        label_file = OBSERVED if given and split == "train" else f"{split}_labels.npy"
        raw = _read_checked(out, label_file, hashes.get(label_file))
        try:
            labels = np.load(io.BytesIO(raw), allow_pickle=False)
        except ValueError as err:
            raise PreparedFormatError(f"{out / label_file} is not a readable .npy file ({err})") from err
        expected = (meta["counts"][split], len(class_names))
        dtype = np.dtype(np.int8 if label_file == OBSERVED else np.uint8)
        if labels.dtype != dtype or labels.ndim != 2:
            raise PreparedFormatError(
                f"{out / label_file} must be a 2-D {dtype} matrix, got {labels.ndim}-D {labels.dtype}"
            )
        if labels.shape != expected or len(image_list) != expected[0]:
            raise PreparedFormatError(
                f"{split} split of {out} is inconsistent: {len(image_list)} listed images, labels of shape "
                f"{labels.shape}, meta.json expects ({expected[0]}, {expected[1]}); re-run prepare"
            )
        if label_file == OBSERVED:
            if labels.size and not np.isin(labels, (-1, 0, 1)).all():
                raise PreparedFormatError(f"{out / label_file} contains values other than -1, 0 and 1")
            observed = labels
            loaded[split] = (image_list, None)
            continue
        if labels.size and labels.max() > 1:
            raise PreparedFormatError(f"{out / label_file} contains values other than 0 and 1")
        loaded[split] = (image_list, labels)

    bad: list[BadImage] = []
    if (out / BAD_IMAGES).is_file():
        for line in (out / BAD_IMAGES).read_text(encoding="utf-8").splitlines():
            if line:
                path, _, reason = line.partition("\t")
                bad.append(BadImage(path, reason))
    return PreparedDataset(
        dataset=str(meta["dataset"]),
        class_names=list(class_names),
        train_images=loaded["train"][0],
        train_labels=loaded["train"][1],
        test_images=loaded["test"][0],
        test_labels=loaded["test"][1],
        root=Path(root) if root is not None else Path(meta["root"]),
        meta=meta,
        bad_images=bad,
        observed=observed,
    )
