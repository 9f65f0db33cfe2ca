"""Users' own images into the prepared form: a training list of either form, a test list of either form.

``spmlkit prepare folder`` and ``spmlkit prepare csv`` (docs/protocol.md, "Your own data")
read the training images in one form (a folder per label, :mod:`.folder`; or a labels file,
:mod:`.csv_labels`) and optionally a fully labelled test list in either form: a test tree
(``test_root``: an image's labels are all the folders it appears in) or a test labels file
(``test_labels``: its positives column lists every label of an image; paths relative to
``test_images``, by default the folder of the training images). People often collect
training images one way (search queries, albums) and annotate a test set another way
(a spreadsheet), so any combination is accepted.

``read_folder`` / ``read_csv_labels`` collect every problem without writing anything (what
``--check`` prints); ``prepare_folder`` / ``prepare_csv`` write the prepared folder, or raise
:class:`~.user_data.UserDataError` when there is any problem.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .check import ProgressCallback
from .common import existing_root, require_file
from .csv_labels import (LabelRow, check_labels, existing_files, lookalike_warnings, read_classes, read_rows, rows_list,
                         value_name_checks)
from .folder import TreeScan, scan_tree, tree_list
from .prepared import PreparedDataset, check_prepared_dir
from .user_data import (
    LABEL_SEPARATOR,
    ImageList,
    UserData,
    assemble,
    content_digests,
    count,
    default_user_out,
    write_user_data,
)

__all__ = ["prepare_csv", "prepare_folder", "read_csv_labels", "read_folder"]

_FOLDER_HINT = ("It must hold one folder per label with that label's images inside: DIR/<label>/<image> "
                "(pass that DIR with --root).")
_IMAGES_HINT = "Pass with --images the folder that the image paths of the labels file are relative to."


def read_folder(
    root: str | Path,
    *,
    test_root: str | Path | None = None,
    test_labels: str | Path | None = None,
    test_images: str | Path | None = None,
    out: str | Path | None = None,
    progress: ProgressCallback | None = None,
) -> UserData:
    """Read ``root`` in the folder form (and a test list); every problem found is in ``.problems``.

    ``out`` is the prepared folder about to be written: when it lies inside a tree its files
    are skipped, so preparing twice reads the same data; a folder there that holds files
    spmlkit did not write is refused at once (:func:`~.prepared.check_prepared_dir`). ``test_images`` defaults to
    ``root``. ``progress(done, total)`` follows the PIL check of every image. A folder or
    file that does not exist raises at once (:class:`~.common.DatasetNotFoundError`), as do
    contradictory options (ValueError): there is nothing else to report then.
    """
    root = existing_root(root, _FOLDER_HINT)
    if out is not None:
        check_prepared_dir(out)  # a folder of someone else's files: refused before any image is read
    problems: list[str] = []
    notes: list[str] = []
    warnings: list[str] = []
    scan = scan_tree(root, "training", _skip(out, root), problems)
    class_names = sorted(scan.files)
    notes += [(f"folder form: each image's observed positives are the label folders it is filed in under {root}; "
               "every other label is unknown (observation 'given')"),
              "classes: the label folder names, sorted"]
    test = _open_test(class_names, f"the label folders of {root}", test_root=test_root, test_labels=test_labels,
                      test_images=test_images, default_images=root, train_tree=root, out=out, problems=problems)
    digests = content_digests([*scan.all_files(), *test.files()])
    train = tree_list(scan, class_names, digests, test=False, problems=problems, notes=notes, warnings=warnings)
    test_list = test.build(class_names, digests, problems, notes, warnings)
    return assemble("folder", class_names, train, test_list, digests=digests, problems=problems, notes=notes,
                    warnings=warnings, options={"root": str(root), **test.options}, progress=progress)


def read_csv_labels(
    labels: str | Path,
    images: str | Path,
    *,
    classes: str | Path | None = None,
    test_root: str | Path | None = None,
    test_labels: str | Path | None = None,
    test_images: str | Path | None = None,
    out: str | Path | None = None,
    progress: ProgressCallback | None = None,
) -> UserData:
    """Read a labels file and its images (and a test list); every problem found is in ``.problems``.

    ``images`` is the folder the paths of ``labels`` are relative to; ``classes`` an optional
    file of class names, one per line (default: every name of the positives column, sorted).
    Test options and errors raised at once as in :func:`read_folder`.
    """
    labels_path = require_file(Path(labels).expanduser(), "the labels file (--labels)",
                               "It lists one image per row: image,positives[,negatives].")
    image_dir = existing_root(images, _IMAGES_HINT)
    if out is not None:
        check_prepared_dir(out)
    problems: list[str] = []
    notes: list[str] = []
    warnings: list[str] = []
    class_list = read_classes(Path(classes).expanduser(), problems) if classes is not None else None
    rows = read_rows(labels_path, problems)
    if class_list is not None:
        class_names, source = class_list, f"the classes file {classes}"
    else:
        class_names = sorted({name for row in rows for name in row.positives})
        source = f"the positives column of {labels_path}"
        warnings += lookalike_warnings(rows, labels_path)
        value_name_checks(rows, labels_path, problems, warnings)
    check_labels(rows, labels_path, class_names, source, problems, test=False)
    found = existing_files(rows, labels_path, image_dir, problems)
    notes += [(f"CSV form: {labels_path} lists each training image (relative to {image_dir}) with its observed "
               f"labels (names separated by '{LABEL_SEPARATOR}'); every label not named on a row is unknown "
               "(observation 'given')"),
              (f"classes: the names in {classes}, in that order" if class_list is not None
               else "classes: every name in the positives column, sorted")]
    test = _open_test(class_names, source, test_root=test_root, test_labels=test_labels, test_images=test_images,
                      default_images=image_dir, train_tree=None, out=out, problems=problems)
    digests = content_digests([*found.values(), *test.files()])
    train = rows_list(rows, found, labels_path, image_dir, class_names, digests, test=False, problems=problems)
    test_list = test.build(class_names, digests, problems, notes, warnings)
    options = {"labels": str(labels_path.resolve()), "images": str(image_dir),
               "classes": None if classes is None else str(Path(classes).expanduser().resolve()), **test.options}
    return assemble("csv", class_names, train, test_list, digests=digests, problems=problems, notes=notes,
                    warnings=warnings, options=options, progress=progress)


def prepare_folder(
    root: str | Path,
    out: str | Path | None = None,
    *,
    test_root: str | Path | None = None,
    test_labels: str | Path | None = None,
    test_images: str | Path | None = None,
    progress: ProgressCallback | None = None,
) -> PreparedDataset:
    """Read ``root`` in the folder form (:func:`read_folder`) and write the prepared folder ``out``.

    ``out`` defaults to ``<root>/spmlkit-prepared/folder``. Raises
    :class:`~.user_data.UserDataError` (the first problem and how many more there are) if
    anything is wrong; nothing is written then.
    """
    out = default_user_out(existing_root(root, _FOLDER_HINT), "folder") if out is None else Path(out)
    data = read_folder(root, test_root=test_root, test_labels=test_labels, test_images=test_images, out=out,
                       progress=progress)
    return write_user_data(data, out)


def prepare_csv(
    labels: str | Path,
    images: str | Path,
    out: str | Path | None = None,
    *,
    classes: str | Path | None = None,
    test_root: str | Path | None = None,
    test_labels: str | Path | None = None,
    test_images: str | Path | None = None,
    progress: ProgressCallback | None = None,
) -> PreparedDataset:
    """Read a labels file (:func:`read_csv_labels`) and write the prepared folder ``out``.

    ``out`` defaults to ``<images>/spmlkit-prepared/csv``. Raises
    :class:`~.user_data.UserDataError` (the first problem with its row number, and how many
    more there are) if anything is wrong; nothing is written then.
    """
    out = default_user_out(existing_root(images, _IMAGES_HINT), "csv") if out is None else Path(out)
    data = read_csv_labels(labels, images, classes=classes, test_root=test_root, test_labels=test_labels,
                           test_images=test_images, out=out, progress=progress)
    return write_user_data(data, out)


@dataclass
class _TestSource:
    """A test list opened but not yet built: its files are needed first, for one content hash per file."""

    scan: TreeScan | None = None
    rows: list[LabelRow] = field(default_factory=list)
    found: dict[LabelRow, Path] = field(default_factory=dict)
    labels_path: Path | None = None
    folder: Path | None = None
    options: dict[str, Any] = field(default_factory=dict)
    note: str = ""  # what the test list is, for meta.json and the command's report

    def files(self) -> list[Path]:
        """Every image file the test list names (before pictures are merged)."""
        return self.scan.all_files() if self.scan is not None else list(self.found.values())

    def build(self, class_names: list[str], digests: dict[Path, str], problems: list[str], notes: list[str],
              warnings: list[str]) -> ImageList | None:
        """The test images with full 0/1 labels, or None when there is no test list."""
        if self.note:
            notes.append(self.note)
        if self.scan is not None:
            return tree_list(self.scan, class_names, digests, test=True, problems=problems, notes=notes,
                             warnings=warnings)
        if self.labels_path is not None and self.folder is not None:
            test = rows_list(self.rows, self.found, self.labels_path, self.folder, class_names, digests, test=True,
                             problems=problems)
            empty = int((test.labels.sum(axis=1) == 0).sum()) if len(test.files) else 0
            if empty:
                notes.append(f"{count(empty, 'test image')} without a positive label (every label absent)")
            return test
        return None


def _open_test(
    class_names: list[str],
    source: str,
    *,
    test_root: str | Path | None,
    test_labels: str | Path | None,
    test_images: str | Path | None,
    default_images: Path,
    train_tree: Path | None,
    out: str | Path | None,
    problems: list[str],
) -> _TestSource:
    """Open the test list the options name (a tree, a labels file, or none) and read its files.

    ``train_tree`` is the training tree of the folder form: a test tree inside it (or
    around it) would be read twice, once as a label folder, so overlapping trees are a problem.
    """
    if test_root is not None and test_labels is not None:
        raise ValueError("give one test set: --test-root (a folder per label) or --test-labels (a labels file), "
                         "not both")
    if test_images is not None and test_labels is None:
        raise ValueError("--test-images is the folder of a test labels file, but no --test-labels was given; add "
                         "--test-labels FILE or drop --test-images")
    if test_root is not None:
        folder = existing_root(test_root, _FOLDER_HINT.replace("--root", "--test-root"))
        options = {"test_root": str(folder)}
        if train_tree is not None and (folder == train_tree or train_tree in folder.parents
                                       or folder in train_tree.parents):
            problems.append(f"the test folder {folder} and the training folder {train_tree} overlap (one is inside "
                            "the other, so test images would be read as training images or as a label): keep them "
                            "side by side, e.g. photos/train and photos/test")
            return _TestSource(options=options)
        note = (f"test set from {folder}: an image's true labels are all the folders it appears in, every other "
                "label is absent")
        return _TestSource(scan=scan_tree(folder, "test", _skip(out, folder), problems), options=options, note=note)
    if test_labels is not None:
        labels_path = require_file(Path(test_labels).expanduser(), "the test labels file (--test-labels)",
                                   "It lists one image per row: image,positives[,negatives].")
        folder = existing_root(test_images, _IMAGES_HINT.replace("--images", "--test-images")) \
            if test_images is not None else default_images
        rows = read_rows(labels_path, problems)
        check_labels(rows, labels_path, class_names, source, problems, test=True)
        note = (f"test set from {labels_path} (images relative to {folder}): the positives column lists every label "
                "of an image, every other label is absent")
        return _TestSource(rows=rows, found=existing_files(rows, labels_path, folder, problems),
                           labels_path=labels_path, folder=folder,
                           options={"test_labels": str(labels_path.resolve()), "test_images": str(folder)}, note=note)
    return _TestSource()


def _skip(out: str | Path | None, tree: Path) -> list[Path]:
    """``[out]`` when the prepared folder about to be written lies inside ``tree``: it is not data."""
    if out is None:
        return []
    target = Path(out).expanduser().resolve()
    return [target] if tree in target.parents else []
