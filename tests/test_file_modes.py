"""Files spmlkit writes get the mode the user's umask gives, as ``open()`` would, not the 0600 that
``tempfile.mkstemp`` uses for secrets: colleagues and web servers read tables, figures and models."""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat

import pandas as pd
import pytest

from spmlkit.io import atomic_write_bytes, atomic_write_json, new_file_mode


@contextlib.contextmanager
def umask(mask: int):
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.mark.skipif(os.name != "posix", reason="file modes are POSIX")
@pytest.mark.parametrize("mask, expected", [(0o022, 0o644), (0o002, 0o664), (0o027, 0o640), (0o077, 0o600)])
def test_an_atomic_write_gets_the_mode_open_would_give(tmp_path, mask, expected):
    with umask(mask):
        assert new_file_mode() == expected
        written = atomic_write_bytes(tmp_path / "table.md", b"| a |\n")
        with open(tmp_path / "by_open.txt", "w") as fh:  # what every other program's output gets
            fh.write("x")
        replaced = atomic_write_json(tmp_path / "table.md", {"again": 1})  # replacing keeps the rule
    assert mode(written) == mode(replaced) == mode(tmp_path / "by_open.txt") == expected


@pytest.mark.skipif(os.name != "posix", reason="file modes are POSIX")
def test_a_leaderboards_files_are_readable_by_the_group_under_umask_002(tmp_path):
    from spmlkit.experiments.leaderboard import build_leaderboard, write_leaderboard

    scores = pd.DataFrame({"an": [40.0, 50.0, 60.0], "em": [41.0, 52.0, 59.0], "role": [42.0, 51.0, 61.0]},
                          index=["a", "b", "c"])
    with umask(0o002):
        paths = write_leaderboard(tmp_path, build_leaderboard(scores))
    assert {p.suffix for p in paths.values()} == {".md", ".csv", ".json", ".png"}  # the figure too
    assert {p.name: mode(p) for p in paths.values()} == {p.name: 0o664 for p in paths.values()}


@pytest.mark.skipif(os.name != "posix", reason="file modes are POSIX")
def test_a_downloaded_file_gets_the_umask_mode(tmp_path):
    from spmlkit.data.download import fetch_file

    source = tmp_path / "source.arff"
    source.write_bytes(b"@relation x\n")
    with umask(0o022):
        got = fetch_file(source.as_uri(), tmp_path / "data" / "x.arff", hashlib.sha256(b"@relation x\n").hexdigest(),
                         manual="copy it by hand")
    assert got.read_bytes() == b"@relation x\n" and mode(got) == 0o644


@pytest.mark.skipif(os.name != "posix", reason="file modes are POSIX")
@pytest.mark.parametrize("mask, expected", [(0o002, 0o664), (0o022, 0o644), (0o077, 0o600)])
def test_a_results_store_and_its_journal_follow_the_umask(tmp_path, mask, expected):
    from spmlkit.experiments.store import ResultsStore

    import sqlite3

    with umask(mask):
        store = ResultsStore(tmp_path / "shared" / "results.db")  # SQLite alone made it 0644 under any umask
        store.claim("r1", "me:1:x", duration=60)
        con = sqlite3.connect(store.path)  # the WAL files exist while a connection is open
        con.execute("SELECT count(*) FROM runs").fetchall()
        modes = {p.name: mode(p) for p in (tmp_path / "shared").iterdir()}
        con.close()
    assert set(modes) == {"results.db", "results.db-wal", "results.db-shm"}
    assert set(modes.values()) == {expected}, modes
    (tmp_path / "shared" / "results.db").chmod(0o640)  # an existing store keeps the mode its owner gave it
    with umask(mask):
        ResultsStore(tmp_path / "shared" / "results.db")
    assert mode(tmp_path / "shared" / "results.db") == 0o640
