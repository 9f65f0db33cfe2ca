"""Every test runs in its own empty working folder, so nothing a command writes by default
(``runs/...``, ``spmlkit-results/...``, ``predictions.csv``) lands in the checkout."""

import pytest
import torch


@pytest.fixture(autouse=True)
def _run_in_a_fresh_folder(tmp_path, monkeypatch):
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)


@pytest.fixture
def one_thread():
    """Runs compared bit for bit, or timed, use one CPU thread (as sweep workers do)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
