"""Fetching a MULAN set, for real, from a local HTTP server on 127.0.0.1 serving a set's files
(data/download.py, data/mulan.py; docs/protocol.md, "MULAN data sets"). The set is a small one in
MULAN's layout, its checksums and sizes pinned as MULAN's own for the test (fixtures/mulan.py,
``tiny_mulan``): a fetch checks what it gets against the pins, whatever the files hold.

The server runs in a daemon thread, answers only this machine, and stops when its test ends or,
whatever happens, after a minute. It serves the files as they are, with one byte changed, cut
off halfway (announcing the full length, then closing), followed by bytes that never end,
announcing more bytes than the file has, or a byte every 0.1 s. Nothing here touches the internet.
"""

import hashlib
import http.server
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from fixtures.mulan import TINY, tiny_mulan_fixture  # noqa: F401 - the fixture "tiny_mulan"

from spmlkit.cli import main
from spmlkit.data.download import DownloadError
from spmlkit.data.mulan import MULAN_SHA256, load_mulan

FLAGS = ("flags-train.arff", "flags-test.arff", "flags.xml")


class _Handler(http.server.BaseHTTPRequestHandler):
    timeout = 5

    def do_GET(self):  # noqa: N802 - the name http.server calls
        server = self.server
        server.requests.append(self.path)
        path = server.root / self.path.lstrip("/")
        if not path.is_file() or ".." in self.path:
            self.send_error(404)
            return
        body = path.read_bytes()
        if server.mode == "corrupt":
            body = body[:100] + bytes([body[100] ^ 1]) + body[101:]
        self.send_response(200)
        if server.mode == "announce-more":
            self.send_header("Content-Length", str(len(body) + 1))
        elif server.mode not in ("endless", "trickle"):  # those two announce no length, as a stream would
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if server.mode in ("endless", "trickle"):
            self._stream(body)
            return
        if server.mode == "truncate":
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        self.wfile.write(body)

    def _stream(self, body: bytes) -> None:
        """The file, then zeros without end ("endless"); or the file a byte every 0.1 s ("trickle").
        Either stops when the client goes away, or after 60 s."""
        stop = time.monotonic() + 60
        try:
            if self.server.mode == "endless":
                self.wfile.write(body)
                while time.monotonic() < stop:
                    self.wfile.write(bytes(1 << 16))
            else:
                for i in range(len(body)):
                    if time.monotonic() > stop:
                        break
                    self.wfile.write(body[i:i + 1])
                    self.wfile.flush()
                    time.sleep(0.1)
        except OSError:  # the client closed the connection
            pass
        self.close_connection = True

    def log_message(self, *args):  # quiet
        pass


@pytest.fixture
def server(monkeypatch, tiny_mulan):
    """A server of a small set pinned as MULAN's flags (``httpd.mode`` says how it answers)."""
    tiny_mulan.pin("flags")
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    httpd.daemon_threads = True
    httpd.mode, httpd.requests, httpd.root = "ok", [], tiny_mulan.mirror
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    guard = threading.Timer(60, httpd.shutdown)  # stops by itself, whatever the test does
    guard.daemon = True
    guard.start()
    monkeypatch.setenv("SPMLKIT_MULAN_URL", f"http://127.0.0.1:{httpd.server_address[1]}")
    try:
        yield httpd
    finally:
        guard.cancel()
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


@pytest.fixture
def empty_home(tmp_path, monkeypatch):
    home = tmp_path / "data"
    monkeypatch.setenv("SPMLKIT_DATA", str(home))
    return home


def _left_behind(home: Path) -> list[str]:
    folder = home / "mulan" / "flags"
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def _nothing_left(home: Path) -> bool:
    """No file and no folder of the fetch: the data folder as it was (not even empty set folders)."""
    return not home.exists() or not any(home.iterdir())


def test_a_set_is_fetched_once_verified_and_kept(server, empty_home):
    ds = load_mulan("flags")
    assert sorted(server.requests) == sorted(f"/flags/{f}" for f in FLAGS)
    folder = empty_home / "mulan" / "flags"
    for f in FLAGS:
        assert hashlib.sha256((folder / f).read_bytes()).hexdigest() == MULAN_SHA256[f"flags/{f}"]
    assert _left_behind(empty_home) == sorted([*FLAGS, "spmlkit-parsed-v1.npz"])  # no temporary file left
    assert ds.X_train.shape == (40, 5) and ds.Y_test.shape == (20, 3)
    load_mulan("flags")
    assert len(server.requests) == 3  # the second load reads the data folder only


def test_a_set_already_in_the_data_folder_is_not_fetched(server, tiny_mulan, monkeypatch):
    home = tiny_mulan.install("flags")
    monkeypatch.setenv("SPMLKIT_MULAN_URL", f"http://127.0.0.1:{server.server_address[1]}")
    assert load_mulan("flags").X_train.shape == (40, 5)
    assert server.requests == [] and (home / "mulan" / "flags" / "spmlkit-parsed-v1.npz").is_file()


def test_only_the_missing_files_are_fetched(server, empty_home):
    folder = empty_home / "mulan" / "flags"
    folder.mkdir(parents=True)
    (folder / "flags.xml").write_bytes((server.root / "flags" / "flags.xml").read_bytes())
    load_mulan("flags")
    assert sorted(server.requests) == ["/flags/flags-test.arff", "/flags/flags-train.arff"]


def test_cal500_is_fetched_as_its_one_file(server, tiny_mulan, empty_home):
    """cal500 comes unsplit: one ARFF (every row its train list) and the labels' XML, no test file."""
    tiny_mulan.pin("cal500")
    rows = TINY.train_rows + TINY.test_rows
    ds = load_mulan("cal500")
    assert sorted(server.requests) == ["/cal500/cal500.arff", "/cal500/cal500.xml"]
    assert ds.X_train.shape == (rows, TINY.features) and ds.X_test is None
    assert (empty_home / "mulan" / "cal500" / "spmlkit-parsed-v1.npz").is_file()  # parsed once, then kept
    server.requests.clear()
    assert load_mulan("cal500").Y_train.shape == (rows, len(TINY.labels)) and server.requests == []


def test_a_checksum_mismatch_keeps_nothing(server, empty_home):
    server.mode = "corrupt"
    with pytest.raises(DownloadError) as caught:
        load_mulan("flags")
    message = str(caught.value)
    assert "does not have the expected SHA-256" in message and "nothing was kept" in message and "\n" not in message
    assert _left_behind(empty_home) == []
    server.mode = "ok"  # the next try starts over and succeeds
    assert load_mulan("flags").X_train.shape == (40, 5)


def test_an_interrupted_download_keeps_nothing(server, empty_home):
    server.mode = "truncate"
    with pytest.raises(DownloadError) as caught:
        load_mulan("flags")
    message = str(caught.value)
    assert ("broke off after" in message or "stopped after" in message) and "nothing was kept" in message
    assert "\n" not in message
    assert _left_behind(empty_home) == []


@pytest.fixture
def refused_port():
    """A port the operating system gave a socket that is bound but never listens, held for the
    whole test: a connection to it is refused, and no other process can start listening there
    meanwhile (as it could on a port found free, closed, then used)."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        yield held.getsockname()[1]


def test_no_network_names_the_manual_way(empty_home, monkeypatch, capsys, refused_port):
    port = refused_port
    monkeypatch.setenv("SPMLKIT_MULAN_URL", f"http://127.0.0.1:{port}")
    folder = empty_home / "mulan" / "flags"
    with pytest.raises(DownloadError, match=r"cannot reach http://127\.0\.0\.1:\d+/flags/flags-train\.arff") as caught:
        load_mulan("flags")
    assert f"download flags-train.arff, flags-test.arff, flags.xml from http://127.0.0.1:{port}/flags/ into {folder}" \
        in str(caught.value)
    assert main(["train", "--dataset", "flags", "--method", "an", "--epochs", "1", "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "without a network, download" in err and "Traceback" not in err
    assert _left_behind(empty_home) == []


def test_the_fetched_set_equals_mulans_files(server, empty_home, tiny_mulan, monkeypatch):
    fetched = load_mulan("flags")
    tiny_mulan.install("flags")  # the same files, copied into another data folder
    local = load_mulan("flags")
    for part in ("X_train", "Y_train", "X_test", "Y_test"):
        np.testing.assert_array_equal(getattr(fetched, part), getattr(local, part))


@pytest.mark.parametrize("mode", ["endless", "announce-more"])
def test_an_answer_longer_than_the_file_stops_at_the_files_size(server, empty_home, mode):
    """The checksum fixes each file's size: an endless answer stops there (the disk holds at most the file),
    and an answer that announces more is refused before its first byte is read."""
    server.mode = mode
    t0 = time.monotonic()
    with pytest.raises(DownloadError) as caught:
        load_mulan("flags")
    message = str(caught.value)
    size = server.root.joinpath("flags", "flags-train.arff").stat().st_size
    expected = (f"sent more than the {size:,} bytes" if mode == "endless"
                else f"announces {size + 1:,} bytes, but the file spmlkit")
    assert expected in message and "flags-train.arff" in message and "\n" not in message
    assert time.monotonic() - t0 < 10
    assert _nothing_left(empty_home)


def test_a_trickling_server_meets_the_overall_deadline(server, empty_home, monkeypatch):
    """A byte every 0.1 s never trips the per-read timeout; the overall deadline ends it, and says how to
    give a slow network more time."""
    server.mode = "trickle"
    monkeypatch.setenv("SPMLKIT_DOWNLOAD_DEADLINE", "1")
    t0 = time.monotonic()
    with pytest.raises(DownloadError, match=r"flags-train\.arff took longer than 1 s \(\d+ bytes arrived\); "
                                            r"nothing was kept\. .*set SPMLKIT_DOWNLOAD_DEADLINE to more seconds"):
        load_mulan("flags")
    assert 1 <= time.monotonic() - t0 < 5
    assert _nothing_left(empty_home)


@pytest.mark.parametrize("value", ["0", "-5", "soon", "inf", "nan"])
def test_a_deadline_that_is_not_a_positive_number_is_one_line(empty_home, monkeypatch, capsys, value):
    monkeypatch.setenv("SPMLKIT_DOWNLOAD_DEADLINE", value)
    monkeypatch.setenv("SPMLKIT_MULAN_URL", "http://127.0.0.1:9")
    assert main(["train", "--dataset", "flags", "--method", "an", "--epochs", "1", "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith(f"SPMLKIT_DOWNLOAD_DEADLINE={value} is not a number of seconds above 0; unset it for the "
                        "default (600 s per file)")
    assert _nothing_left(empty_home)


def test_sigterm_during_a_download_leaves_no_part_file(server, empty_home):
    """SIGTERM (a scheduler ending a job) removes the temporary file and the folders the fetch made,
    then ends the process by that signal as it would have. (The child checks against MULAN's own pins,
    not the small set's; it is stopped long before a file is whole.)"""
    server.mode = "trickle"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    child = subprocess.Popen([sys.executable, "-c", "from spmlkit.data.mulan import load_mulan; load_mulan('flags')"],
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        folder = empty_home / "mulan" / "flags"
        stop = time.monotonic() + 30
        while not (folder.is_dir() and any(p.name.endswith(".part") for p in folder.iterdir())):
            assert time.monotonic() < stop and child.poll() is None, child.communicate()
            time.sleep(0.05)
        child.send_signal(signal.SIGTERM)
        assert child.wait(timeout=20) == -signal.SIGTERM
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert _nothing_left(empty_home), sorted(str(p) for p in empty_home.rglob("*"))


#: a child that receives SIGTERM the instant its temporary file exists, before another line of the
#: fetch runs: the moment a scheduler's signal can fall between making the file and guarding it
_TERM_AT_MKSTEMP = """
import os, signal, tempfile
made = tempfile.mkstemp
def mkstemp(*args, **kwargs):
    answer = made(*args, **kwargs)
    os.kill(os.getpid(), signal.SIGTERM)
    return answer
tempfile.mkstemp = mkstemp
from spmlkit.data.mulan import load_mulan
load_mulan('flags')
"""


def test_sigterm_the_moment_the_part_file_exists_leaves_nothing(server, empty_home):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", _TERM_AT_MKSTEMP], env=env, capture_output=True, timeout=60)
    assert done.returncode == -signal.SIGTERM, done.stderr.decode()[-2000:]
    assert _nothing_left(empty_home), sorted(str(p) for p in empty_home.rglob("*"))


def test_a_part_file_left_by_a_killed_process_goes_once_older_than_the_deadline(server, empty_home, monkeypatch):
    """kill -9 leaves a temporary file nobody can remove then; the next fetch of that file removes it once it
    is older than the deadline (no live download can still be writing it), and leaves a younger one alone."""
    monkeypatch.setenv("SPMLKIT_DOWNLOAD_DEADLINE", "60")
    folder = empty_home / "mulan" / "flags"
    folder.mkdir(parents=True)
    old, young = folder / ".flags-train.arff.abc.part", folder / ".flags-test.arff.def.part"
    for part in (old, young):
        part.write_bytes(b"half a file")
    os.utime(old, (time.time() - 61, time.time() - 61))
    load_mulan("flags")
    assert not old.exists() and young.exists()


def test_a_disk_without_room_for_the_file_is_one_line_before_any_byte(server, empty_home, monkeypatch):
    import shutil
    from collections import namedtuple

    size = server.root.joinpath("flags", "flags-train.arff").stat().st_size
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(10**9, 10**9 - size + 1, size - 1))
    with pytest.raises(DownloadError, match=rf"flags-train\.arff needs {size:,} bytes but the disk holding .* has "
                                            rf"{size - 1:,} free; free space, or choose another data folder with "
                                            r"SPMLKIT_DATA=DIR"):
        load_mulan("flags")
    assert server.requests == [] and _nothing_left(empty_home)


def test_a_failed_fetch_leaves_no_empty_set_folder(empty_home, monkeypatch):
    """The folders a fetch made (mulan/, mulan/flags/) go with it while empty; a folder that held something
    before is kept."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("SPMLKIT_MULAN_URL", f"http://127.0.0.1:{port}")
    with pytest.raises(DownloadError):
        load_mulan("flags")
    assert not empty_home.exists()
    (empty_home / "mulan" / "birds").mkdir(parents=True)
    with pytest.raises(DownloadError):
        load_mulan("flags")
    assert sorted(p.relative_to(empty_home).as_posix() for p in empty_home.rglob("*")) == ["mulan", "mulan/birds"]


@pytest.mark.parametrize("value, expected", [
    ("", "SPMLKIT_DATA is set but empty; unset it (the default is ~/spmlkit_data) or name a folder"),
    ("~nosuchuser/x", "SPMLKIT_DATA=~nosuchuser/x starts with the home folder of user 'nosuchuser', which this "
                      "machine does not know; give the folder's full path"),
])
def test_a_data_folder_setting_that_names_no_folder_is_one_line(monkeypatch, capsys, tmp_path, value, expected):
    """`spmlkit datasets` (which asks the data folder whether each set is there) and a run alike; nothing is
    created (the literal `~nosuchuser` folder in the working folder included)."""
    monkeypatch.setenv("SPMLKIT_DATA", value)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    for argv in (["datasets"], ["train", "--dataset", "flags", "--method", "an", "--epochs", "1", "--quiet"]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and err.endswith(expected), err
    assert list(work.iterdir()) == []
