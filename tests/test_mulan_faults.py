"""What a damaged, hostile or unusual ARFF file or parsed-array cache gets (data/arff_reader.py,
data/mulan.py, data/parsed_cache.py; docs/protocol.md, "MULAN data sets"): one line that names
the file and the way out, or the right arrays, never silently wrong ones.

Small ARFF files are written by hand here, and a whole set is a small one in MULAN's layout that the
test pins as MULAN's own (fixtures/mulan.py, ``tiny_mulan``). Two tests read MULAN's own files
(``needs_mulan``): a header comment in corel5k's, and the parsed digests pinned for every set. The
data folder is a fresh ``SPMLKIT_DATA``, with the download address on a closed local port.
"""

import io
import logging
import tracemalloc
import warnings
import zipfile

import numpy as np
import pytest
from fixtures.mulan import MULAN, TINY, home_fixture, needs_mulan, tiny_mulan_fixture  # noqa: F401 - fixtures

from spmlkit.cli import main
from spmlkit.data import arff_reader
from spmlkit.data.arff_reader import read_multilabel_arff
from spmlkit.data.mulan import MULAN_PARSED_SHA256, MULAN_SETS, load_mulan

HEADER = ("@relation r\n@attribute f1 numeric\n@attribute f2 {a,b,c}\n@attribute L1 {0,1}\n"
          "@attribute L2 {0,1}\n")


def _arff(tmp_path, text: str, name: str = "t.arff"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def _replace(path, data: bytes) -> None:
    """Write ``data`` over a set's file (a symlinked MULAN file: the shared original stays as it is)."""
    path.unlink()
    path.write_bytes(data)


def _rows_of(data: bytes) -> tuple[str, list[str]]:
    """An ARFF file's text up to its rows, and its rows."""
    text = data.decode()
    start = text.index("@data") + 6
    return text[:start], text[start:].strip().splitlines()


# --------------------------------------------------------------------------- where the rows start
def test_a_comment_that_mentions_data_does_not_start_the_rows(tmp_path):
    text = ("% sparse rows after @data {index value, ...}\n" + HEADER
            + "@data\n% a comment row\n{0 1.5,1 b,2 1}\n\n{0 2,3 1}\n")
    table = read_multilabel_arff(_arff(tmp_path, text), ("L1", "L2"))
    np.testing.assert_array_equal(table.Y, [[1, 0], [0, 1]])
    # omitted sparse entries are 0: f2 then takes its first declared value, as Weka defines it
    np.testing.assert_array_equal(table.X, [[1.5, 0, 1, 0], [2, 1, 0, 0]])


@needs_mulan
def test_a_header_comment_with_data_in_corel5k_adds_no_phantom_rows(home):
    folder = home("corel5k") / "mulan" / "corel5k"
    clean = load_mulan("corel5k")
    for name in ("Corel5k-train-sparse.arff", "Corel5k-test-sparse.arff"):
        text = (MULAN / "corel5k" / name).read_text()
        _replace(folder / name, ("% sparse rows after @data {index value, ...}\n" + text).encode())
    commented = load_mulan("corel5k")
    assert commented.X_train.shape == (4500, 499) and commented.X_test.shape == (500, 499)
    for part in ("X_train", "Y_train", "X_test", "Y_test"):
        np.testing.assert_array_equal(getattr(commented, part), getattr(clean, part))


# --------------------------------------------------------------------------- missing and extreme values
@pytest.mark.parametrize("row, where", [
    ("?,a,1,0", "in features (the first: feature 'f1' on line 8)"),
    ("1,?,1,0", "in features (the first: feature 'f2' on line 8)"),
    ("1,a,?,0", "in labels (the first: label 'L1' on line 8)"),
    ("{0 ?,2 1}", "in features (the first: feature 'f1' on line 8)"),
    ("{0 1,3 ?}", "in labels (the first: label 'L2' on line 8)"),
])
def test_a_missing_value_is_refused_with_the_file_the_count_and_the_first_place(tmp_path, row, where):
    """Dense and sparse alike: no 0, no all-zero one-hot row, no NaN and no IndexError in its place."""
    sparse = row.startswith("{")
    text = HEADER + "@data\n" + ("{0 1,2 1}" if sparse else "1,b,0,1") + "\n" + row + "\n"
    path = _arff(tmp_path, text)
    with pytest.raises(ValueError) as caught:
        read_multilabel_arff(path, ("L1", "L2"))
    assert str(caught.value) == (f"{path}: 1 missing value ('?'): 1 {where}; spmlkit fills in no value and drops no "
                                 "row: fill them in, or remove those rows, in a copy of the file")


def test_missing_values_are_counted_in_features_and_labels(tmp_path):
    path = _arff(tmp_path, HEADER + "@data\n?,?,1,0\n1,b,?,?\n?,a,0,1\n")
    with pytest.raises(ValueError, match=r"t\.arff: 5 missing values \('\?'\): 3 in features \(the first: feature "
                                         r"'f1' on line 7\), 2 in labels \(the first: label 'L1' on line 8\);"):
        read_multilabel_arff(path, ("L1", "L2"))


@pytest.mark.parametrize("value", ["1e39", "-1e39", "inf", "1e400"])
def test_a_feature_beyond_float32_is_refused_by_name_without_a_numpy_warning(tmp_path, value):
    path = _arff(tmp_path, HEADER + f"@data\n1,a,1,0\n{value},b,0,1\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy's "overflow encountered in cast" would fail here
        with pytest.raises(ValueError) as caught:
            read_multilabel_arff(path, ("L1", "L2"))
    shown = f"{float(value):g}"
    assert str(caught.value) == (f"{path}: attribute 'f1' holds {shown} on line 8, outside the range of the 32-bit "
                                 "floats features are kept in (±3.4e+38); rescale that attribute in a copy of the file")


def test_the_largest_float32_is_kept(tmp_path):
    path = _arff(tmp_path, HEADER + "@data\n3.4028234e38,a,1,0\n-3.4028234e38,b,0,1\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        table = read_multilabel_arff(path, ("L1", "L2"))
    assert table.X[0, 0] == np.finfo(np.float32).max and table.X[1, 0] == -np.finfo(np.float32).max


# --------------------------------------------------------------------------- encodings
@pytest.mark.parametrize("encoding, prefix", [("utf-8", b"\xef\xbb\xbf"), ("utf-16-le", b"\xff\xfe"),
                                              ("utf-16-be", b"\xfe\xff"), ("utf-32-le", b"\xff\xfe\x00\x00")])
def test_a_file_with_a_byte_order_mark_is_read_in_its_encoding(tmp_path, encoding, prefix):
    text = HEADER.replace("{a,b,c}", "{é,b,c}") + "@data\n1.5,é,1,0\n2,c,0,1\n"
    plain = read_multilabel_arff(_arff(tmp_path, text), ("L1", "L2"))
    marked = tmp_path / "marked.arff"
    marked.write_bytes(prefix + text.encode(encoding))
    table = read_multilabel_arff(marked, ("L1", "L2"))
    assert table.feature_names == plain.feature_names == ("f1", "f2=é", "f2=b", "f2=c")
    np.testing.assert_array_equal(table.X, plain.X)
    np.testing.assert_array_equal(table.Y, plain.Y)


def test_a_latin1_file_is_named_with_its_line_and_the_conversion(tmp_path):
    path = tmp_path / "latin.arff"
    path.write_bytes((HEADER.replace("{a,b,c}", "{é,b,c}") + "@data\n1,b,1,0\n").encode("latin-1"))
    with pytest.raises(ValueError) as caught:
        read_multilabel_arff(path, ("L1", "L2"))
    assert str(caught.value) == (f"{path}: line 3 holds byte 0xe9, which is not UTF-8 (ARFF files are read as UTF-8); "
                                 "a Latin-1 or Windows-1252 file must be converted first, e.g. `iconv -f latin1 -t "
                                 "utf-8 latin.arff > converted.arff`")


def test_utf16_without_a_byte_order_mark_and_binary_files_are_named(tmp_path):
    path = tmp_path / "wide.arff"
    path.write_bytes((HEADER + "@data\n1,b,1,0\n").encode("utf-16-le"))
    with pytest.raises(ValueError, match=r"wide\.arff: holds NUL bytes, so it is UTF-16 or UTF-32 text without a "
                                         r"byte-order mark, or not text at all; .* save it as UTF-8"):
        read_multilabel_arff(path, ("L1", "L2"))
    path.write_bytes(b"\xff\xfe" + b"\x00\xd8" + b"@\x00")  # a UTF-16 mark, then an unpaired surrogate
    with pytest.raises(ValueError, match=r"wide\.arff: starts with a byte-order mark of UTF-16 but byte 2 is not "
                                         r"valid UTF-16; save it again as UTF-8"):
        read_multilabel_arff(path, ("L1", "L2"))


@pytest.mark.parametrize("damage, expected", [
    (lambda data: data.decode().encode("latin-1").replace(b"@relation", b"@relation \xe9", 1),
     "emotions-train.arff: line 1 holds byte 0xe9, which is not UTF-8"),
    (lambda data: data[:300] + b"\x00\x9f\x13" + data[303:], "emotions-train.arff: holds NUL bytes"),
    (lambda data: data.replace(b"@data", b"@dota", 1), "emotions-train.arff: not a readable ARFF file"),
])
def test_a_damaged_set_file_names_itself_and_the_way_back_to_mulans(tiny_mulan, capsys, damage, expected):
    folder = tiny_mulan.install("emotions") / "mulan" / "emotions"
    _replace(folder / "emotions-train.arff", damage(tiny_mulan.file("emotions", "emotions-train.arff")))
    assert main(["train", "--dataset", "emotions", "--method", "an", "--epochs", "1", "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and expected in err and str(folder) in err
    assert err.endswith("emotions-train.arff is not MULAN's file (its SHA-256 differs): correct it, or delete it and "
                        "spmlkit fetches MULAN's own on the next run")


# --------------------------------------------------------------------------- sizes a file claims
def test_a_small_file_declaring_a_huge_matrix_is_refused_before_allocating(tmp_path, monkeypatch):
    """A 0.3 MB sparse file declaring 8,000 attributes over 10,000 rows asks for 0.3 GiB of dense features
    (the 8 MB file with 300,000 attributes of the report asked for 90 GiB): refused against the memory
    available (here said to be 64 MB) before the matrix exists."""
    lines = ["@relation big", *(f"@attribute a{i} numeric" for i in range(8_000)), "@attribute L1 {0,1}", "@data"]
    path = _arff(tmp_path, "\n".join(lines + ["{0 1,8000 1}"] * 10_000) + "\n")
    assert path.stat().st_size < 400_000
    monkeypatch.setattr(arff_reader, "available_memory", lambda: 64 * 2**20)
    tracemalloc.start()
    try:
        with pytest.raises(ValueError) as caught:
            read_multilabel_arff(path, ("L1",))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert str(caught.value) == (f"{path}: its 10,000 rows x 8,000 feature columns need 0.3 GiB as dense arrays, more "
                                 "than the 0.1 GiB of memory available; spmlkit trains on dense features: use a machine "
                                 "with more memory, or fewer rows or attributes")
    assert peak < 64 * 2**20  # the parse of the text, not the matrix


# --------------------------------------------------------------------------- a set of one file
def test_a_set_of_one_file_is_its_train_list_and_has_no_test_list(tmp_path, monkeypatch, caplog):
    """cal500 comes as one ARFF file and its XML: a stand-in of 12 rows in its folder (no shared files
    needed) reads as a train list of every row and no test list, and pools into the tabular protocol."""
    from spmlkit.experiments.presets import resolve_config
    from spmlkit.training.run_data import load_run_data

    folder = tmp_path / "data" / "mulan" / "cal500"
    folder.mkdir(parents=True)
    rows = "".join(f"{i / 10},{['a', 'b', 'c'][i % 3]},{i % 2},{1 - i % 2}\n" for i in range(12))
    (folder / "cal500.arff").write_text(HEADER + "@data\n" + rows)
    (folder / "cal500.xml").write_text('<?xml version="1.0"?>\n<labels xmlns="http://mulan.sourceforge.net/labels">'
                                       '<label name="L1"></label><label name="L2"></label></labels>\n')
    monkeypatch.setenv("SPMLKIT_DATA", str(tmp_path / "data"))
    monkeypatch.setenv("SPMLKIT_MULAN_URL", "http://127.0.0.1:9/closed")
    with caplog.at_level(logging.WARNING):
        ds = load_mulan("cal500")
    assert "cal500.arff differs from MULAN's file" in caplog.text  # a stand-in, read as it is
    assert ds.X_train.shape == (12, 4) and ds.Y_train.shape == (12, 2) and ds.X_test is None and ds.Y_test is None
    pooled = load_run_data(resolve_config({"dataset": "cal500", "method": "an", "partition": "random"}))
    assert (len(pooled.Y_train), len(pooled.Y_val), len(pooled.Y_test)) == (10, 1, 1)
    assert not (folder / "spmlkit-parsed-v1.npz").exists()  # only MULAN's own files' arrays are kept


# --------------------------------------------------------------------------- files that leave nothing to do
def test_an_empty_test_file_is_refused_before_training(tiny_mulan, capsys, tmp_path):
    folder = tiny_mulan.install("emotions") / "mulan" / "emotions"
    head, _ = _rows_of(tiny_mulan.file("emotions", "emotions-test.arff"))
    _replace(folder / "emotions-test.arff", head.encode())
    run = tmp_path / "run"
    assert main(["train", "--dataset", "emotions", "--method", "an", "--epochs", "1", "--quiet", "--out", str(run)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert f"{folder / 'emotions-test.arff'}: holds no rows, so there is nothing to test on" in err
    assert not run.exists()


def test_a_train_file_without_a_labelled_row_is_refused_by_name(tiny_mulan, capsys):
    folder = tiny_mulan.install("flags") / "mulan" / "flags"
    head, rows = _rows_of(tiny_mulan.file("flags", "flags-train.arff"))
    labels = len(TINY.labels)  # the last columns
    unlabelled = [",".join(row.split(",")[:-labels] + ["0"] * labels) for row in rows]
    _replace(folder / "flags-train.arff", (head + "\n".join(unlabelled) + "\n").encode())
    assert main(["train", "--dataset", "flags", "--method", "an", "--epochs", "1", "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "num_examples" not in err
    assert (f"{folder / 'flags-train.arff'}: none of its 40 rows has a positive label, so there is nothing to train "
            "on (rows without one are left out of training)") in err


# --------------------------------------------------------------------------- the parsed-array cache
@needs_mulan
@pytest.mark.parametrize("name", list(MULAN_SETS))
def test_the_pinned_parsed_digests_are_what_the_reader_makes_of_mulans_files(name):
    """The digest a cache is checked against is pinned in the code; a change of the reader (or of liac-arff)
    that changes any array must update it, or every cache would be refused."""
    from spmlkit.data.mulan import _ARRAYS, _parse
    from spmlkit.data.parsed_cache import arrays_digest

    assert arrays_digest(_parse(MULAN_SETS[name], MULAN / name, []), _ARRAYS) == MULAN_PARSED_SHA256[name]


@pytest.fixture
def cached(tiny_mulan):
    """A small set's folder (standing in for flags) after one load (its cache written), and the arrays of
    that load."""
    folder = tiny_mulan.install("flags") / "mulan" / "flags"
    first = load_mulan("flags")
    assert (folder / "spmlkit-parsed-v1.npz").is_file()
    return folder, first


def _same(a, b) -> None:
    for part in ("X_train", "Y_train", "X_test", "Y_test"):
        np.testing.assert_array_equal(getattr(a, part), getattr(b, part))
    assert a.class_names == b.class_names and a.feature_names == b.feature_names


def _cache_arrays(folder) -> dict:
    with np.load(folder / "spmlkit-parsed-v1.npz") as npz:
        return {k: npz[k] for k in npz.files}


def test_a_cache_with_flipped_labels_and_copied_digests_is_not_used(cached, caplog):
    """Whoever writes into a shared data folder can copy any digest the cache records about itself; the one
    that counts is in spmlkit's code. An edited cache is named, not used, and replaced."""
    folder, first = cached
    arrays = _cache_arrays(folder)
    arrays["Y_test"] = 1 - arrays["Y_test"]  # every test label flipped, everything else copied
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    (folder / "spmlkit-parsed-v1.npz").write_bytes(buffer.getvalue())
    with caplog.at_level(logging.WARNING):
        again = load_mulan("flags")
    _same(again, first)
    assert (f"{folder / 'spmlkit-parsed-v1.npz'}: its arrays are not what the set's files parse to (changed after it "
            "was written); not used: the set is parsed from its files again") in caplog.text
    np.testing.assert_array_equal(_cache_arrays(folder)["Y_test"], first.Y_test)  # replaced by the right arrays


def test_a_truncated_cache_is_parsed_again_and_replaced(cached, caplog):
    folder, first = cached
    cache = folder / "spmlkit-parsed-v1.npz"
    data = cache.read_bytes()
    cache.write_bytes(data[: len(data) // 2])
    with caplog.at_level(logging.WARNING):
        again = load_mulan("flags")
    _same(again, first)
    assert f"{cache}: it cannot be read (BadZipFile: File is not a zip file); not used" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        load_mulan("flags")  # the replaced cache is whole again: no word
    assert caplog.text == ""


def test_a_cache_without_its_arrays_is_named_and_parsed_again(cached, caplog):
    folder, first = cached
    arrays = _cache_arrays(folder)
    del arrays["Y_test"]
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    (folder / "spmlkit-parsed-v1.npz").write_bytes(buffer.getvalue())
    with caplog.at_level(logging.WARNING):
        _same(load_mulan("flags"), first)
    assert f"{folder / 'spmlkit-parsed-v1.npz'}: it holds no array 'Y_test'; not used" in caplog.text


def _npy_header(shape, dtype="<f4") -> bytes:
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, {"descr": dtype, "fortran_order": False, "shape": shape})
    return buffer.getvalue()  # the magic string, then the header


def test_a_cache_that_expands_past_its_expected_size_is_refused_after_at_most_that_size(cached, caplog):
    """Two ways to hide gigabytes in a small compressed cache: an array header that claims a larger shape
    (refused from the header, no data read), and a member longer than its header's array (refused from the
    zip entry's size). Neither decompresses more than the expected arrays."""
    folder, first = cached
    cache = folder / "spmlkit-parsed-v1.npz"
    arrays = _cache_arrays(folder)

    def write(member: str, header: bytes, extra_zeros: int) -> None:
        with zipfile.ZipFile(cache, "w", zipfile.ZIP_DEFLATED) as zf:
            for key, value in arrays.items():
                if key != member:
                    buffer = io.BytesIO()
                    np.lib.format.write_array(buffer, value)
                    zf.writestr(f"{key}.npy", buffer.getvalue())
            with zf.open(f"{member}.npy", "w", force_zip64=True) as fh:
                fh.write(header + arrays[member].tobytes())
                for _ in range(extra_zeros // (1 << 20)):
                    fh.write(bytes(1 << 20))

    def load_and_warning() -> str:
        """The set loaded again (the right arrays), the warning it gave; its peak of traced memory bounded."""
        caplog.clear()
        tracemalloc.start()
        try:
            with caplog.at_level(logging.WARNING):
                _same(load_mulan("flags"), first)
            assert tracemalloc.get_traced_memory()[1] < 16 * 2**20
        finally:
            tracemalloc.stop()
        return caplog.text

    write("X_train", _npy_header((10**9, 5)), 0)  # claims 20 GB
    assert cache.stat().st_size < 100_000
    assert f"{cache}: its array 'X_train' is <f4 (1000000000, 5), not f (40, 5); not used" in load_and_warning()
    write("X_test", _npy_header((20, 5)), 64 << 20)  # 64 MB of zeros after the 528-byte array (header 128 bytes)
    assert cache.stat().st_size < 200_000
    assert (f"{cache}: its array 'X_test' holds 67,109,392 bytes, more than its 528; not used"
            in load_and_warning())


def test_a_changed_set_file_is_parsed_every_time_and_never_cached(cached, caplog):
    """A copy of one's own (its checksum is not MULAN's) has no pinned digest to check a cache against."""
    folder, first = cached
    (folder / "spmlkit-parsed-v1.npz").unlink()
    text = (folder / "flags-train.arff").read_text().rstrip("\n").rsplit("\n", 1)[0] + "\n"
    _replace(folder / "flags-train.arff", text.encode())
    assert len(load_mulan("flags").X_train) == TINY.train_rows - 1
    assert not (folder / "spmlkit-parsed-v1.npz").exists()
