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
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = ["ArffTable", "read_label_names", "read_multilabel_arff"]

_TRUE_VALUES = ("1", "yes", "true")


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
        raise ValueError(f"{path}: not a readable MULAN label file ({exc}); download it again") from None
    names = tuple(el.get("name") for el in root.iter() if el.tag.rsplit("}", 1)[-1] == "label")
    if not names or any(n is None for n in names):
        raise ValueError(f"{path}: expected <label name=\"...\"> entries; download the file again")
    return names  # type: ignore[return-value]


def read_multilabel_arff(path: str | Path, label_names: tuple[str, ...] | list[str], *,
                         drop: tuple[str, ...] = ()) -> ArffTable:
    """Read ``path``; ``label_names`` (from the XML) pick the label attributes, ``drop`` the identifiers."""
    import arff

    path = Path(path)
    text = path.read_text(encoding="utf-8")
    sparse = _first_data_line(text).startswith("{")
    try:
        parsed = arff.loads(text, encode_nominal=True, return_type=arff.COO if sparse else arff.DENSE)
    except arff.ArffException as exc:
        raise ValueError(f"{path}: not a readable ARFF file ({exc}); download it again") from None
    # liac-arff keeps a quoted name's escapes ('Swainson\\'s Thrush' keeps its backslash) where Weka, and
    # so the XML, reads the escaped character; an unquoted name keeps its backslash in both (delicious'
    # TAG_dise\\~no). A name is taken as the XML spells it, whichever of the two that is.
    wanted = set(label_names) | set(drop)
    attributes = [(_as_named(str(name), wanted), kind) for name, kind in parsed["attributes"]]
    names = [name for name, _ in attributes]
    missing = [n for n in (*label_names, *drop) if n not in names]
    if missing:
        raise ValueError(f"{path}: no attribute {missing[0]!r}, which the set's label file names; the ARFF and XML "
                         "files are from different sets or versions, download both again")
    values = _as_matrix(path, parsed["data"], len(attributes), _count_rows(text), sparse)
    labels = set(label_names)
    label_cols = [i for i, n in enumerate(names) if n in labels]
    Y = np.empty((len(values), len(label_cols)), dtype=np.uint8)
    for j, i in enumerate(label_cols):
        Y[:, j] = _label_column(path, names[i], attributes[i][1], values[:, i])
    columns, feature_names = [], []
    for i, (name, kind) in enumerate(attributes):
        if name in labels or name in drop:
            continue
        cols, col_names = _feature_columns(path, name, kind, values[:, i])
        columns += cols
        feature_names += col_names
    X = np.stack(columns, axis=1).astype(np.float32) if columns else np.zeros((len(values), 0), np.float32)
    return ArffTable(X, Y, tuple(feature_names), tuple(names[i] for i in label_cols))


def _as_named(name: str, wanted: set[str]) -> str:
    if name in wanted:
        return name
    unescaped = re.sub(r"\\(.)", r"\1", name)
    return unescaped if unescaped in wanted else name


def _first_data_line(text: str) -> str:
    at = text.lower().find("@data")
    if at < 0:
        return ""
    for line in text[at + 5:].splitlines():
        line = line.strip()
        if line and not line.startswith("%"):
            return line
    return ""


def _count_rows(text: str) -> int:
    """Rows after ``@data`` (a sparse row of zeros, ``{}``, is a row liac-arff's COO form cannot show)."""
    at = text.lower().find("@data")
    return sum(1 for line in text[at + 5:].splitlines() if line.strip() and not line.lstrip().startswith("%"))


def _as_matrix(path: Path, data, num_attributes: int, num_rows: int, sparse: bool) -> np.ndarray:
    if sparse:
        vals, rows, cols = data
        matrix = np.zeros((num_rows, num_attributes), dtype=np.float64)
        try:
            matrix[np.asarray(rows, dtype=np.int64), np.asarray(cols, dtype=np.int64)] = np.asarray(vals, np.float64)
        except (TypeError, ValueError):
            raise ValueError(f"{path}: a value is missing ('?') or not a number; spmlkit does not impute values, "
                             "fill them in or remove those rows") from None
        return matrix
    try:
        matrix = np.asarray(data, dtype=np.float64).reshape(len(data), num_attributes)
    except (TypeError, ValueError):
        raise ValueError(f"{path}: a value is missing ('?') or not a number; spmlkit does not impute values, "
                         "fill them in or remove those rows") from None
    return matrix


def _label_column(path: Path, name: str, kind, codes: np.ndarray) -> np.ndarray:
    """A label attribute must be nominal ``{0,1}`` (or numeric 0/1): 1 where the label applies."""
    if isinstance(kind, list):
        declared = [str(v) for v in kind]
        if sorted(declared) != ["0", "1"]:
            raise ValueError(f"{path}: label {name!r} has values {declared}, expected {{0,1}}")
        return (np.asarray(declared)[codes.astype(np.int64)] == "1").astype(np.uint8)
    if not np.isin(codes, (0, 1)).all():
        raise ValueError(f"{path}: label {name!r} holds values other than 0 and 1")
    return codes.astype(np.uint8)


def _feature_columns(path: Path, name: str, kind, codes: np.ndarray) -> tuple[list[np.ndarray], list[str]]:
    if not isinstance(kind, list):
        if str(kind).upper() not in ("NUMERIC", "REAL", "INTEGER"):
            raise ValueError(f"{path}: attribute {name!r} is of type {kind}, which is not a feature spmlkit can "
                             "train on (numeric or nominal)")
        return [codes], [name]
    declared = [str(v) for v in kind]
    index = codes.astype(np.int64)
    if len(declared) <= 2:
        lowered = [v.lower() for v in declared]
        on = next((i for i, v in enumerate(lowered) if v in _TRUE_VALUES), len(declared) - 1)
        return [(index == on).astype(np.float64)], [name]
    return [(index == k).astype(np.float64) for k in range(len(declared))], [f"{name}={v}" for v in declared]
