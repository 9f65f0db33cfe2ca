"""Fetching a MULAN set, for real, from a local HTTP server on 127.0.0.1 serving MULAN's files
(data/download.py, data/mulan.py; docs/protocol.md, "MULAN data sets").

The server runs in a daemon thread, answers only this machine, and stops when its test ends or,
whatever happens, after a minute. It serves the files as they are, with one byte changed, or cut
off halfway (announcing the full length, then closing). Nothing here touches the internet.
"""

import hashlib
import http.server
import socket
import threading
from pathlib import Path

import numpy as np
import pytest
from fixtures.mulan import MULAN, data_home_with, needs_mulan

from spmlkit.cli import main
from spmlkit.data.download import DownloadError
from spmlkit.data.mulan import MULAN_SHA256, load_mulan

pytestmark = needs_mulan

FLAGS = ("flags-train.arff", "flags-test.arff", "flags.xml")


class _Handler(http.server.BaseHTTPRequestHandler):
    timeout = 5

    def do_GET(self):  # noqa: N802 - the name http.server calls
        server = self.server
        server.requests.append(self.path)
        path = MULAN / self.path.lstrip("/")
        if not path.is_file() or ".." in self.path:
            self.send_error(404)
            return
        body = path.read_bytes()
        if server.mode == "corrupt":
            body = body[:100] + bytes([body[100] ^ 1]) + body[101:]
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if server.mode == "truncate":
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        self.wfile.write(body)

    def log_message(self, *args):  # quiet
        pass


@pytest.fixture
def server(monkeypatch):
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    httpd.daemon_threads = True
    httpd.mode, httpd.requests = "ok", []
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


def test_a_set_is_fetched_once_verified_and_kept(server, empty_home):
    ds = load_mulan("flags")
    assert sorted(server.requests) == sorted(f"/flags/{f}" for f in FLAGS)
    folder = empty_home / "mulan" / "flags"
    for f in FLAGS:
        assert hashlib.sha256((folder / f).read_bytes()).hexdigest() == MULAN_SHA256[f"flags/{f}"]
    assert _left_behind(empty_home) == sorted([*FLAGS, "spmlkit-parsed-v1.npz"])  # no temporary file left
    assert ds.X_train.shape == (129, 43) and ds.Y_test.shape == (65, 7)
    load_mulan("flags")
    assert len(server.requests) == 3  # the second load reads the data folder only


def test_a_set_already_in_the_data_folder_is_not_fetched(server, tmp_path, monkeypatch):
    monkeypatch.setenv("SPMLKIT_DATA", str(data_home_with(tmp_path, "flags")))
    assert load_mulan("flags").X_train.shape == (129, 43)
    assert server.requests == []


def test_only_the_missing_files_are_fetched(server, empty_home):
    folder = empty_home / "mulan" / "flags"
    folder.mkdir(parents=True)
    (folder / "flags.xml").write_bytes((MULAN / "flags" / "flags.xml").read_bytes())
    load_mulan("flags")
    assert sorted(server.requests) == ["/flags/flags-test.arff", "/flags/flags-train.arff"]


def test_a_checksum_mismatch_keeps_nothing(server, empty_home):
    server.mode = "corrupt"
    with pytest.raises(DownloadError) as caught:
        load_mulan("flags")
    message = str(caught.value)
    assert "does not have the expected SHA-256" in message and "nothing was kept" in message and "\n" not in message
    assert _left_behind(empty_home) == []
    server.mode = "ok"  # the next try starts over and succeeds
    assert load_mulan("flags").X_train.shape == (129, 43)


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


def test_the_fetched_set_equals_mulans_files(server, empty_home, tmp_path, monkeypatch):
    fetched = load_mulan("flags")
    monkeypatch.setenv("SPMLKIT_DATA", str(data_home_with(tmp_path / "copy", "flags")))
    local = load_mulan("flags")
    for part in ("X_train", "Y_train", "X_test", "Y_test"):
        np.testing.assert_array_equal(getattr(fetched, part), getattr(local, part))
