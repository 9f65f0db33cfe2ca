"""Every test runs in its own empty working folder, so nothing a command writes by default
(``runs/...``, ``spmlkit-results/...``, ``predictions.csv``) lands in the checkout.

No test sees the plug-ins of the environment it runs in (``SPMLKIT_PLUGINS`` is unset).

Tests marked ``cuda`` need a CUDA GPU: where there is none (CI, the 2-core development machine)
they are skipped, and pytest's summary (``-rs``, set in pyproject.toml) shows why.
``benchmarks/gpu_check.sh`` runs them on a machine that has one.

Tests marked ``mulan`` read MULAN's own files, which no installation ships: where
``$SPMLKIT_DATA`` (or a shared folder beside the checkout) does not hold them, they are skipped
with one reason that says how to run them (tests/fixtures/mulan.py). ``SPMLKIT_DATA`` is read
when the tests are collected and unset in every test, so that nothing a test runs reads or
writes the developer's own data folder.
"""

import json
import os

import pytest
import torch
from fixtures.mulan import HAS_MULAN, NO_MULAN

NO_CUDA = "needs a CUDA GPU; this machine has none (benchmarks/gpu_check.sh runs these where there is one)"


def pytest_collection_modifyitems(config, items):
    skips = {"cuda": None if torch.cuda.is_available() else pytest.mark.skip(reason=NO_CUDA),
             "mulan": None if HAS_MULAN else pytest.mark.skip(reason=NO_MULAN)}
    for item in items:
        for marker, skip in skips.items():
            if skip is not None and marker in item.keywords:
                item.add_marker(skip)


@pytest.fixture(autouse=True)
def _run_in_a_fresh_folder(tmp_path, monkeypatch):
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.delenv("SPMLKIT_PLUGINS", raising=False)  # the developer's own plug-ins load in no test
    monkeypatch.delenv("SPMLKIT_DATA", raising=False)  # nor their data folder (fixtures/mulan.py read it)


@pytest.fixture
def one_thread():
    """Runs compared bit for bit, or timed, use one CPU thread (as sweep workers do)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture
def record(request):
    """``record(name, value)``: a measurement worth reporting (a tolerance's measured value, a
    speed-up). With ``SPMLKIT_MEASUREMENTS=FILE`` set (benchmarks/gpu_check.sh sets it) each is
    appended to FILE as a JSON line naming its test; otherwise they are only printed."""
    path = os.environ.get("SPMLKIT_MEASUREMENTS")

    def write(name: str, value) -> None:
        print(f"{request.node.nodeid}: {name} = {value}")
        if path:
            with open(path, "a") as fh:
                fh.write(json.dumps({"test": request.node.nodeid, "name": name, "value": value}) + "\n")

    return write
