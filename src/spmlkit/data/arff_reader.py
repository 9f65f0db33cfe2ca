"""Multi-label ARFF files as MULAN writes them: a feature matrix and a 0/1 label matrix.

The parsing itself is liac-arff's (``import arff``), a maintained parser of Weka's format;
this module turns its output into spmlkit's arrays and decides what a multi-label reader must
(docs/protocol.md, "MULAN data sets"):

- **Which attributes are labels**: those the set's XML file names (``<labels><label
  name="..."/>``, read with :mod:`xml.etree`). Every other attribute is a feature, except the
  identifiers named by the caller (genbase's ``protein``: one value per protein, it identifies
  a row and says nothing a model could generalise from).
- **Label order**: the ARFF attributes' order, which is the order MULAN itself indexes labels
  in; the XML's order can differ (yeast's lists ``Class6`` before ``Class4``) and only names
  them.
- **Sparse and dense rows**: a file whose first row is ``{index value, ...}`` is read as
  coordinates (liac-arff's COO form); omitted entries are 0, as Weka defines them.
- **Nominal features**: a two-valued attribute becomes one 0/1 column (1 for ``1``/``YES``/
  ``TRUE`` when one of its values is that, else for its second declared value); one with more
  values is one-hot encoded, a column per declared value (``location=2``). Ordinal codes would
  tell a linear head that the categories are ordered and evenly spaced, which they are not
  (birds' ``location`` values are site numbers, flags' ``religion`` codes are names).

What a file may not do to the arrays (docs/protocol.md, "MULAN data sets"): a comment that
mentions ``@data`` does not start the data (the data starts where liac-arff starts it, and rows
are counted by the same rule); a missing value (``?``) is refused with the file, the count and
the first one's attribute and line, never read as 0 or NaN; a value outside float32's range is
refused rather than stored as infinity; text is UTF-8 (with or without a byte-order mark) or
UTF-16/32 with one, and anything else is named with its line; and the arrays a file declares
are measured before any is allocated, so a small file that declares a huge matrix is refused in
one line instead of exhausting memory.
"""

from __future__ import annotations

import codecs
import os
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = ["ArffTable", "read_label_names", "read_multilabel_arff"]

_TRUE_VALUES = ("1", "yes", "true")
_FLOAT32_MAX = float(np.finfo(np.float32).max)
#: byte-order marks spmlkit decodes by (the longer UTF-32 marks first: UTF-32-LE's starts with UTF-16-LE's)
_BOMS = ((codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"), (codecs.BOM_UTF8, "utf-8-sig"),
         (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"))


@dataclass(frozen=True)
class ArffTable:
    """One ARFF file: features (float32) and labels (uint8 0/1), with their names."""

    X: np.ndarray
    Y: np.ndarray
    feature_names: tuple[str, ...]
    label_names: tuple[str, ...]


def read_label_names(xml_path: str | Path) -> tuple[str, ...]:
    """The label names a MULAN ``<set>.xml`` lists, in its order (namespace or not)."""
    path = Path(xml_path)
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError as exc:
        raise ValueError(f"{path}: not a readable MULAN label file ({exc})") from None
    names = tuple(el.get("name") for el in root.iter() if el.tag.rsplit("}", 1)[-1] == "label")
    if not names or any(n is None for n in names):
        raise ValueError(f"{path}: expected <label name=\"...\"> entries")
    return names  # type: ignore[return-value]


def read_multilabel_arff(path: str | Path, label_names: tuple[str, ...] | list[str], *,
                         drop: tuple[str, ...] = ()) -> ArffTable:
    """Read ``path``; ``label_names`` (from the XML) pick the label attributes, ``drop`` the identifiers.

    Every refusal is a ``ValueError`` whose message starts with the file's path."""
    import arff

    path = Path(path)
    text = _decode(path)
    row_lines, first_row = _data_rows(text)
    sparse = first_row.startswith("{")
    try:
        parsed = arff.loads(text, encode_nominal=True, return_type=arff.COO if sparse else arff.DENSE)
    except (arff.ArffException, OverflowError) as exc:  # OverflowError: an integer attribute holding 1e400
        raise ValueError(f"{path}: not a readable ARFF file ({exc})") from None
    # liac-arff keeps a quoted name's escapes ('Swainson\\'s Thrush' keeps its backslash) where Weka, and
    # so the XML, reads the escaped character; an unquoted name keeps its backslash in both (delicious'
    # TAG_dise\\~no). A name is taken as the XML spells it, whichever of the two that is.
    wanted = set(label_names) | set(drop)
    attributes = [(_as_named(str(name), wanted), kind) for name, kind in parsed["attributes"]]
    names = [name for name, _ in attributes]
    missing = [n for n in (*label_names, *drop) if n not in names]
    if missing:
        raise ValueError(f"{path}: no attribute {missing[0]!r}, which the set's label file names; the ARFF and XML "
                         "files are from different sets or versions")
    labels = set(label_names)
    label_cols = [i for i, n in enumerate(names) if n in labels]
    feature_cols = [i for i, n in enumerate(names) if n not in labels and n not in drop]
    widths = [_width(path, names[i], attributes[i][1]) for i in feature_cols]
    rows = len(row_lines)
    _check_memory(path, rows, len(attributes), sum(widths), len(label_cols), sparse)
    columns = _Columns(parsed["data"], rows, len(attributes), sparse)
    _check_missing(path, columns, names, label_cols, feature_cols, row_lines)

    Y = np.empty((rows, len(label_cols)), dtype=np.uint8)
    for j, i in enumerate(label_cols):
        Y[:, j] = _label_column(path, names[i], attributes[i][1], columns.get(i), row_lines)
    X = np.zeros((rows, sum(widths)), dtype=np.float32)
    feature_names: list[str] = []
    at = 0
    for i, width in zip(feature_cols, widths):
        feature_names += _fill_feature(X[:, at:at + width], path, names[i], attributes[i][1], columns.get(i),
                                       row_lines)
        at += width
    return ArffTable(X, Y, tuple(feature_names), tuple(names[i] for i in label_cols))


# --------------------------------------------------------------------------- the text
def _decode(path: Path) -> str:
    """The file as text: UTF-8 (a byte-order mark is dropped), or UTF-16/32 when a byte-order mark
    says so. Weka reads ARFF in the platform's encoding, so Latin-1 files exist; they are named,
    not guessed at (a wrong guess changes attribute names, which must match the XML's)."""
    raw = path.read_bytes()
    encoding = next((enc for bom, enc in _BOMS if raw.startswith(bom)), None)
    if encoding is None and b"\x00" in raw[:4096]:
        raise ValueError(f"{path}: holds NUL bytes, so it is UTF-16 or UTF-32 text without a byte-order mark, or not "
                         "text at all; ARFF files are read as UTF-8: save it as UTF-8")
    try:
        return raw.decode(encoding or "utf-8")
    except UnicodeDecodeError as exc:
        if encoding not in (None, "utf-8-sig"):
            raise ValueError(f"{path}: starts with a byte-order mark of {encoding.upper()} but byte {exc.start} is not "
                             f"valid {encoding.upper()}; save it again as UTF-8") from None
        line = raw[:exc.start].count(b"\n") + 1
        raise ValueError(
            f"{path}: line {line} holds byte 0x{raw[exc.start]:02x}, which is not UTF-8 (ARFF files are read as "
            "UTF-8); a Latin-1 or Windows-1252 file must be converted first, e.g. `iconv -f latin1 -t utf-8 "
            f"{path.name} > converted.arff`") from None


def _data_rows(text: str) -> tuple[list[int], str]:
    """The line number (from 1) of every data row, and the first row's text, by liac-arff's own
    rules: the data starts at the first header line that begins with ``@data`` (a comment that
    mentions ``@data`` does not start it), and a data row is a line that is neither empty nor a
    ``%`` comment."""
    lines = text.replace("\r\n", "\n").split("\n")
    start = next((n for n, line in enumerate(lines) if line.strip(" \r\n").upper().startswith("@DATA")), len(lines))
    numbers = [n + 1 for n in range(start + 1, len(lines)) if (row := lines[n].strip()) and not row.startswith("%")]
    return numbers, (lines[numbers[0] - 1].strip() if numbers else "")


def _as_named(name: str, wanted: set[str]) -> str:
    if name in wanted:
        return name
    unescaped = re.sub(r"\\(.)", r"\1", name)
    return unescaped if unescaped in wanted else name


# --------------------------------------------------------------------------- sizes and values
def _width(path: Path, name: str, kind) -> int:
    """How many feature columns an attribute becomes (docs/protocol.md, "MULAN data sets")."""
    if not isinstance(kind, list):
        if str(kind).upper() not in ("NUMERIC", "REAL", "INTEGER"):
            raise ValueError(f"{path}: attribute {name!r} is of type {kind}, which is not a feature spmlkit can "
                             "train on (numeric or nominal)")
        return 1
    return 1 if len(kind) <= 2 else len(kind)


def available_memory() -> int | None:
    """Bytes of memory this machine can hand out now (Linux's ``MemAvailable``), None where unknown."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def _check_memory(path: Path, rows: int, attributes: int, feature_columns: int, labels: int, sparse: bool) -> None:
    """Refuse, before allocating, arrays the machine cannot hold: the dense matrix a file
    declares (rows x columns) can be far larger than the file, a sparse one above all."""
    need = rows * (feature_columns * 4 + labels) + (0 if sparse else rows * attributes * 8) + rows * 8
    free = available_memory()
    if free is not None and need > free:
        raise ValueError(f"{path}: its {rows:,} rows x {feature_columns:,} feature columns need {need / 2**30:.1f} "
                         f"GiB as dense arrays, more than the {free / 2**30:.1f} GiB of memory available; spmlkit "
                         "trains on dense features: use a machine with more memory, or fewer rows or attributes")


class _Columns:
    """One attribute's values at a time, as float64 with NaN for a missing value (``?``), from
    liac-arff's dense rows or its coordinates (omitted sparse entries are 0)."""

    def __init__(self, data, rows: int, attributes: int, sparse: bool):
        self.rows, self.sparse = rows, sparse
        if sparse:
            vals, rws, cols = data
            self.vals = np.asarray(vals, dtype=np.float64)  # None (a '?') becomes NaN
            self.rws, self.cols = np.asarray(rws, dtype=np.int64), np.asarray(cols, dtype=np.int64)
            order = np.argsort(self.cols, kind="stable")
            self.vals, self.rws, self.cols = self.vals[order], self.rws[order], self.cols[order]
            self.bounds = np.searchsorted(self.cols, np.arange(attributes + 1))
        else:
            self.matrix = np.asarray(data, dtype=np.float64).reshape(len(data), attributes)

    def get(self, i: int) -> np.ndarray:
        if not self.sparse:
            return self.matrix[:, i]
        column = np.zeros(self.rows, dtype=np.float64)
        lo, hi = self.bounds[i], self.bounds[i + 1]
        column[self.rws[lo:hi]] = self.vals[lo:hi]
        return column

    def missing(self) -> tuple[np.ndarray, np.ndarray]:
        """Rows and attributes of every missing value, in reading order."""
        if not self.sparse:
            return np.nonzero(np.isnan(self.matrix))
        at = np.flatnonzero(np.isnan(self.vals))
        order = np.lexsort((self.cols[at], self.rws[at]))
        return self.rws[at][order], self.cols[at][order]


def _check_missing(path: Path, columns: _Columns, names: list[str], label_cols: list[int], feature_cols: list[int],
                   row_lines: list[int]) -> None:
    """ARFF's ``?`` (or a ``NaN``) is refused, counted and located: spmlkit fills in no value and
    drops no row (docs/protocol.md, "MULAN data sets": any rule for that is the user's choice)."""
    rows, cols = columns.missing()
    if not len(rows):
        return
    parts = []
    for what, chosen in (("feature", feature_cols), ("label", label_cols)):
        hit = np.isin(cols, chosen)
        if hit.any():
            first = int(np.argmax(hit))
            parts.append(f"{int(hit.sum()):,} in {what}s (the first: {what} {names[cols[first]]!r} on line "
                         f"{row_lines[rows[first]]})")
    if not parts:  # only in identifiers that are dropped anyway
        return
    count = int(np.isin(cols, [*feature_cols, *label_cols]).sum())
    raise ValueError(f"{path}: {count:,} missing value{'s' if count != 1 else ''} ('?'): {', '.join(parts)}; spmlkit "
                     "fills in no value and drops no row: fill them in, or remove those rows, in a copy of the file")


def _label_column(path: Path, name: str, kind, codes: np.ndarray, row_lines: list[int]) -> np.ndarray:
    """A label attribute must be nominal ``{0,1}`` (or numeric 0/1): 1 where the label applies."""
    if isinstance(kind, list):
        declared = [str(v) for v in kind]
        if sorted(declared) != ["0", "1"]:
            raise ValueError(f"{path}: label {name!r} has values {declared}, expected {{0,1}}")
        return (np.asarray(declared)[codes.astype(np.int64)] == "1").astype(np.uint8)
    bad = ~np.isin(codes, (0, 1))
    if bad.any():
        first = int(np.argmax(bad))
        raise ValueError(f"{path}: label {name!r} holds {codes[first]:g} on line {row_lines[first]}; labels are 0 or 1")
    return codes.astype(np.uint8)


def _fill_feature(out: np.ndarray, path: Path, name: str, kind, codes: np.ndarray, row_lines: list[int]
                  ) -> list[str]:
    """Write one attribute's feature columns into ``out`` (zeros, ``[rows, width]``); their names."""
    if not isinstance(kind, list):
        bad = ~(np.abs(codes) <= _FLOAT32_MAX)  # infinite values too
        if bad.any():
            first = int(np.argmax(bad))
            raise ValueError(f"{path}: attribute {name!r} holds {codes[first]:g} on line {row_lines[first]}, outside "
                             f"the range of the 32-bit floats features are kept in (±{_FLOAT32_MAX:.3g}); rescale "
                             "that attribute in a copy of the file")
        out[:, 0] = codes
        return [name]
    declared = [str(v) for v in kind]
    index = codes.astype(np.int64)
    if len(declared) <= 2:
        lowered = [v.lower() for v in declared]
        on = next((i for i, v in enumerate(lowered) if v in _TRUE_VALUES), len(declared) - 1)
        out[:, 0] = index == on
        return [name]
    out[np.arange(len(index)), index] = 1.0
    return [f"{name}={v}" for v in declared]
