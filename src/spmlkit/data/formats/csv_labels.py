"""The CSV form of users' data: one row per image with the labels observed for it.

When the observed labels come from somewhere other than a folder tree (an annotation tool's
export, a search log, a spreadsheet), they fit in a table. This module reads such a file
(docs/protocol.md, "Your own data"); :func:`~.user_prepare.read_csv_labels` puts it
together with its images and an optional test list.

The file (``.csv``: comma-separated, ``.tsv``: tab-separated; UTF-8, a spreadsheet's BOM
accepted) starts with a header row naming its columns, in any order, case-insensitive:

- ``image``: the image's path relative to the images folder (``--images``), '/' separators;
- ``positives``: the labels observed present, separated by ``;`` (at least one per row);
- ``negatives`` (optional column): labels observed absent, separated by ``;`` (may be empty).

Every label not named on a row is unknown. The classes are every name of the positives
column, sorted, unless a classes file (one name per line; its order is the column order)
lists them; then a name outside it is an error. Row numbers in messages are the file's line
numbers, the header being row 1, as a spreadsheet or an editor shows them.

Without a classes file, a positives column of only ``0``, ``1`` and ``-1`` is a problem (label
values where names belong) and such names beside real ones a warning; an image that is a link
out of the images folder is a problem.

A problem never stops the reading: unknown labels, missing or unreadable files, an image on
two rows (the same path, or another path with identical bytes), a row without a positive, a
label both positive and negative, a malformed row, all are collected with their row numbers
so ``--check`` can list every one. A test file has the same columns; there the positives
column lists EVERY label of the image (it may be empty: nothing present), so every other
label is absent, and a negatives column, if any, must not contradict it.
"""

from __future__ import annotations

import csv
import difflib
import io
import posixpath
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .common import require_file
from .user_data import LABEL_SEPARATOR, ImageList, closest, link_outside

__all__ = ["COLUMNS", "DELIMITERS", "LabelRow", "check_labels", "existing_files", "lookalike_warnings", "read_classes",
           "read_rows", "rows_list", "value_name_checks"]

COLUMNS: tuple[str, ...] = ("image", "positives", "negatives")
"""The header names a labels file may use; ``negatives`` is optional."""

_REQUIRED = ("image", "positives")
_RARE = 2  # a label on this many rows or fewer may be a misspelling of a common one
DELIMITERS: dict[str, str] = {".csv": ",", ".tsv": "\t"}
"""Field delimiter by file ending."""


@dataclass(eq=False)  # rows are dictionary keys by identity: two rows are never "equal"
class LabelRow:
    """One data row: its line number, the normalised image path and its label names (in file order)."""

    number: int
    image: str
    positives: list[str]
    negatives: list[str]


def read_classes(path: Path, problems: list[str]) -> list[str]:
    """Class names of a classes file, one per line, in order; duplicates and bad names are problems."""
    require_file(path, "the classes file (--classes)", "It lists one class name per line.")
    try:
        lines = path.read_text(encoding="utf-8-sig").splitlines()
    except UnicodeDecodeError as err:
        problems.append(f"{path} is not UTF-8 text ({err}); save it as UTF-8")
        return []
    names: list[str] = []
    first: dict[str, int] = {}
    for number, line in enumerate(lines, start=1):
        name = line.strip()
        if not name:
            continue
        if LABEL_SEPARATOR in name:
            problems.append(f"{path} line {number}: class name {name!r} contains '{LABEL_SEPARATOR}', which "
                            "separates labels in a labels file; rename the class")
        elif name in first:
            problems.append(f"{path} line {number}: class {name!r} is already listed on line {first[name]}; list "
                            "each class once")
        else:
            first[name] = number
            names.append(name)
    if not names and not problems:
        problems.append(f"{path} lists no class name; write one class name per line")
    return names


def read_rows(path: Path, problems: list[str]) -> list[LabelRow]:
    """The data rows of a labels file; header, field-count, path and repeated-path problems are recorded.

    A row with a problem that leaves its content unreliable (too many fields, no image) is
    left out of the result; its problem is recorded, so nothing is written anyway.
    """
    delimiter = DELIMITERS.get(path.suffix.lower())
    if delimiter is None:
        problems.append(f"{path}: cannot tell the delimiter from the ending {path.suffix!r}; name the file .csv "
                        "(comma-separated) or .tsv (tab-separated)")
        return []
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as err:
        problems.append(f"{path} is not UTF-8 text ({err}); save it as UTF-8 (a spreadsheet's 'CSV UTF-8')")
        return []
    sep = "," if delimiter == "," else "<TAB>"
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    columns: dict[str, int] | None = None
    rows: list[LabelRow] = []
    first: dict[str, int] = {}
    records = 0
    try:
        for record in reader:
            number = reader.line_num
            if not any(cell.strip() for cell in record):
                continue  # a blank line is no row
            if columns is None:
                columns = _header(path, number, record, sep, problems)
                if columns is None:
                    return []
                continue
            records += 1
            row = _row(path, number, record, columns, sep, problems)
            if row is None:
                continue
            if row.image in first:
                problems.append(f"{path} row {number}: image {row.image!r} is already listed on row "
                                f"{first[row.image]}; give each image one row with all its labels")
                continue
            first[row.image] = number
            rows.append(row)
    except csv.Error as err:
        problems.append(f"{path} row {reader.line_num}: not valid {'CSV' if delimiter == ',' else 'TSV'} ({err}); "
                        "check the quotes on that row")
    if columns is None:
        problems.append(f"{path} is empty; its first row must be the header image{sep}positives[{sep}negatives]")
    elif not records:
        problems.append(f"{path} has a header but no image rows")
    return rows


def check_labels(rows: list[LabelRow], path: Path, class_names: list[str], source: str, problems: list[str], *,
                 test: bool) -> None:
    """Unknown names, a training row without positives, a label both positive and negative.

    ``source`` says where the class names come from (for the unknown-label message).
    """
    known = set(class_names)
    for row in rows:
        if not row.positives and not test:
            problems.append(f"{path} row {row.number}: no positive label for image {row.image!r}; every training "
                            f"image needs at least one (the positives column, names separated by '{LABEL_SEPARATOR}')")
        for column, names in (("positives", row.positives), ("negatives", row.negatives)):
            for name in names:
                if name not in known:
                    problems.append(f"{path} row {row.number}: unknown label {name!r} in the {column} column"
                                    f"{closest(name, class_names)}; the labels are those of {source}")
        for name in sorted(set(row.positives) & set(row.negatives)):
            problems.append(f"{path} row {row.number}: label {name!r} is both positive and negative; keep it in one "
                            "column")


def lookalike_warnings(rows: list[LabelRow], path: Path) -> list[str]:
    """A warning per rare positive label that looks like a common one ("cta" on one row, "cat" on 40).

    Without a classes file every name of the positives column is a class, so a misspelling
    silently becomes a class of its own with a row or two; this is where it would hide.
    """
    counts = Counter(name for row in rows for name in row.positives)
    warnings = []
    for name, n in sorted(counts.items()):
        if n > _RARE:
            continue
        common = [other for other, m in counts.items() if m > n and other != name]
        match = difflib.get_close_matches(name, common, n=1)
        if match:
            where = ", ".join(str(row.number) for row in rows if name in row.positives)
            warnings.append(f"label {name!r} is a positive on {n} row{'s' if n > 1 else ''} only ({path} row"
                            f"{'s' if n > 1 else ''} {where}) and looks like {match[0]!r} ({counts[match[0]]} rows): "
                            "a typo? It is a class of its own; list the classes in a --classes file to have "
                            "misspellings reported as errors")
    return warnings


_VALUE_NAMES = frozenset({"0", "1", "-1"})


def value_name_checks(rows: list[LabelRow], path: Path, problems: list[str], warnings: list[str]) -> None:
    """Names ``0``, ``1``, ``-1`` in the positives column: label values where label names belong.

    A table exported with one 0/1 column per label, squeezed into the positives column, reads as
    classes named "0" and "1"; a model would learn "the class called 1". When the column holds
    nothing else that is a problem; beside real names it is a warning. A classes file that
    lists such names (digits can be class names) says they are meant, and this check is skipped.
    """
    names = {name for row in rows for name in row.positives}
    values = sorted(names & _VALUE_NAMES, key=int)
    if not values:
        return
    shown = ", ".join(repr(v) for v in values)
    if names <= _VALUE_NAMES:
        problems.append(f"{path}: the positives column holds only {shown}: label values, not label names; write the "
                        f"names of the labels observed for each image (e.g. cat{LABEL_SEPARATOR}dog), or list the "
                        "classes in a --classes file if these are really their names")
    else:
        where = ", ".join(str(row.number) for row in rows if set(row.positives) & _VALUE_NAMES)
        warnings.append(f"{path}: the positives column names {shown} beside real label names (rows {where}); they look "
                        "like label values and became classes of their own: write label names there, or list the "
                        "classes in a --classes file")


def existing_files(rows: list[LabelRow], path: Path, folder: Path, problems: list[str]) -> dict[LabelRow, Path]:
    """The file of each row whose image exists (by row); a missing one is a problem naming the row."""
    found: dict[LabelRow, Path] = {}
    for row in rows:
        file = folder / row.image
        target = link_outside(file, folder) if file.is_file() else None
        if target is not None:
            problems.append(f"{path} row {row.number}: image {row.image!r} is a link to {target}, outside the images "
                            f"folder {folder}; copy the image into that folder, or pass a folder that holds it")
        elif file.is_file():
            found[row] = file
        else:
            what = "is a folder, not an image" if file.is_dir() else f"is not in {folder}"
            problems.append(f"{path} row {row.number}: image {row.image!r} {what}; fix the path or add the file")
    return found


def rows_list(
    rows: list[LabelRow],
    found: dict[LabelRow, Path],
    path: Path,
    folder: Path,
    class_names: list[str],
    digests: dict[Path, str],
    *,
    test: bool,
    problems: list[str],
) -> ImageList:
    """The rows whose image exists, with their label rows; two rows with identical bytes are a problem.

    Training (``test=False``): int8 +1 positives, -1 negatives, 0 unknown. Test: uint8 1 for
    the positives, 0 elsewhere. ``digests`` as in :func:`~.user_data.content_digests`.
    """
    column = {name: j for j, name in enumerate(class_names)}
    kept = [row for row in rows if row in found]
    labels = np.zeros((len(kept), len(class_names)), dtype=np.uint8 if test else np.int8)
    first: dict[str, LabelRow] = {}
    for i, row in enumerate(kept):
        if not test:
            labels[i, [column[n] for n in row.negatives if n in column]] = -1
        labels[i, [column[n] for n in row.positives if n in column]] = 1
        digest = digests.get(found[row])
        if digest is None:
            continue
        earlier = first.setdefault(digest, row)
        if earlier is not row:
            problems.append(f"{path} row {row.number}: image {row.image!r} has the same bytes as {earlier.image!r} "
                            f"(row {earlier.number}); it is the same picture: give it one row with all its labels")
    return ImageList(folder, [found[row] for row in kept], [f"{path} row {row.number} ({row.image})" for row in kept],
                     labels)


def _header(path: Path, number: int, record: list[str], sep: str, problems: list[str]) -> dict[str, int] | None:
    """Column name -> position, or None (with a problem) when a required column is missing."""
    names = [cell.strip().lower() for cell in record]
    if "image" not in names and "positives" not in names:
        problems.append(f"{path} row {number}: the first row must be the header image{sep}positives[{sep}negatives] "
                        f"naming the columns, found {sep.join(record)!r}")
        return None
    columns: dict[str, int] = {}
    for position, name in enumerate(names):
        if name not in COLUMNS:
            problems.append(f"{path} row {number}: unknown column {record[position].strip()!r}"
                            f"{closest(name, COLUMNS)}; the columns are image, positives and optionally negatives")
        elif name in columns:
            problems.append(f"{path} row {number}: column {name!r} appears twice in the header")
        else:
            columns[name] = position
    missing = [name for name in _REQUIRED if name not in columns]
    if missing:
        problems.append(f"{path} row {number}: the header lacks the column{'s' if len(missing) > 1 else ''} "
                        f"{' and '.join(missing)}; the columns are image, positives and optionally negatives")
        return None
    return columns


def _row(path: Path, number: int, record: list[str], columns: dict[str, int], sep: str,
         problems: list[str]) -> LabelRow | None:
    """One data row parsed, or None with a problem (a malformed row says nothing reliable)."""
    width = max(columns.values()) + 1
    needed = max(columns[name] for name in _REQUIRED) + 1
    if len(record) > width or len(record) < needed:
        hint = (f" (a '{sep}' inside a label list? separate labels with '{LABEL_SEPARATOR}', or quote the field)"
                if len(record) > width else "")
        problems.append(f"{path} row {number}: {len(record)} fields, but the header has {width}{hint}")
        return None
    cell = dict.fromkeys(COLUMNS, "")
    for name, position in columns.items():
        cell[name] = record[position] if position < len(record) else ""  # a missing trailing negatives cell
    image = cell["image"].strip()
    if not image:
        problems.append(f"{path} row {number}: the image column is empty; give the image's path")
        return None
    normal = posixpath.normpath(image)
    if posixpath.isabs(normal) or Path(image).is_absolute() or normal == ".." or normal.startswith("../"):
        problems.append(f"{path} row {number}: image {image!r} must be a path inside the images folder, relative "
                        "to it (e.g. photos/0001.jpg)")
        return None
    return LabelRow(number, normal, _names(cell["positives"]), _names(cell["negatives"]))


def _names(cell: str) -> list[str]:
    """The label names of a cell, stripped, empty ones (``a;;b``, a trailing ``;``) left out, each once."""
    return list(dict.fromkeys(name.strip() for name in cell.split(LABEL_SEPARATOR) if name.strip()))
