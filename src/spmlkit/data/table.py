"""A user's own table of features and observed labels, read into a feature folder (``spmlkit prepare table``).

Tabular data arrives as a CSV file or as numpy arrays, carrying per row the features and the
labels someone observed, never the full truth: the same situation as a user's pile of images
(docs/protocol.md, "Your own data"), with features in place of pixels. :func:`read_table`
reads such a table (and, optionally, a fully labelled test table) into a :class:`TableData`;
:func:`write_table` stores it as a feature folder (:mod:`spmlkit.data.feature_dir`, format 2:
``observation: given``), which every command that takes a data set then takes as it takes
Yeast: ``spmlkit train --features DIR``, ``spmlkit benchmark --dataset DIR``, a sweep.

The forms (docs/protocol.md, "Your own data", "A table of features"):

* **CSV** (``.csv`` comma-separated, ``.tsv`` tab-separated, UTF-8, a header row). The labels
  are either label columns named by ``label_columns`` (a cell is ``1`` for an observed positive,
  ``-1`` for an observed negative, ``0`` or empty for unknown) or a positives column (``positives``
  unless named otherwise; label names separated by ``;``) with an optional negatives column.
  Every other column is a feature and must hold a finite number in every row, except the
  columns named in ``ignore_columns`` (an id, a comment).
* **NPZ** (``numpy.savez``): ``X`` [N, D] features and ``Y`` [N, C] observed labels in {-1, 0,
  1}; optionally ``class_names`` [C], ``feature_names`` [D], and a test list as ``X_test`` and
  ``Y_test`` (0/1).

A test table (``test_table``, either form) is fully labelled: its label cells are ``0`` or ``1``
(a positives column lists *every* label of a row), its features the training table's, by name. The
training table's ignored columns may be absent from it (an id column is the training rows' own).

A number is written as people and spreadsheets write one in a CSV: ASCII digits, a sign, a
decimal point, an exponent (``-1.5e3``). Python's ``float`` also reads ``1_000`` and other
scripts' digits (full-width ``１２``); a cell like that is almost always text that happens to
parse (a code, a pasted label), so it is a problem naming its cell, not a number.

Reading is bounded before anything large is allocated (docs/your-data.md, "How large a table
may be"): a table may hold at most ``max_bytes`` of data (:data:`DEFAULT_MAX_BYTES`, 1 GB,
unless the caller says more: ``--max-table-gb``), counted as a CSV file's size or as what the
arrays of an ``.npz`` claim in their headers (read before their data), and an ``.npz`` may by
default expand at most :data:`MAX_EXPANSION` times its file's size (a few hundred bytes that
claim a terabyte, or a compressed file that inflates a thousand-fold, is not a table someone
saved). A CSV line is read at most :data:`MAX_LINE` characters at a time, so a file without
line breaks is refused instead of read whole.

Like the image readers, reading never stops at the first mistake: every problem (a cell that is
not a number, an unknown label, a missing column) goes into ``TableData.problems`` with its file,
row and column, so ``spmlkit prepare table --check`` lists them all; :func:`write_table` refuses a
table with problems and nothing is dropped silently.
"""

from __future__ import annotations

import csv
import math
import re
import zipfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..errors import InputError

__all__ = ["DEFAULT_MAX_BYTES", "MAX_EXPANSION", "MAX_LINE", "TableData", "TableError", "default_table_out",
           "read_table", "write_table", "TABLE_SUFFIXES"]

TABLE_SUFFIXES = (".csv", ".tsv", ".npz")
_SEPARATOR = ";"  # label names inside one cell, as in `spmlkit prepare csv`
_NPZ_TRAIN_KEYS = {"X", "Y", "class_names", "feature_names", "X_test", "Y_test"}
_NPZ_TEST_KEYS = {"X", "Y", "class_names", "feature_names"}
#: problems listed per kind before the rest are only counted (a table of a million bad cells is one mistake)
_SHOW = 20
#: the most data a table may hold unless the caller says more (``--max-table-gb``): a CSV file's
#: bytes, or what an .npz's arrays claim uncompressed. Reading a CSV holds each cell as a Python
#: string (about ten times the file), so 1 GB of CSV already asks for about 10 GB of memory
DEFAULT_MAX_BYTES = 1_000_000_000
#: how many times its file's size an .npz's arrays may claim, unless the caller gives a bound:
#: real features compress a few-fold (zeros of sparse ones perhaps fifty-fold), a file built to
#: inflate a thousand-fold
MAX_EXPANSION = 100
#: the longest CSV line read, in characters: a row of a million 20-digit columns is 21 million;
#: a longer line is a file without line breaks, refused before it is read whole
MAX_LINE = 64 * 2**20
#: a number as a CSV writes one: ASCII digits, sign, decimal point, exponent (``float`` also takes
#: ``1_000`` and other scripts' digits, which are text here)
_PLAIN_NUMBER = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


class TableError(InputError):
    """The table has problems; the message is the first one and how many more there are."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        more = len(self.problems) - 1
        super().__init__(self.problems[0] + (f" (and {more} more problem{'s' if more > 1 else ''}: spmlkit "
                                              "prepare table ... --check lists them all)" if more else ""))


@dataclass
class TableData:
    """A user's table as a feature folder holds it: features, observed labels, an optional test list."""

    source: Path
    class_names: list[str] = field(default_factory=list)
    feature_names: list[str] = field(default_factory=list)
    X_train: np.ndarray | None = None  # float32 [N, D]
    observed: np.ndarray | None = None  # int8 [N, C] in {-1, 0, 1}
    X_test: np.ndarray | None = None
    Y_test: np.ndarray | None = None  # uint8 [M, C], full labels
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def summary(self) -> str:
        """One line: rows, features, classes, what was observed, the test list."""
        if self.observed is None or self.X_train is None:
            return f"{self.source}: nothing read"
        pos, neg = int((self.observed == 1).sum()), int((self.observed == -1).sum())
        test = (f"{len(self.X_test)} fully labelled test rows" if self.X_test is not None
                else "no test set (no number on full labels will exist)")
        return (f"{len(self.X_train)} training rows, {self.X_train.shape[1]} features, {len(self.class_names)} "
                f"classes, {pos} observed positives and {neg} observed negatives; {test}")


def default_table_out(table: str | Path) -> Path:
    """``<table's folder>/spmlkit-prepared/<table's name>``: where ``prepare table`` writes without ``--out``."""
    path = Path(table).expanduser().resolve()
    return path.parent / "spmlkit-prepared" / path.stem


def read_table(table: str | Path, *, test_table: str | Path | None = None, label_columns: Sequence[str] = (),
               positives: str | None = None, negatives: str | None = None, classes: str | Path | None = None,
               ignore_columns: Sequence[str] = (), max_bytes: int | None = None) -> TableData:
    """Read ``table`` (and ``test_table``) into a :class:`TableData`, every problem collected.

    ``label_columns``, ``positives``, ``negatives`` and ``ignore_columns`` name CSV columns;
    ``classes`` is a file of class names, one per line, for a positives column (default: every
    name in it, sorted). ``max_bytes``: the most data each table may hold (module docstring);
    None: :data:`DEFAULT_MAX_BYTES`, and an .npz at most :data:`MAX_EXPANSION` times its size."""
    path = Path(table).expanduser()
    data = TableData(source=path)
    if max_bytes is not None and max_bytes < 1:
        raise ValueError(f"the bound on a table's size must be positive, got {max_bytes!r} bytes")
    if not _readable(path, "--table", data.problems) or not _within_bound(path, "--table", max_bytes, data.problems):
        return data
    _check_repeats(label_columns, ignore_columns, data.problems)
    class_list = _class_file(Path(classes).expanduser(), data.problems) if classes else None
    if path.suffix.lower() == ".npz":
        for given, flag in ((label_columns, "--label-columns"), (positives, "--positives"),
                            (negatives, "--negatives"), (classes, "--classes"), (ignore_columns, "--ignore-columns")):
            if given:
                data.problems.append(f"{flag} names columns of a CSV table, but {path} is a .npz file of arrays: its "
                                     "labels are the array Y and its class names the array class_names")
        train = _read_npz(path, data.problems, test=False, max_bytes=max_bytes)
    else:
        train = _read_csv(path, data.problems, test=False, label_columns=label_columns, positives=positives,
                          negatives=negatives, classes=class_list, ignore_columns=ignore_columns)
    if train is None:
        return data
    X, Y, names, features = train["X"], train["Y"], train["class_names"], train["feature_names"]
    data.X_train, data.observed, data.class_names, data.feature_names = X, Y.astype(np.int8), names, features
    if "X_test" in train:
        data.X_test, data.Y_test = train["X_test"], train["Y_test"]
    if test_table is not None:
        if data.X_test is not None:
            data.problems.append(f"{path} holds a test list (X_test, Y_test) and --test-table names another; give one")
        else:
            _add_test(data, Path(test_table).expanduser(), label_columns, positives, ignore_columns, max_bytes)
    if not data.problems:
        _notes(data)
    return data


def write_table(data: TableData, out: str | Path) -> Path:
    """Store ``data`` as a feature folder in ``out`` (refused, nothing written, if it has problems)."""
    from ..output_dir import TABLE, claim_output_dir, records_a_table
    from .feature_dir import is_feature_dir, write_feature_dir

    if data.problems:
        raise TableError(data.problems)
    out = Path(out)
    # an unmarked feature folder of an earlier spmlkit is a table's when it records one, never extract's features
    claim_output_dir(out, TABLE, option="--out", recognise=lambda p: is_feature_dir(p) and records_a_table(p))
    return write_feature_dir(out, X_train=data.X_train, observed=data.observed, X_test=data.X_test,
                             Y_test=data.Y_test, class_names=data.class_names,
                             recorded={"dataset": data.source.stem, "source": str(data.source.resolve()),
                                       "feature_names": data.feature_names})


# --------------------------------------------------------------------------- files


def _readable(path: Path, flag: str, problems: list[str]) -> bool:
    if not path.is_file():
        problems.append(f"{flag} {path}: no such file")
        return False
    if path.suffix.lower() not in TABLE_SUFFIXES:
        problems.append(f"{flag} {path}: a table is a .csv or .tsv file (a header row, one row per example) or a "
                        ".npz file of arrays (X, Y); got a {path.suffix or 'file without a suffix'}")
        return False
    return True


def _within_bound(path: Path, flag: str, max_bytes: int | None, problems: list[str]) -> bool:
    """A CSV file no larger than the bound (an .npz is bounded by what its arrays claim, when read)."""
    if path.suffix.lower() == ".npz":
        return True
    size, bound = path.stat().st_size, max_bytes or DEFAULT_MAX_BYTES
    if size > bound:
        problems.append(f"{flag} {path}: {size:,} bytes, more than the {_gb(bound)} a table may hold "
                        f"{'here' if max_bytes else 'by default'} (reading a CSV holds every cell as text, about ten "
                        f"times the file in memory); if the table is real, save it as .npz or raise the bound with "
                        f"--max-table-gb {_gb_needed(size)}")
        return False
    return True


def _gb(n: int) -> str:
    return f"{n / 1e9:g} GB"


def _gb_needed(n: int) -> str:
    """The smallest ``--max-table-gb`` (in tenths of a GB) that lets ``n`` bytes through."""
    return f"{math.ceil(n / 1e8) / 10:g}"


def _check_repeats(label_columns: Sequence[str], ignore_columns: Sequence[str], problems: list[str]) -> None:
    """A column named twice in one list: a label column twice would be two classes of one name,
    which every command reading the folder then refuses."""
    for names, flag in ((label_columns, "--label-columns"), (ignore_columns, "--ignore-columns")):
        twice = sorted(name for name, n in Counter(names).items() if n > 1)
        if twice:
            problems.append(f"{flag} names {', '.join(map(repr, twice))} twice; name each column once")


def _class_file(path: Path, problems: list[str]) -> list[str] | None:
    try:
        names = [line.strip() for line in path.read_text(encoding="utf-8-sig").splitlines() if line.strip()]
    except (OSError, UnicodeDecodeError) as exc:
        problems.append(f"--classes {path}: cannot be read ({exc}); give a UTF-8 text file, one class name a line")
        return None
    twice = sorted(n for n, count in Counter(names).items() if count > 1)
    if twice:
        problems.append(f"--classes {path} lists {', '.join(twice)} twice; each class once")
    if not names:
        problems.append(f"--classes {path} lists no class name; one a line")
    return names


def _read_npz(path: Path, problems: list[str], *, test: bool, max_bytes: int | None) -> dict[str, Any] | None:
    try:
        found = _bounded_npz(path, max_bytes)
    except _TooLarge as exc:
        problems.append(str(exc))
        return None
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError) as exc:
        first = (str(exc).splitlines() or [""])[0]
        problems.append(f"{path}: not a readable .npz file of arrays ({first}); save it with numpy.savez(file, X=..., "
                        "Y=...) (no object arrays)")
        return None
    allowed = _NPZ_TEST_KEYS if test else _NPZ_TRAIN_KEYS
    unknown = sorted(set(found) - allowed)
    if unknown:
        problems.append(f"{path}: unknown array(s) {', '.join(unknown)}; a {'test ' if test else ''}table holds "
                        f"{', '.join(sorted(allowed))}")
    missing = [k for k in ("X", "Y") if k not in found]
    if missing:
        problems.append(f"{path}: no array {' or '.join(missing)}; X holds the features [rows, features], Y the "
                        f"{'full 0/1' if test else 'observed'} labels [rows, classes]")
        return None
    before = len(problems)
    X = _npz_features(path, "X", found["X"], problems)
    Y = _npz_labels(path, "Y", found["Y"], problems, test=test)
    out: dict[str, Any] = {"X": X, "Y": Y}
    if X is not None and Y is not None and len(X) != len(Y):
        problems.append(f"{path}: X has {len(X)} rows but Y {len(Y)}; one label row per feature row")
    C = None if Y is None else Y.shape[1]
    out["class_names"] = _npz_names(path, "class_names", found.get("class_names"), C, "label", problems)
    out["named"] = "class_names" in found
    out["feature_names"] = _npz_names(path, "feature_names", found.get("feature_names"),
                                      None if X is None else X.shape[1], "feature", problems)
    if not test and ("X_test" in found or "Y_test" in found):
        if "X_test" not in found or "Y_test" not in found:
            problems.append(f"{path}: a test list needs both X_test and Y_test (its full 0/1 labels)")
        else:
            out["X_test"] = _npz_features(path, "X_test", found["X_test"], problems)
            out["Y_test"] = _npz_labels(path, "Y_test", found["Y_test"], problems, test=True)
            _check_test_shapes(path, out, problems)
    return None if len(problems) > before else out


class _TooLarge(Exception):
    """A table that claims or holds more than it may: an .npz's arrays over the bound, a CSV line
    without end (the message says the bound and the way out)."""


def _bounded_npz(path: Path, max_bytes: int | None) -> dict[str, np.ndarray]:
    """Every array of the .npz at ``path``, once the headers of all of them (read first, a few hundred
    bytes each) show that together they stay within the bound (module docstring) and the memory
    this machine has free. Each array is then read as its header claims, so a member that holds
    more bytes costs no more than its claim."""
    from .arff_reader import available_memory
    from .parsed_cache import npy_header

    size = path.stat().st_size
    with zipfile.ZipFile(path) as zf:
        claims: dict[str, tuple[zipfile.ZipInfo, tuple[int, ...], np.dtype]] = {}
        for info in zf.infolist():
            key = info.filename.removesuffix(".npy") if info.filename.endswith(".npy") else info.filename
            with zf.open(info) as fh:
                shape, dtype, _ = npy_header(fh)
            if dtype.hasobject:
                raise ValueError(f"its array {key} holds Python objects, which are not read (they would run code)")
            claims[key] = (info, shape, dtype)
        claimed = sum(math.prod(shape) * dtype.itemsize for _, shape, dtype in claims.values())
        largest = max(claims, key=lambda k: math.prod(claims[k][1]) * claims[k][2].itemsize, default=None)
        what = ("" if largest is None else
                f" ({largest}: {claims[largest][2]} of shape {claims[largest][1]})")
        if max_bytes is None and claimed > DEFAULT_MAX_BYTES:
            raise _TooLarge(f"{path}: its arrays claim {claimed:,} bytes{what}, more than the {_gb(DEFAULT_MAX_BYTES)} "
                            f"a table may hold by default; if the table is real, raise the bound with --max-table-gb "
                            f"{_gb_needed(claimed)}")
        if max_bytes is None and claimed > MAX_EXPANSION * max(size, 1):
            raise _TooLarge(f"{path}: its arrays claim {claimed:,} bytes{what}, {claimed / max(size, 1):,.0f} times "
                            f"the file's {size:,}; a table may expand at most {MAX_EXPANSION} times by default; if the "
                            f"table is real (zeros compress well), raise the bound with --max-table-gb "
                            f"{_gb_needed(claimed)}")
        if max_bytes is not None and claimed > max_bytes:
            raise _TooLarge(f"{path}: its arrays claim {claimed:,} bytes{what}, more than the --max-table-gb "
                            f"{max_bytes / 1e9:g} given; raise it to at least {_gb_needed(claimed)} if the table is "
                            "real")
        free = available_memory()
        if free is not None and 2 * claimed > free:  # the arrays and their float32 copy
            raise _TooLarge(f"{path}: its arrays claim {claimed:,} bytes{what}; reading them needs about "
                            f"{2 * claimed / 1e9:.1f} GB of memory, more than the {free / 1e9:.1f} GB available; use a "
                            "machine with more memory or fewer rows")
        found = {}
        for key, (info, _, _) in claims.items():
            with zf.open(info) as fh:
                found[key] = np.lib.format.read_array(fh, allow_pickle=False)
    return found


def _npz_features(path: Path, key: str, X: np.ndarray, problems: list[str]) -> np.ndarray | None:
    if X.dtype.kind not in "fiub" or X.ndim != 2 or 0 in X.shape:
        problems.append(f"{path}: {key} must be a 2-D array of numbers [rows, features] with at least one of each, "
                        f"found {X.dtype} of shape {X.shape}")
        return None
    X = X.astype(np.float32)
    bad = ~np.isfinite(X)
    if bad.any():
        r, c = np.argwhere(bad)[0]
        problems.append(f"{path}: {key} has {int(bad.sum())} entries that are NaN, infinite or too large for float32 "
                        f"(first at row {r}, column {c}); fill or drop them before preparing")
        return None
    return X


def _npz_labels(path: Path, key: str, Y: np.ndarray, problems: list[str], *, test: bool) -> np.ndarray | None:
    values = (0, 1) if test else (-1, 0, 1)
    if Y.dtype.kind not in "fiub" or Y.ndim != 2 or 0 in Y.shape:
        problems.append(f"{path}: {key} must be a 2-D array of numbers [rows, classes], found {Y.dtype} of shape "
                        f"{Y.shape}")
        return None
    bad = ~np.isin(Y, values)
    if bad.any():
        r, c = np.argwhere(bad)[0]
        what = ("0 or 1 (a test list is fully labelled)" if test
                else "1 (observed positive), -1 (observed negative) or 0 (unknown)")
        problems.append(f"{path}: {key} must hold {what}; found {Y[r, c].item()!r} at row {r}, column {c} "
                        f"({int(bad.sum())} such entries)")
        return None
    return Y.astype(np.uint8 if test else np.int8)


def _npz_names(path: Path, key: str, names: np.ndarray | None, count: int | None, word: str,
               problems: list[str]) -> list[str]:
    if count is None:
        return []
    if names is None:
        return [f"{word}{i}" for i in range(count)]
    if names.dtype.kind == "S":  # bytes (numpy.savez of a list of bytes): names in UTF-8, or a problem
        try:
            listed = [bytes(n).decode("utf-8") for n in names.ravel()]
        except UnicodeDecodeError as exc:
            problems.append(f"{path}: {key} holds bytes that are not UTF-8 text ({exc.object[:20]!r}); save the "
                            "names as text (str), e.g. numpy.array(['a', 'b'])")
            return []
    else:
        listed = [str(n) for n in np.asarray(names).ravel()]
    if names.dtype.kind not in "US" or len(listed) != count:
        problems.append(f"{path}: {key} must be {count} names (text), one per column, found {names.dtype} of "
                        f"{len(listed)}")
    elif len(set(listed)) != len(listed) or not all(listed):
        problems.append(f"{path}: {key} must name each column once, with a non-empty name")
    return listed


def _check_test_shapes(path: Path, out: dict[str, Any], problems: list[str]) -> None:
    X, Y, X_test, Y_test = out["X"], out["Y"], out.get("X_test"), out.get("Y_test")
    if X_test is None or Y_test is None or X is None or Y is None:
        return
    if len(X_test) != len(Y_test):
        problems.append(f"{path}: X_test has {len(X_test)} rows but Y_test {len(Y_test)}")
    if X_test.shape[1] != X.shape[1] or Y_test.shape[1] != Y.shape[1]:
        problems.append(f"{path}: the test list has {X_test.shape[1]} features and {Y_test.shape[1]} classes, the "
                        f"training list {X.shape[1]} and {Y.shape[1]}; both need the same columns")


def _read_csv(path: Path, problems: list[str], *, test: bool, label_columns: Sequence[str], positives: str | None,
              negatives: str | None, classes: list[str] | None, ignore_columns: Sequence[str],
              features: list[str] | None = None) -> dict[str, Any] | None:
    """A CSV table; ``features`` (a test table): the training table's feature columns, by name."""
    try:
        with path.open(newline="", encoding="utf-8-sig") as handle:
            rows = list(csv.reader(_bounded_lines(handle, path), delimiter="\t" if path.suffix.lower() == ".tsv"
                                   else ","))
    except _TooLarge as exc:
        problems.append(str(exc))
        return None
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        problems.append(f"{path}: cannot be read as a UTF-8 table ({exc})")
        return None
    if not rows or not any(c.strip() for c in rows[0]):
        problems.append(f"{path}: empty, or its first row (the header naming the columns) is empty")
        return None
    header = [c.strip() for c in rows[0]]
    body = [(i, r) for i, r in enumerate(rows[1:], start=2) if any(c.strip() for c in r)]  # row 1: the header
    before = len(problems)
    twice = sorted(c for c, n in Counter(header).items() if n > 1)  # one pass: a header of 50,000 columns
    if twice:
        problems.append(f"{path}: the header names column(s) {', '.join(map(repr, twice))} twice; name each once")
    if not body:
        problems.append(f"{path}: no rows below the header")
    for i, r in body:
        if len(r) != len(header):
            problems.append(f"{path} row {i}: {len(r)} cells, but the header names {len(header)} columns")
    if len(problems) > before:
        return None
    index = {name: k for k, name in enumerate(header)}
    for name in ignore_columns:
        if name not in index and features is None:  # a test table need not carry the training rows' ids
            problems.append(f"{path}: --ignore-columns names {name!r}, which is not a column (columns: "
                            f"{', '.join(header)})")
    if label_columns:
        label_spec = list(label_columns)
        missing = [c for c in label_spec if c not in index]
        if missing:
            problems.append(f"{path}: no label column {', '.join(map(repr, missing))} (columns: {', '.join(header)})")
            return None
        label_names, pos_col, neg_col = label_spec, None, None
        used = set(label_spec)
    else:
        pos_col = positives or ("positives" if "positives" in index else None)
        neg_col = negatives or ("negatives" if "negatives" in index and not test else None)
        if pos_col is None or pos_col not in index:
            problems.append(f"{path}: {'no column ' + repr(pos_col) if pos_col else 'no label columns'}; name the "
                            "label columns with --label-columns A,B,C (cells 1, -1, 0 or empty) or give a positives "
                            "column (--positives COLUMN: label names separated by ';')")
            return None
        if neg_col is not None and neg_col not in index:
            problems.append(f"{path}: --negatives names {neg_col!r}, which is not a column")
            return None
        if test and "negatives" in index and not label_columns:
            problems.append(f"{path}: a test table is fully labelled (its positives column lists every label of a "
                            "row, every other label is absent), so it has no negatives column; drop it")
        used = {pos_col} | ({neg_col} if neg_col else set())
        label_names = None
    both = [c for c in dict.fromkeys(ignore_columns) if c in used]
    if both and features is None:  # said once, for the training table
        problems.append(f"{path}: column(s) {', '.join(map(repr, both))} named both as labels and by "
                        "--ignore-columns; a column is either labels or ignored: drop it from one of the two")
        return None
    skip = used | set(ignore_columns)
    if features is None:
        feature_names = [c for c in header if c not in skip]
        if not feature_names:
            problems.append(f"{path}: no feature column: every column is a label or ignored")
            return None
    else:
        feature_names = features
        missing = [c for c in features if c not in index]
        known = set(features)
        extra = [c for c in header if c not in skip and c not in known]
        if missing:
            problems.append(f"{path}: the test table lacks the training table's feature column(s) "
                            f"{', '.join(map(repr, missing[:_SHOW]))}; it needs every one of them")
            return None
        if extra:
            problems.append(f"{path}: column(s) {', '.join(map(repr, extra[:_SHOW]))} are not features of the "
                            "training table; drop them or name them with --ignore-columns")
    X = _csv_features(path, body, [index[c] for c in feature_names], feature_names, problems)
    if label_names is not None:
        Y = _csv_label_columns(path, body, [index[c] for c in label_names], label_names, problems, test=test)
    else:
        Y, label_names = _csv_positives(path, body, index[pos_col], None if neg_col is None else index[neg_col],
                                        classes, problems, test=test, column=pos_col)
    if len(problems) > before:
        return None
    return {"X": X, "Y": Y, "class_names": label_names, "feature_names": feature_names}


def _bounded_lines(handle: Any, path: Path):
    """The lines of ``handle``, each read at most :data:`MAX_LINE` characters at a time: a longer
    line (a file without line breaks) is refused before it is read whole."""
    number = 0
    while True:
        line = handle.readline(MAX_LINE + 1)
        if not line:
            return
        number += 1
        if len(line) > MAX_LINE and line[-1] not in "\r\n":
            raise _TooLarge(f"{path} line {number}: more than {MAX_LINE:,} characters without a line break; a "
                            "table has one row a line (a file without line breaks is not one; a table of longer rows "
                            "is saved as .npz)")
        yield line


def _number(text: str) -> float | None:
    """``text`` as a number when it is written as one (:data:`_PLAIN_NUMBER`), else None."""
    if _PLAIN_NUMBER.fullmatch(text) is None:
        return None
    return float(text)


def _not_a_number(text: str) -> str:
    """Why a feature cell is not read as a number: the words for the problem's line."""
    try:
        value = float(text)
    except ValueError:
        return "is not a finite number"
    if math.isfinite(value) and _PLAIN_NUMBER.fullmatch(text) is None:  # 1_000, full-width digits
        return "is not a number as a CSV writes one (ASCII digits, '.', an exponent; no '_', no other scripts' digits)"
    return "is not a finite number"


def _csv_features(path: Path, body: list[tuple[int, list[str]]], columns: list[int], names: list[str],
                  problems: list[str]) -> np.ndarray:
    """The feature cells as float32; a column of text (an id, a name) is one problem, not one per row."""
    X = np.zeros((len(body), len(columns)), np.float32)
    bad: list[tuple[int, str, str]] = []
    for c, k in enumerate(columns):
        wrong = []
        for r, (i, row) in enumerate(body):
            value = _number(row[k].strip())
            if value is None or not math.isfinite(value) or not math.isfinite(np.float32(value)):
                wrong.append((i, names[c], row[k].strip()))
            else:
                X[r, c] = value
        if wrong and len(wrong) == len(body) and len(body) > 1:
            problems.append(f"{path}: column {names[c]!r} holds no number at all ({wrong[0][2]!r} in row "
                            f"{wrong[0][0]}); a column that is not a feature (an id, a name) is named with "
                            f"--ignore-columns {names[c]}")
        else:
            bad += wrong
    for i, name, text in bad[:_SHOW]:
        problems.append(f"{path} row {i}, column {name!r}: {text!r} {_not_a_number(text)}; every feature cell "
                        "needs one (fill or drop the row)")
    if len(bad) > _SHOW:
        problems.append(f"{path}: {len(bad) - _SHOW} more feature cells that are not finite numbers")
    return X


def _csv_label_columns(path: Path, body: list[tuple[int, list[str]]], columns: list[int], names: list[str],
                       problems: list[str], *, test: bool) -> np.ndarray:
    allowed = {1.0: 1, 0.0: 0} if test else {1.0: 1, 0.0: 0, -1.0: -1}
    Y = np.zeros((len(body), len(columns)), np.int8)
    bad = 0
    for r, (i, row) in enumerate(body):
        for c, k in enumerate(columns):
            text = row[k].strip()
            number = _number(text)
            if text == "" and not test:
                value = 0  # an empty cell of a training table: unknown
            else:
                value = None if number is None else allowed.get(number)
            if value is None:
                bad += 1
                if bad <= _SHOW:
                    what = ("0 or 1: a test table is fully labelled" if test
                            else "1 (observed positive), -1 (observed negative), 0 or empty (unknown)")
                    problems.append(f"{path} row {i}, label column {names[c]!r}: {text!r}; a label cell is {what}")
                continue
            Y[r, c] = value
    if bad > _SHOW:
        problems.append(f"{path}: {bad - _SHOW} more label cells that are not label values")
    return Y


def _csv_positives(path: Path, body: list[tuple[int, list[str]]], pos: int, neg: int | None,
                   classes: list[str] | None, problems: list[str], *, test: bool, column: str
                   ) -> tuple[np.ndarray, list[str]]:
    def names(text: str) -> list[str]:
        return [n.strip() for n in text.split(_SEPARATOR) if n.strip()]

    rows = [(i, names(row[pos]), names(row[neg]) if neg is not None else []) for i, row in body]
    if classes is None:
        classes = sorted({n for _, p, _ in rows for n in p})
        if not classes:
            problems.append(f"{path}: the column {column!r} names no label at all; it lists each row's observed "
                            "positives, separated by ';'")
            return np.zeros((len(rows), 0), np.int8), []
    where = {n: c for c, n in enumerate(classes)}
    Y = np.zeros((len(rows), len(classes)), np.int8)
    for r, (i, p, n) in enumerate(rows):
        unknown = [x for x in p + n if x not in where]
        if unknown:
            problems.append(f"{path} row {i}: unknown label(s) {', '.join(map(repr, unknown))}"
                            + (f" (classes: {', '.join(classes[:_SHOW])})" if len(classes) else ""))
            continue
        both = sorted(set(p) & set(n))
        if both:
            problems.append(f"{path} row {i}: {', '.join(map(repr, both))} both positive and negative; keep one")
            continue
        Y[r, [where[x] for x in p]] = 1
        Y[r, [where[x] for x in n]] = -1
    return (Y.astype(np.uint8) if test else Y), list(classes)


def _add_test(data: TableData, path: Path, label_columns: Sequence[str], positives: str | None,
              ignore_columns: Sequence[str], max_bytes: int | None) -> None:
    """The fully labelled test table: the training table's features (by name) and classes."""
    if not _readable(path, "--test-table", data.problems) or not _within_bound(path, "--test-table", max_bytes,
                                                                                data.problems):
        return
    if path.suffix.lower() == ".npz":
        test = _read_npz(path, data.problems, test=True, max_bytes=max_bytes)
        if test is None:
            return
        if test["X"].shape[1] != data.X_train.shape[1]:
            data.problems.append(f"{path}: X has {test['X'].shape[1]} features, the training table "
                                 f"{data.X_train.shape[1]}; both need the same features")
            return
        named = test["class_names"] if test["named"] else data.class_names
        if list(named) != list(data.class_names):
            data.problems.append(f"{path}: class_names {named[:5]} differ from the training table's "
                                 f"{data.class_names[:5]}; the test labels need the same columns in the same order")
            return
        data.X_test, data.Y_test = test["X"], test["Y"].astype(np.uint8)
        return
    test = _read_csv(path, data.problems, test=True, label_columns=label_columns, positives=positives,
                     negatives=None, classes=data.class_names, ignore_columns=ignore_columns,
                     features=data.feature_names)
    if test is not None:
        data.X_test, data.Y_test = test["X"], test["Y"].astype(np.uint8)


def _notes(data: TableData) -> None:
    """What was read, and what deserves a look (not mistakes)."""
    obs = data.observed
    data.notes.append(f"table {data.source}: {len(obs)} rows, {len(data.feature_names)} feature columns, "
                      f"{len(data.class_names)} classes; labels kept as observed (observation 'given')")
    none = int((~(obs == 1).any(axis=1)).sum())
    if none:
        data.warnings.append(f"{none} of the {len(obs)} training rows have no observed positive; they train as rows "
                             "whose every label is unknown (or observed negative)")
    empty = [n for n, col in zip(data.class_names, (obs == 1).T) if not col.any()]
    if empty:
        data.warnings.append(f"class(es) without any observed positive: {', '.join(empty[:_SHOW])}; no method can "
                             "learn them from these labels")
    if data.Y_test is not None:
        absent = [n for n, col in zip(data.class_names, data.Y_test.T) if not col.any()]
        if absent:
            data.warnings.append(f"class(es) without a positive in the test table: {', '.join(absent[:_SHOW])}; "
                                 "their test AP is 0 and counts in the mAP")
