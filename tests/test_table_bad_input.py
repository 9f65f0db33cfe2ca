"""A user's table read as a careless or hostile user would write it (docs/bad-input.md, "Users' own
tables (`prepare table`)"): every kind refused in one line naming the file and the cell, or read as
meant; bounded before anything large is allocated (docs/your-data.md, "How large a table may be")."""

from __future__ import annotations

import io
import json
import time
import tracemalloc
import zipfile

import numpy as np
import pytest

from spmlkit.cli import main
from spmlkit.data import load_dataset
from spmlkit.data import table as table_module
from spmlkit.data.table import read_table


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err, err
    return err


def _npy(array_or_header: np.ndarray | tuple, dtype: str = "<f8") -> bytes:
    """An .npy file's bytes: an array's, or only a header claiming ``shape`` (no data after it)."""
    buffer = io.BytesIO()
    if isinstance(array_or_header, tuple):
        np.lib.format.write_array_header_1_0(buffer, {"descr": dtype, "fortran_order": False,
                                                      "shape": array_or_header})
    else:
        np.lib.format.write_array(buffer, array_or_header)
    return buffer.getvalue()


# --------------------------------------------------------------------------- sizes


def test_an_npz_whose_header_claims_a_terabyte_is_one_line_before_any_allocation(tmp_path, capsys):
    path = tmp_path / "bomb.npz"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("X.npy", _npy((10**6, 10**6)))  # 8 * 10^12 bytes claimed by a header of 128
        zf.writestr("Y.npy", _npy(np.ones((2, 1), np.int8)))
    assert path.stat().st_size < 1000
    assert main(["prepare", "table", "--table", str(path), "--out", str(tmp_path / "f")]) == 2
    err = _one_line(capsys)
    assert f"{path}: its arrays claim 8,000,000,000,002 bytes (X: float64 of shape (1000000, 1000000))" in err
    assert "more than the 1 GB a table may hold by default" in err and "--max-table-gb 8000" in err
    assert not (tmp_path / "f").exists()
    # a bound the user raises is the bound: the claim is still refused above it, by the memory check below it
    assert main(["prepare", "table", "--table", str(path), "--max-table-gb", "2", "--out", str(tmp_path / "f")]) == 2
    assert "more than the --max-table-gb 2 given; raise it to at least 8000" in _one_line(capsys)


def _inflating_npz(path, rows: int, cols: int) -> None:
    """An .npz whose X is ``rows`` x ``cols`` float64 zeros, deflated (about a thousand-fold), and a Y."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        with zf.open("X.npy", "w", force_zip64=True) as fh:
            fh.write(_npy((rows, cols)))
            zeros = bytes(8 * cols * 1000)
            for _ in range(rows // 1000):
                fh.write(zeros)
        Y = np.zeros((rows, 2), np.int8)
        Y[:, 0] = 1
        zf.writestr("Y.npy", _npy(Y))


def test_a_compressed_npz_that_inflates_a_thousand_fold_is_refused_unless_the_bound_is_raised(tmp_path, capsys):
    path = tmp_path / "zeros.npz"
    _inflating_npz(path, 30_000, 125)  # 30 MB of features in about 40 KB
    size = path.stat().st_size
    assert size < 300_000
    assert main(["prepare", "table", "--table", str(path), "--out", str(tmp_path / "f")]) == 2
    err = _one_line(capsys)
    assert f"{path}: its arrays claim 30,060,000 bytes (X: float64 of shape (30000, 125))" in err
    assert f"times the file's {size:,}; a table may expand at most 100 times by default" in err
    assert "raise the bound with --max-table-gb 0.1" in err and not (tmp_path / "f").exists()
    # the user who knows the table is real raises the bound, and it is read
    assert main(["prepare", "table", "--table", str(path), "--max-table-gb", "0.1", "--out", str(tmp_path / "f")]) == 0
    assert load_dataset(str(tmp_path / "f")).X_train.shape == (30_000, 125)


def test_a_csv_larger_than_the_bound_is_refused_before_it_is_read(tmp_path, capsys):
    path = tmp_path / "t.csv"
    path.write_text("f,positives\n" + "1.5,a\n" * 400)
    assert main(["prepare", "table", "--table", str(path), "--max-table-gb", "0.000001", "--out",
                 str(tmp_path / "f")]) == 2
    err = _one_line(capsys)
    assert f"--table {path}: 2,412 bytes, more than the 1e-06 GB a table may hold here" in err
    assert "save it as .npz or raise the bound with --max-table-gb 0.1" in err


def test_a_csv_without_line_breaks_is_refused_after_reading_one_bounded_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(table_module, "MAX_LINE", 1 << 20)  # 1 MiB in place of 64: the same code, a smaller file
    path = tmp_path / "one_line.csv"
    path.write_text("f,positives," + "1.5," * 5_000_000)  # 20 MB, no line break
    tracemalloc.start()
    try:
        data = read_table(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert data.problems == [f"{path} line 1: more than 1,048,576 characters without a line break; a table has one "
                             "row a line (a file without line breaks is not one; a table of longer rows is saved as "
                             ".npz)"]
    assert peak < 8 << 20  # read 1 MiB at a time, not the 20 MB line (the whole file was read as one line)
    # and through the command line: one line, exit 2
    assert main(["prepare", "table", "--table", str(path), "--out", str(tmp_path / "f")]) == 2
    assert "line 1: more than 1,048,576 characters without a line break" in _one_line(capsys)


def test_a_header_of_tens_of_thousands_of_columns_is_checked_in_linear_time(tmp_path):
    cols = 30_000
    path = tmp_path / "wide.csv"
    header = ",".join(f"feature_{i}" for i in range(cols)) + ",positives"
    path.write_text(header + "\n" + ",".join(["0.5"] * cols) + ",a\n" + ",".join(["1"] * cols) + ",b\n")
    t0 = time.perf_counter()
    data = read_table(path)
    seconds = time.perf_counter() - t0
    assert data.problems == [] and data.X_train.shape == (2, cols)
    assert seconds < 6, seconds  # quadratic (header.count per column): about 15 s here; linear: well under 1 s
    (tmp_path / "twice.csv").write_text(header.replace("feature_7,", "feature_8,") + "\n" + ",".join(["1"] * cols)
                                        + ",a\n")
    assert read_table(tmp_path / "twice.csv").problems[0].endswith(
        "the header names column(s) 'feature_8' twice; name each once")


# --------------------------------------------------------------------------- columns and cells


def test_a_label_column_named_twice_is_refused_at_prepare(tmp_path, capsys):
    path = tmp_path / "t.csv"
    path.write_text("f,A,B,C\n1,1,0,0\n2,0,1,1\n")
    assert main(["prepare", "table", "--table", str(path), "--label-columns", "A,A,B,C", "--out",
                 str(tmp_path / "f")]) == 2
    assert "--label-columns names 'A' twice; name each column once" in _one_line(capsys)
    assert not (tmp_path / "f").exists()
    assert main(["prepare", "table", "--table", str(path), "--label-columns", "A,B,C", "--out",
                 str(tmp_path / "f")]) == 0
    assert load_dataset(str(tmp_path / "f")).class_names == ("A", "B", "C")


def test_a_column_both_ignored_and_a_label_is_refused(tmp_path, capsys):
    path = tmp_path / "t.csv"
    path.write_text("id,f,A,B\nr1,1,1,0\nr2,2,0,1\n")
    assert main(["prepare", "table", "--table", str(path), "--label-columns", "A,B", "--ignore-columns", "id,B",
                 "--out", str(tmp_path / "f")]) == 2
    err = _one_line(capsys)
    assert f"{path}: column(s) 'B' named both as labels and by --ignore-columns" in err
    assert not (tmp_path / "f").exists()
    (tmp_path / "p.csv").write_text("f,positives\n1,a\n2,b\n")  # the positives column too
    assert read_table(tmp_path / "p.csv", ignore_columns=["positives"]).problems == [
        f"{tmp_path / 'p.csv'}: column(s) 'positives' named both as labels and by --ignore-columns; a column is either "
        "labels or ignored: drop it from one of the two"]


@pytest.mark.parametrize("cell", ["1_000", "\uff11\uff12", "\u0661\u0662"])  # 1_000, full-width 12, Arabic-Indic 12
def test_numbers_float_reads_but_a_csv_does_not_write_are_text_naming_the_cell(tmp_path, cell):
    path = tmp_path / "t.csv"
    path.write_text(f"f1,f2,positives\n1,2,a\n3,{cell},b\n5,6,a\n", encoding="utf-8")
    data = read_table(path)
    assert data.problems == [f"{path} row 3, column 'f2': {cell!r} is not a number as a CSV writes one (ASCII "
                             "digits, '.', an exponent; no '_', no other scripts' digits); every feature cell needs "
                             "one (fill or drop the row)"]
    (tmp_path / "nan.csv").write_text("f1,positives\n1,a\nnan,b\n1e999,a\n")  # not finite: said as before
    assert [p.split(": ", 1)[1] for p in read_table(tmp_path / "nan.csv").problems] == [
        "'nan' is not a finite number; every feature cell needs one (fill or drop the row)",
        "'1e999' is not a finite number; every feature cell needs one (fill or drop the row)"]
    ok = tmp_path / "ok.csv"
    ok.write_text("f1,positives\n-1.5e3,a\n+.25,b\n7.,a\n")
    assert read_table(ok).X_train.ravel().tolist() == [-1500.0, 0.25, 7.0]


def test_byte_string_class_names_of_an_npz_are_decoded_or_refused(tmp_path, capsys):
    X, Y = np.ones((2, 1)), np.array([[1, 0], [0, 1]])
    np.savez(tmp_path / "b.npz", X=X, Y=Y, class_names=np.array([b"A", "\u00e9t\u00e9".encode()]))
    assert main(["prepare", "table", "--table", str(tmp_path / "b.npz"), "--out", str(tmp_path / "f")]) == 0
    assert json.loads((tmp_path / "f" / "meta.json").read_text())["class_names"] == ["A", "\u00e9t\u00e9"]
    np.savez(tmp_path / "bad.npz", X=X, Y=Y, class_names=np.array([b"A", b"\xff\xfe"]))
    assert main(["prepare", "table", "--table", str(tmp_path / "bad.npz"), "--out", str(tmp_path / "g")]) == 2
    err = _one_line(capsys)
    assert f"{tmp_path / 'bad.npz'}: class_names holds bytes that are not UTF-8 text" in err
    assert "save the names as text" in err and not (tmp_path / "g").exists()


def test_a_test_table_need_not_carry_the_training_tables_ignored_columns(tmp_path, capsys):
    (tmp_path / "t.csv").write_text("id,f1,f2,positives\nr1,1,2,a\nr2,3,4,b\n")
    (tmp_path / "test.csv").write_text("f2,f1,positives\n1,2,a;b\n")
    assert main(["prepare", "table", "--table", str(tmp_path / "t.csv"), "--ignore-columns", "id", "--test-table",
                 str(tmp_path / "test.csv"), "--out", str(tmp_path / "f")]) == 0
    ds = load_dataset(str(tmp_path / "f"))
    assert ds.X_test.tolist() == [[2.0, 1.0]] and ds.Y_test.tolist() == [[1, 1]]
    # one that does carry it still may; the training table must
    (tmp_path / "test.csv").write_text("id,f2,f1,positives\nt1,1,2,a;b\n")
    assert read_table(tmp_path / "t.csv", ignore_columns=["id"], test_table=tmp_path / "test.csv").problems == []
    assert "--ignore-columns names 'code', which is not a column" in read_table(
        tmp_path / "t.csv", ignore_columns=["id", "code"]).problems[0]
