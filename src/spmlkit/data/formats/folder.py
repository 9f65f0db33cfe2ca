"""The folder form of users' data: ``ROOT/<label>/<image>``, each folder an observed positive.

The commonest way people keep partially labelled images is one folder per tag: the search
query an image came from, the album it was filed in. That is single-positive data: the folder
is a label someone observed, and nothing is known about the other labels. This module reads
such a tree (docs/protocol.md, "Your own data"); :func:`~.user_prepare.read_folder` puts it
together with an optional test list.

- Class names are the folder names directly under ``ROOT``, sorted (the column order).
- An image is every file with an image ending (:data:`~.user_data.IMAGE_SUFFIXES`) anywhere
  below its label folder; other files are ignored and counted.
- One picture filed under several folders is ONE image with several labels. Two files are
  the same picture when they have the same path below their label folders (``cat/x.jpg``
  and ``dog/x.jpg``) or identical bytes (SHA-256), transitively; the file of the first
  label folder (sorted) stands for the picture.
- A label folder without any image is a problem (named); entries whose name starts with
  ``.`` and the ``spmlkit-prepared`` folder (where prepared folders go by default) are not
  labels; images directly in ``ROOT`` have no label and are ignored with a warning.
- An image reached through a symbolic link that leads out of ``ROOT`` is a problem: the
  prepared folder must hold data that lies under the folder the user named.
- Rows are sorted by path, so the same tree always gives the same rows and hence the same
  train/validation split.

A test tree has the same layout; there an image's folders are ALL its labels (every other
label is absent), and each folder must be a class of the training data.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .user_data import IMAGE_SUFFIXES, PREPARED_FOLDER, ImageList, count, is_image_name, link_outside

__all__ = ["TreeScan", "scan_tree", "tree_list"]

_EXAMPLES = 3


@dataclass
class TreeScan:
    """The files found under one tree: image files per label folder, and what was left out."""

    folder: Path
    files: dict[str, list[Path]] = field(default_factory=dict)
    ignored: list[Path] = field(default_factory=list)  # hidden files, dangling links, names without an image ending
    loose: list[Path] = field(default_factory=list)  # images directly in the tree's root: no label

    def all_files(self) -> list[Path]:
        """Every image file of every label folder."""
        return [path for files in self.files.values() for path in files]


@dataclass
class _Picture:
    """One picture: the file that stands for it, the label folders it was found in, all its files."""

    path: Path
    labels: list[str]
    files: list[Path]
    name_clash: bool  # same path below two label folders, but different bytes


def scan_tree(folder: Path, what: str, skip: list[Path], problems: list[str]) -> TreeScan:
    """Image files per label folder of ``folder``; an empty label folder is a problem.

    ``what`` ("training", "test") names the tree in messages; files under a folder of
    ``skip`` (a prepared folder written inside the tree) are not read.
    """
    scan = TreeScan(folder)
    for entry in sorted(folder.iterdir(), key=lambda p: p.name):
        if entry.name.startswith(".") or entry.name == PREPARED_FOLDER or _inside(entry, skip):
            continue
        if entry.is_dir():
            images: list[Path] = []
            others: list[Path] = []
            outside: list[Path] = []  # links out of the tree: problems, never read
            for path in sorted(entry.rglob("*")):
                if path.is_symlink() and not path.exists():  # a dangling link: counted, never silently lost
                    others.append(path)
                    continue
                if not path.is_file() or _inside(path, skip):
                    continue
                hidden = any(part.startswith(".") for part in path.relative_to(entry).parts)
                target = link_outside(path, folder) if is_image_name(path) and not hidden else None
                if target is not None:
                    outside.append(path)
                    problems.append(f"{path}: a link to {target}, outside the {what} folder {folder}; copy the image "
                                    "into the folder, or remove the link")
                    continue
                (images if is_image_name(path) and not hidden else others).append(path)
            scan.ignored += others
            if not images and not outside:
                verb = "is" if len(others) == 1 else "are"
                found = f" (only {count(len(others), 'file')} that {verb} not an image)" if others else ""
                problems.append(f"{entry}: the {what} folder of label {entry.name!r} holds no image{found}; put "
                                f"its images there (names ending in {', '.join(sorted(IMAGE_SUFFIXES))}) or remove "
                                "the folder")
            scan.files[entry.name] = images
        elif entry.is_file():
            (scan.loose if is_image_name(entry) else scan.ignored).append(entry)
    if not scan.files:
        problems.append(f"{folder} holds no label folder: put each {what} image in a folder named after its label, "
                        f"{folder}/<label>/<image>")
    return scan


def tree_list(
    scan: TreeScan,
    class_names: list[str],
    digests: dict[Path, str],
    *,
    test: bool,
    problems: list[str],
    notes: list[str],
    warnings: list[str],
) -> ImageList:
    """The images of a scanned tree with their label rows.

    Training (``test=False``): +1 for each folder a picture is filed in, 0 elsewhere (int8).
    Test: 1 for each folder, 0 elsewhere (uint8); a test folder that is not a class is a
    problem. ``digests`` are the content digests of size-colliding files
    (:func:`~.user_data.content_digests` over every list, so one hash per file).
    """
    what = "test" if test else "training"
    column = {name: j for j, name in enumerate(class_names)}
    if test:
        for label in sorted(set(scan.files) - set(column)):
            problems.append(f"{scan.folder / label}: test folder {label!r} is not a class of the training data "
                            f"(classes: {', '.join(class_names)}); a model cannot learn a label it never saw: "
                            "rename the folder to a class or remove it")
    pictures = _pictures(scan, digests)
    labels = np.zeros((len(pictures), len(class_names)), dtype=np.uint8 if test else np.int8)
    for i, picture in enumerate(pictures):
        labels[i, [column[label] for label in picture.labels if label in column]] = 1
    files = sum(len(f) for f in scan.files.values())
    multi = sum(1 for p in pictures if len(p.labels) > 1)
    notes.append(f"{count(files, what + ' image file')} in {count(len(scan.files), 'label folder')} under "
                 f"{scan.folder} gave {count(len(pictures), 'image')}; {multi} of them filed under more than one "
                 "folder (same path below the label folders, or identical bytes) carry one label per folder")
    if scan.ignored:
        notes.append(f"{count(len(scan.ignored), 'file')} under {scan.folder} ignored: hidden (a name starting with "
                     f"'.'), a dangling link, or not ending like an image ({', '.join(sorted(IMAGE_SUFFIXES))}); e.g. "
                     f"{_examples(scan.ignored, scan.folder)}")
    if scan.loose:
        warnings.append(f"{count(len(scan.loose), 'image')} directly in {scan.folder} ignored: an image needs a label "
                        f"folder ({scan.folder}/<label>/<image>); e.g. {_examples(scan.loose, scan.folder)}")
    clashes = [p for p in pictures if p.name_clash]
    if clashes:
        warnings.append(
            f"{count(len(clashes), what + ' image')} with the same file name under several label folders but different "
            "bytes; "
            f"each was taken as ONE image with all those labels (its file from the first folder), e.g. "
            f"{_examples([c.files[0] for c in clashes], scan.folder)}: rename the files if they are different pictures"
        )
    return ImageList(scan.folder, [p.path for p in pictures], [str(p.path) for p in pictures], labels)


def _pictures(scan: TreeScan, digests: dict[Path, str]) -> list[_Picture]:
    """The pictures of a tree: files with the same path below their label folders, or the same bytes, are one.

    A union-find over the files, keyed by relative name and by content digest, so that
    ``cat/x.jpg`` = ``dog/x.jpg`` and ``dog/x.jpg`` = ``bird/copy.jpg`` (same bytes) make one
    picture with three labels. Sorted by the path of the file that stands for each.
    """
    members = [(label, path) for label in sorted(scan.files) for path in scan.files[label]]
    parent = list(range(len(members)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    first: dict[tuple[str, str], int] = {}
    names: list[str] = []
    for i, (label, path) in enumerate(members):
        name = path.relative_to(scan.folder / label).as_posix()
        names.append(name)
        keys = [("name", name)] + ([("bytes", digests[path])] if path in digests else [])
        for key in keys:
            parent[find(i)] = find(first.setdefault(key, i))
    groups: dict[int, list[int]] = defaultdict(list)
    for i in range(len(members)):
        groups[find(i)].append(i)
    pictures = []
    for index in groups.values():
        by_name: dict[str, list[Path]] = defaultdict(list)
        for i in index:
            by_name[names[i]].append(members[i][1])
        # a file without a digest has a size no other file has, so it differs from its namesakes
        clash = any(len(paths) > 1 and (any(p not in digests for p in paths) or len({digests[p] for p in paths}) > 1)
                    for paths in by_name.values())
        pictures.append(_Picture(path=members[min(index)][1], labels=sorted({members[i][0] for i in index}),
                                 files=[members[i][1] for i in index], name_clash=clash))
    return sorted(pictures, key=lambda p: p.path.as_posix())


def _inside(path: Path, folders: list[Path]) -> bool:
    if not folders:
        return False
    resolved = path.resolve()
    return any(resolved == f or f in resolved.parents for f in folders)


def _examples(paths: list[Path], base: Path) -> str:
    shown = []
    for p in paths[:_EXAMPLES]:
        try:
            shown.append(p.relative_to(base).as_posix())
        except ValueError:
            shown.append(str(p))
    return ", ".join(shown) + (", ..." if len(paths) > _EXAMPLES else "")
