"""``spmlkit sweep`` as a process: its workers die with it (SIGKILL, SIGTERM), Ctrl-C stops it
within seconds and the same command resumes, and two sweeps on one store split the grid.

Each test starts ``python -m spmlkit sweep`` in its own session (process group). Worker
processes are found, and checked, through ``/proc`` (psutil is not a dependency), so the
tests that need it are Linux-only.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from spmlkit.experiments.store import ResultsStore

HAS_PROC = Path("/proc/self/stat").is_file()
needs_proc = pytest.mark.skipif(not HAS_PROC, reason="finding a process's workers needs Linux /proc")

#: long enough that the sweep is still busy for seconds after its first record (and that
#: before the fix, working through the queue after Ctrl-C took longer than the test allows):
#: 14 runs of half a second to a second each (full yeast, 40 epochs) on two workers. The runs
#: differ in batch size, which no two runs can share in one batched training (their steps
#: differ), so each is a task of its own: runs that differ only in seed or lr would train
#: together as one task and finish before the test could interrupt them.
BUSY_RUNS = 14
BUSY_GRID = ("name: busy\ndatasets: [yeast]\nmethods: [an]\nseeds: [0]\nlrs: [0.003]\n"
             "batch_sizes: [{sizes}]\nsettings: {{epochs: 40}}\nstore: busy.db\n"
             ).format(sizes=", ".join(str(32 + i) for i in range(BUSY_RUNS)))


def _env() -> dict[str, str]:
    """The environment for a sweep process. Where bytecode caching is off, every process
    compiles torch's sources again (about 10 s here); a shared cache folder outside the
    checkout (PYTHONPYCACHEPREFIX) keeps the tests fast without writing into the venv."""
    env = dict(os.environ)
    if env.pop("PYTHONDONTWRITEBYTECODE", None):
        env["PYTHONPYCACHEPREFIX"] = str(Path(tempfile.gettempdir()) / f"spmlkit-tests-pycache-{os.getuid()}")
    return env


def _start(sweep_file: Path, *options: str, launcher: tuple[str, ...] = ("-m", "spmlkit")) -> subprocess.Popen:
    """``spmlkit sweep`` in a new session; output to files (a pipe would be held open by an
    orphaned worker, and reading it would hang the test). ``launcher``: what runs the command
    line (``python -m spmlkit``, or a script that takes its arguments)."""
    out = sweep_file.with_suffix(f".{len(list(sweep_file.parent.glob('*.out')))}.out")
    with open(out, "w") as fh:
        proc = subprocess.Popen([sys.executable, *launcher, "sweep", str(sweep_file), "--quiet", *options],
                                cwd=sweep_file.parent, env=_env(), stdout=fh, stderr=subprocess.STDOUT,
                                start_new_session=True)
    proc.output = out  # type: ignore[attr-defined]
    return proc


def _cleanup(proc: subprocess.Popen) -> None:
    """Whatever happened, nothing of the test's process group survives it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def _wait_for_records(store: ResultsStore, n: int, proc: subprocess.Popen, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while len(store) < n and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(store) >= n, f"no record after {timeout:g} s: {proc.output.read_text()[-2000:]}"
    assert proc.poll() is None, "the sweep finished before the test could stop it; give it more runs"


def _stat(pid: int) -> tuple[str, int, str] | None:
    """(state, parent pid, start time) of a process from /proc, None if it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = text[text.rindex(")") + 2:].split()  # after "pid (comm) "
    return fields[0], int(fields[1]), fields[19]


def _children(pid: int) -> list[tuple[int, str]]:
    """(pid, start time) of every live child of ``pid``: the pool's workers."""
    kids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (st := _stat(int(entry.name))) and st[1] == pid and st[0] not in "ZX":
            kids.append((int(entry.name), st[2]))
    return kids


def _running(proc: tuple[int, str]) -> bool:
    """The process still runs: not gone, not a zombie, and its pid not reused."""
    st = _stat(proc[0])
    return st is not None and st[0] not in "ZX" and st[2] == proc[1]


def _wait_until_gone(procs: list[tuple[int, str]], timeout: float) -> list[tuple[int, str]]:
    deadline = time.monotonic() + timeout
    while (alive := [p for p in procs if _running(p)]) and time.monotonic() < deadline:
        time.sleep(0.05)
    return alive


@needs_proc
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_workers_end_with_the_sweep(tmp_path: Path, sig: signal.Signals) -> None:
    (tmp_path / "s.yaml").write_text(BUSY_GRID)
    store = ResultsStore(tmp_path / "busy.db")
    proc = _start(tmp_path / "s.yaml", "--jobs", "2")
    try:
        _wait_for_records(store, 1, proc)
        workers = _children(proc.pid)
        assert len(workers) == 2, workers
        os.kill(proc.pid, sig)  # the sweep only, not its process group
        rc = proc.wait(timeout=10)
        assert _wait_until_gone(workers, timeout=10) == [], "workers outlived the sweep"
        if sig == signal.SIGTERM:  # stopped through the cleanup: exit status, store, leases
            assert rc == 128 + signal.SIGTERM, proc.output.read_text()[-2000:]
            assert "terminated (SIGTERM)" in proc.output.read_text()
            assert store.leases() == []
            assert all(r["status"] == "ok" for r in store.records())
    finally:
        _cleanup(proc)


@needs_proc
def test_ctrl_c_stops_within_seconds_and_the_sweep_resumes(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text(BUSY_GRID)
    store = ResultsStore(tmp_path / "busy.db")
    proc = _start(tmp_path / "s.yaml", "--jobs", "2")
    try:
        _wait_for_records(store, 1, proc)
        workers = _children(proc.pid)
        t0 = time.monotonic()
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
        # the workers are stopped at once, not left to work through the queue (seconds here)
        assert _wait_until_gone(workers, timeout=2) == [], "workers still running 2 s after Ctrl-C"
        rc = proc.wait(timeout=10)
        elapsed = time.monotonic() - t0
    finally:
        _cleanup(proc)
    assert elapsed < 10 and rc == 130, (elapsed, rc)
    assert "interrupted" in proc.output.read_text()
    before = {r["run_id"]: r["finished_at"] for r in store.records()}
    assert 1 <= len(before) < BUSY_RUNS and store.leases() == []
    resumed = _start(tmp_path / "s.yaml", "--jobs", "2")
    try:
        assert resumed.wait(timeout=120) == 0, resumed.output.read_text()[-2000:]
    finally:
        _cleanup(resumed)
    assert f"ran {BUSY_RUNS - len(before)} run(s) (0 failed), skipped {len(before)} finished" in \
        resumed.output.read_text()
    after = {r["run_id"]: r["finished_at"] for r in store.records()}
    assert len(after) == BUSY_RUNS and all(after[k] == v for k, v in before.items())  # none run twice


#: ``spmlkit sweep`` whose first run waits until the other sweep of the test has started one too
#: (or has ended): the two sweeps then hold runs at the same time however their start-ups are
#: timed, so each must run part of the grid. argv: the folder where the sweeps leave their marks,
#: then the command line.
MEET_THEN_SWEEP = """
import os, sys, time
from pathlib import Path
from spmlkit.experiments.sweep import processes
marks, me = Path(sys.argv[1]), str(os.getpid())
train = processes.execute_run
def meet_first(run, *args, **kwargs):
    (marks / f"running-{me}").touch()
    deadline = time.monotonic() + 300  # a safety net only: the other sweep starts in seconds
    while time.monotonic() < deadline and not any(
            p.name.split("-", 1)[1] != me for p in marks.iterdir() if p.name.split("-")[0] in ("running", "ended")):
        time.sleep(0.05)
    processes.execute_run = train
    return train(run, *args, **kwargs)
processes.execute_run = meet_first
from spmlkit.cli import main
try:
    code = main(sys.argv[2:])
finally:
    (marks / f"ended-{me}").touch()
sys.exit(code)
"""


def test_two_sweeps_on_one_store_split_the_grid(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text(
        "name: pair\ndatasets: [yeast]\nmethods: [an, em]\nseeds: [0, 1, 2, 3, 4, 5, 6, 7]\nlrs: [0.003]\n"
        "settings: {epochs: 2, subset: 200}\nstore: pair.db\n")
    marks = tmp_path / "marks"
    marks.mkdir()
    procs = [_start(tmp_path / "s.yaml", "--jobs", "1", launcher=("-c", MEET_THEN_SWEEP, str(marks)))
             for _ in range(2)]
    try:
        for proc in procs:
            assert proc.wait(timeout=120) == 0, proc.output.read_text()[-2000:]
    finally:
        for proc in procs:
            _cleanup(proc)
    # who ran what, from the store (each record names its sweep's process), before any of the
    # sweeps' printed words: the split is the behaviour this test is named for
    store = ResultsStore(tmp_path / "pair.db")
    records = store.records()
    owners = [int(rec["owner"].split(":")[1]) for rec in records]
    ran = {proc.pid: owners.count(proc.pid) for proc in procs}
    assert all(ran.values()), f"one sweep ran the whole grid: {ran}"  # both held runs at once: both ran some
    assert len(records) == 16 and sum(ran.values()) == 16 and store.leases() == []  # each run once
    for proc in procs:  # and each sweep says what it did
        text = proc.output.read_text()
        match = re.search(r"ran (\d+) run\(s\) \(0 failed\), skipped (\d+) finished(?:, (\d+) left)?", text)
        assert match and int(match[1]) == ran[proc.pid], text
        assert sum(int(g or 0) for g in match.groups()) == 16, text  # every run: ran, found done, or left


@needs_proc
def test_a_worker_exits_when_its_parent_dies_without_the_death_signal(tmp_path: Path) -> None:
    """The portable fallback (no prctl): the worker's watch thread notices the new parent."""
    script = tmp_path / "orphan.py"
    script.write_text(
        "import os, sys, time\n"
        "from spmlkit.experiments.sweep.processes import _worker_init\n"
        "read, write = os.pipe()\n"
        "if os.fork() == 0:\n"  # the 'sweep'
        "    worker = os.fork()\n"
        "    if worker == 0:\n"  # the 'worker'
        "        _worker_init(os.getppid(), death_signal=False)\n"
        "        os.write(write, b'ready')\n"
        "        time.sleep(60)\n"
        "        os._exit(0)\n"
        "    os.read(read, 5)\n"
        "    print(worker, flush=True)\n"
        "    os._exit(0)\n"  # the 'sweep' dies; the worker is orphaned
        "os.wait()\n")
    out = subprocess.run([sys.executable, str(script)], env=_env(), capture_output=True, text=True, timeout=120,
                         check=False)
    assert out.returncode == 0, out.stderr
    pid = int(out.stdout.split()[0])
    st = _stat(pid)
    worker = [(pid, st[2])] if st else []
    try:
        assert _wait_until_gone(worker, timeout=5) == []
    finally:
        if worker and _running(worker[0]):
            os.kill(pid, signal.SIGKILL)
