"""Faults of a results store give one line and lose nothing (docs/bad-input.md): a full disk
before or during a sweep, a read-only store or folder, a file with 8 KB overwritten, another
program's SQLite file -- in ``sweep``, ``benchmark`` and ``report`` alike, each the exit status
of a user error (2), naming the file and what to do.

The faults are real SQLite errors, not mocks: a full disk is ``PRAGMA max_page_count`` (SQLite
answers SQLITE_FULL, "database or disk is full", exactly as on a full disk), a read-only store
is a connection opened with ``mode=ro`` (these tests run as root, whom file permissions do not
stop), damage is bytes overwritten in the file."""

from __future__ import annotations

import os
import random
import sqlite3
from pathlib import Path

import pytest

from spmlkit.cli import main
from spmlkit.experiments.store import APPLICATION_ID, ResultsStore, StoreError
from test_store import make_record

QUICK = "methods: [an]\nseeds: [0, 1]\nlrs: [0.01]\nsettings: {epochs: 1, subset: 200}\nstore: s.db\n"


def _one_line(err: str, *words: str) -> None:
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    for word in words:
        assert word in err, err


def _connect_with(monkeypatch, *pragmas: str, read_only: bool = False) -> None:
    """Every store connection of this test opened read-only and/or with these PRAGMAs."""
    def connect(self: ResultsStore) -> sqlite3.Connection:
        target, uri = (f"file:{self.path}?mode=ro", True) if read_only else (self.path, False)
        con = sqlite3.connect(target, uri=uri, timeout=30.0, isolation_level=None)
        con.row_factory = sqlite3.Row
        for pragma in pragmas:
            con.execute(pragma)
        return con

    monkeypatch.setattr(ResultsStore, "_connect", connect)


def _full_disk(monkeypatch, path: Path) -> None:
    """The disk full from now on: the store may not grow beyond the pages it has."""
    with sqlite3.connect(path) as con:
        pages = con.execute("PRAGMA page_count").fetchone()[0]
    _connect_with(monkeypatch, f"PRAGMA max_page_count = {max(pages, 1)}")


def _damaged_store(path: Path) -> bytes:
    """A store of 200 records with 8 KB in the middle overwritten by random bytes; its bytes."""
    store = ResultsStore(path)
    store.add_many([make_record(f"r{i}", config={"method": "an", "notes": "y" * 300},
                                history=[{"epoch": e, "val_map": 0.5} for e in range(20)]) for i in range(200)])
    with sqlite3.connect(path) as con:
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # every page in the file itself
    data = bytearray(path.read_bytes())
    middle = len(data) // 2 // 4096 * 4096
    data[middle:middle + 8192] = random.Random(0).randbytes(8192)
    path.write_bytes(bytes(data))
    return bytes(data)


def _foreign_file(path: Path) -> bytes:
    with sqlite3.connect(path) as con:
        con.execute("CREATE TABLE people (name TEXT, born INTEGER)")
        con.execute("INSERT INTO people VALUES ('Ada', 1815)")
    return path.read_bytes()


# ---------------------------------------------------------------- whose file


def test_another_programs_sqlite_file_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    before = _foreign_file(tmp_path / "theirs.db")
    with pytest.raises(StoreError, match=r"is not a store of spmlkit's: the SQLite file holds other tables \(people\)"):
        ResultsStore(tmp_path / "theirs.db")
    assert (tmp_path / "theirs.db").read_bytes() == before  # no runs/leases tables, no WAL mode
    with sqlite3.connect(tmp_path / "theirs.db") as con:
        assert con.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
        assert [r[0] for r in con.execute("SELECT name FROM sqlite_master")] == ["people"]
    # a file marked by another program is refused even when it has no tables yet
    with sqlite3.connect(tmp_path / "marked.db") as con:
        con.execute("PRAGMA application_id = 1234")
    with pytest.raises(StoreError, match=r"marked by another program \(application id 0x4d2\)"):
        ResultsStore(tmp_path / "marked.db")


def test_new_empty_and_older_spmlkit_stores_are_accepted_and_marked(tmp_path: Path) -> None:
    (tmp_path / "empty.db").write_bytes(b"")  # an empty file is a new store
    ResultsStore(tmp_path / "empty.db")
    ResultsStore(tmp_path / "new.db").add(make_record("a"))
    with sqlite3.connect(tmp_path / "new.db") as con:  # an older store: our tables, no mark
        con.execute("PRAGMA application_id = 0")
    assert ResultsStore(tmp_path / "new.db").get("a")["run_id"] == "a"
    for name in ("empty.db", "new.db"):
        with sqlite3.connect(tmp_path / name) as con:
            assert con.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID == 0x53504D4C


def _command_over(tmp_path: Path, store: Path, command: str) -> list[str]:
    """The arguments of ``command`` (sweep, report or benchmark) reading ``store`` (``<tmp>/out/results.db``)."""
    (tmp_path / "s.yaml").write_text(QUICK)
    return {"sweep": ["sweep", str(tmp_path / "s.yaml"), "--store", str(store), "--jobs", "1", "--quiet"],
            "report": ["report", "--store", str(store), "--out", str(tmp_path / "rep")],
            "benchmark": ["benchmark", "--methods", "an", "--seeds", "0", "--lrs", "0.01", "--epochs", "1",
                          "--subset", "200", "--jobs", "1", "--out", str(tmp_path / "out"), "--quiet"]}[command]


@pytest.mark.parametrize("command", ["sweep", "report", "benchmark"])
def test_a_foreign_sqlite_file_is_one_line_in_every_command(tmp_path: Path, capsys, command: str) -> None:
    (tmp_path / "out").mkdir()
    store = tmp_path / "out" / "results.db"
    before = _foreign_file(store)
    assert main(_command_over(tmp_path, store, command)) == 2
    _one_line(capsys.readouterr().err, f"spmlkit {command}: error: results store {store} is not a store of "
                                       "spmlkit's", "give a new store path")
    assert store.read_bytes() == before


# ---------------------------------------------------------------- damage


@pytest.mark.parametrize("command", ["sweep", "report", "benchmark"])
def test_a_store_with_8_kb_overwritten_is_one_line_and_stays_as_it_is(tmp_path: Path, capsys, command: str) -> None:
    (tmp_path / "out").mkdir()
    store = tmp_path / "out" / "results.db"
    before = _damaged_store(store)
    assert main(_command_over(tmp_path, store, command)) == 2
    _one_line(capsys.readouterr().err, f"spmlkit {command}: error: results store {store}: the file is damaged",
              "database disk image is malformed", "restore it from a backup")
    assert store.read_bytes() == before  # nothing repaired, overwritten or appended


def test_a_file_that_is_not_sqlite_at_all_is_one_line(tmp_path: Path, capsys) -> None:
    (tmp_path / "notes.db").write_text("my notes, not a database\n" * 200)
    assert main(["report", "--store", str(tmp_path / "notes.db"), "--out", str(tmp_path / "rep")]) == 2
    _one_line(capsys.readouterr().err, "the file is damaged or is not a SQLite database (SQLite: file is not a "
                                       "database)")


# ---------------------------------------------------------------- full disk


def test_a_full_disk_before_the_sweep_is_one_line_and_nothing_runs(tmp_path: Path, capsys, monkeypatch) -> None:
    (tmp_path / "s.yaml").write_text(QUICK)
    _connect_with(monkeypatch, "PRAGMA max_page_count = 1")  # not a page to spare for the tables
    assert main(["sweep", str(tmp_path / "s.yaml"), "--jobs", "1", "--quiet"]) == 2
    out, err = capsys.readouterr()
    _one_line(err, f"results store {tmp_path / 's.db'}: the disk is full (SQLite: database or disk is full); "
                   "free space, then run the same command again")
    assert "ran " not in out  # refused before any run trained
    assert main(["benchmark", "--methods", "an", "--seeds", "0", "--lrs", "0.01", "--epochs", "1", "--subset",
                 "200", "--jobs", "1", "--out", str(tmp_path / "bench"), "--quiet"]) == 2
    _one_line(capsys.readouterr().err, "spmlkit benchmark: error: results store", "the disk is full")


def test_a_disk_that_fills_during_the_sweep_loses_nothing_recorded(tmp_path: Path, capsys, monkeypatch) -> None:
    (tmp_path / "s.yaml").write_text(QUICK)
    store = tmp_path / "s.db"
    assert main(["sweep", str(tmp_path / "s.yaml"), "--jobs", "1", "--max-runs", "1", "--quiet"]) == 0
    (first,) = ResultsStore(store).records()
    capsys.readouterr()
    _full_disk(monkeypatch, store)  # the second run trains, then its record finds the disk full
    assert main(["sweep", str(tmp_path / "s.yaml"), "--jobs", "1", "--quiet"]) == 2
    _one_line(capsys.readouterr().err, "the disk is full (SQLite: database or disk is full)",
              "1 finished run(s) could not be recorded and will run again")
    monkeypatch.undo()
    assert [r["run_id"] for r in ResultsStore(store).records()] == [first["run_id"]]  # the first one intact
    assert ResultsStore(store).leases() == []  # released: the next sweep need not wait for them
    assert main(["sweep", str(tmp_path / "s.yaml"), "--jobs", "1", "--quiet"]) == 0
    assert "ran 1 run(s) (0 failed), skipped 1 finished" in capsys.readouterr().out
    assert ResultsStore(store).get(first["run_id"]) == first


def test_an_injected_full_disk_error_on_a_record_is_one_line(tmp_path: Path) -> None:
    """The error as the issue saw it (``sqlite3.OperationalError`` with that text and no code)."""
    store = ResultsStore(tmp_path / "s.db")

    def full(*args, **kwargs):
        raise sqlite3.OperationalError("database or disk is full")

    store._connect = full  # type: ignore[method-assign]
    with pytest.raises(StoreError, match=r"s\.db: the disk is full \(SQLite: database or disk is full\); free space"):
        store.add(make_record("a"))


def test_an_unknown_sqlite_error_is_our_bug_and_keeps_its_type(tmp_path: Path) -> None:
    store = ResultsStore(tmp_path / "s.db")

    def bug(*args, **kwargs):
        raise sqlite3.OperationalError("no such column: oops")

    store._connect = bug  # type: ignore[method-assign]
    with pytest.raises(sqlite3.OperationalError, match="no such column"):
        store.get("a")


# ---------------------------------------------------------------- read-only


def test_a_read_only_store_is_one_line_in_the_sweep_and_still_reports(tmp_path: Path, capsys, monkeypatch) -> None:
    (tmp_path / "s.yaml").write_text(QUICK)
    store = tmp_path / "s.db"
    assert main(["sweep", str(tmp_path / "s.yaml"), "--jobs", "1", "--max-runs", "1", "--quiet"]) == 0
    before = ResultsStore(store).records()
    capsys.readouterr()
    _connect_with(monkeypatch, read_only=True)
    assert main(["sweep", str(tmp_path / "s.yaml"), "--jobs", "1", "--quiet"]) == 2
    _one_line(capsys.readouterr().err, f"results store {store}: the file or its folder cannot be written",
              "attempt to write a readonly database", "give a store in a writable folder")
    # reading needs no write: the report of a read-only store works
    assert main(["report", "--store", str(store), "--out", str(tmp_path / "rep"), "--no-figures"]) == 0
    monkeypatch.undo()
    assert ResultsStore(store).records() == before


def test_a_new_store_in_a_read_only_folder_is_one_line(tmp_path: Path, capsys, monkeypatch) -> None:
    (tmp_path / "s.yaml").write_text(QUICK)
    _connect_with(monkeypatch, read_only=True)  # the file cannot be written by SQLite
    assert main(["sweep", str(tmp_path / "s.yaml"), "--jobs", "1", "--quiet"]) == 2
    _one_line(capsys.readouterr().err, "the file or its folder cannot be written",
              "(SQLite: attempt to write a readonly database)")
    assert not (tmp_path / "s.db").exists()  # the empty file spmlkit made for it is taken away again
    monkeypatch.undo()
    real_open = os.open

    def no_new_files(path, flags, *args):  # a folder where nothing can be created (root ignores chmod)
        if flags & os.O_CREAT:
            raise PermissionError(13, "Permission denied")
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "open", no_new_files)
    assert main(["sweep", str(tmp_path / "s.yaml"), "--jobs", "1", "--quiet"]) == 2
    _one_line(capsys.readouterr().err, f"results store {tmp_path / 's.db'}: cannot create it (Permission denied); give "
              "a store in a writable folder")
    assert not (tmp_path / "s.db").exists()


def test_a_store_whose_folder_cannot_be_made_is_one_line(tmp_path: Path, capsys) -> None:
    (tmp_path / "s.yaml").write_text(QUICK)
    (tmp_path / "afile").write_text("")
    assert main(["sweep", str(tmp_path / "s.yaml"), "--store", str(tmp_path / "afile" / "s.db"), "--quiet"]) == 2
    _one_line(capsys.readouterr().err, f"results store {tmp_path / 'afile' / 's.db'}: cannot create its folder",
              "give a store in a writable folder")
    assert main(["sweep", str(tmp_path / "s.yaml"), "--store", str(tmp_path), "--quiet"]) == 2
    _one_line(capsys.readouterr().err, f"results store {tmp_path} is a folder; give a file path")


def test_damage_the_sweep_would_not_read_is_found_before_any_run(tmp_path: Path, capsys) -> None:
    """Damage only in the pages of results (a history's overflow chain), which counting finished
    runs does not read: the sweep's check of every page finds it before a run trains."""
    store = ResultsStore(tmp_path / "s.db")
    store.add_many([make_record(f"r{i}", history=[{"notes": "h" * 12000}]) for i in range(40)])
    with sqlite3.connect(store.path) as con:
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        page_size = con.execute("PRAGMA page_size").fetchone()[0]
    data = bytearray(store.path.read_bytes())
    # an overflow page in the middle of a history: a 4-byte next-page number, then history text only
    pages = range(len(data) // page_size // 2, len(data) // page_size)
    at = next(i * page_size for i in pages if data[i * page_size + 4:(i + 1) * page_size] == b"h" * (page_size - 4))
    data[at:at + 4] = (0x7FFFFFF0).to_bytes(4, "big")  # its chain now points past the end of the file
    store.path.write_bytes(bytes(data))
    assert len(list(store.configs(status=["ok"]))) == 40  # what the sweep reads to count is intact
    (tmp_path / "s.yaml").write_text(QUICK)
    assert main(["sweep", str(tmp_path / "s.yaml"), "--jobs", "1", "--quiet"]) == 2
    out, err = capsys.readouterr()
    _one_line(err, f"results store {store.path}: the file is damaged (SQLite's check:", "restore it from a backup")
    assert "ran " not in out and store.path.read_bytes() == bytes(data)
