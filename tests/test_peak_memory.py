"""A run records the peak memory it needed (docs/architecture.md, "Peak memory"): the process's
peak resident set on the host, and on CUDA the allocator's peak since the run started; the
summary of ``spmlkit train`` shows it, and records without it still read."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
import torch

from spmlkit.cli import main
from spmlkit.cli.train import _cost
from spmlkit.data.digits_mosaic import DigitsMosaicDataset, make_digits_mosaic
from spmlkit.experiments.presets import DATASET_DEFAULTS, resolve_config
from spmlkit.experiments.store import ResultsStore
from spmlkit.training import RunConfig, RunResult, train, train_group
from spmlkit.training.device import peak_memory

MOSAIC = {**DATASET_DEFAULTS["digits-mosaic"], "dataset": "digits-mosaic", "mosaic_train": 120, "mosaic_test": 30,
          "batch_size": 32, "method": "an", "epochs": 1}

pytestmark = pytest.mark.usefixtures("one_thread")


def _resident_bytes(field: str) -> int:
    """This process's resident memory as Linux's ``/proc/self/status`` says it, in bytes (the file
    counts kB): ``VmRSS`` now, ``VmHWM`` its peak so far. A measure taken independently of
    :func:`~spmlkit.training.device.peak_memory`, so a unit wrong there cannot hide here."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            value, unit = line.split()[1:3]
            assert unit == "kB", line
            return int(value) * 1024
    raise AssertionError(f"no {field} in /proc/self/status")


#: how far Linux's two readings of one process's memory (``/proc/self/status`` and ``getrusage``)
#: may differ: it counts resident pages per thread and adds each thread's count to the process's
#: lazily (64 pages, 256 KiB, at a time), so readings taken moments apart differ by up to that
#: per thread (measured here: 49 KB). The unit error this guards against is a factor of 1024.
SLACK = 16 * 2**20

needs_proc = pytest.mark.skipif(not Path("/proc/self/status").is_file(),
                                reason="reads the process's resident memory from Linux's /proc/self/status")


def _lower_bound(result: RunResult, batch_size: int) -> int:
    """Bytes the run must have held at once: its model's parameters and one batch of its inputs."""
    parameters = sum(p.numel() * p.element_size() for p in result.model.parameters())
    image = DigitsMosaicDataset(make_digits_mosaic(num_train=1, num_test=1, seed=0).train_images)[0][0]
    return parameters + batch_size * image.numel() * image.element_size()


def test_a_cpu_run_records_its_process_peak_and_no_gpu_peak(tmp_path: Path) -> None:
    result = train(resolve_config({**MOSAIC, "device": "cpu", "out": str(tmp_path / "run")}))
    record = json.loads((tmp_path / "run" / "result.json").read_text())
    peak = record["peak_host_memory_bytes"]
    assert isinstance(peak, int) and peak == result.peak_host_memory_bytes
    assert peak >= _lower_bound(result, MOSAIC["batch_size"])
    assert "peak_gpu_memory_bytes" not in record and result.peak_gpu_memory_bytes is None


@needs_proc
def test_each_run_of_a_batched_group_records_the_groups_peak() -> None:
    configs = [resolve_config({"dataset": "yeast", "method": "an", "subset": 200, "epochs": 2, "device": "cpu",
                               "seed": seed}) for seed in (0, 1)]
    resident = _resident_bytes("VmRSS")  # the process's peak can only be higher than what it holds now
    results = train_group(configs)
    high = _resident_bytes("VmHWM")
    peaks = {r.peak_host_memory_bytes for r in results}
    assert len(peaks) == 1  # one group, one process: one peak
    (peak,) = peaks
    features = 200 * 103 * 4  # the float32 rows of the subset the group trains on
    parameters = sum(p.numel() * p.element_size() for r in results for p in r.model.parameters())
    assert isinstance(peak, int) and peak >= features + parameters
    assert resident - SLACK <= peak <= high + SLACK, \
        f"the group's peak {peak} bytes is not the process's ({resident}..{high} bytes)"
    assert all("peak_gpu_memory_bytes" not in r.to_record() for r in results)


def test_the_summary_shows_the_peak_that_result_json_holds(tmp_path: Path, capsys) -> None:
    run = tmp_path / "run"
    assert main(["train", "--dataset", "yeast", "--subset", "200", "--epochs", "2", "--device", "cpu",
                 "--out", str(run), "--quiet"]) == 0
    said = " ".join(capsys.readouterr().out.split())
    peak = json.loads((run / "result.json").read_text())["peak_host_memory_bytes"]
    shown = re.search(r"peak memory (\d+(?:\.\d)?) (MB|GB) \(host process\)", said)
    assert shown, said
    assert float(shown.group(1)) == round(peak / (1e6 if shown.group(2) == "MB" else 1e9), 0 if shown.group(2) == "MB" else 1)
    # on CUDA the GPU's peak is the one shown; a run that measured nothing shows its time alone
    res = RunResult(RunConfig(), 1, 0.5, 0.5, [], seconds=12.34, peak_host_memory_bytes=3_000_000_000,
                    peak_gpu_memory_bytes=1_234_000_000)
    assert _cost(res) == "12.3 s, peak memory 1.2 GB (GPU)"
    res.peak_host_memory_bytes = res.peak_gpu_memory_bytes = None
    assert _cost(res) == "12.3 s"


def test_records_with_and_without_the_peak_read_from_one_store(tmp_path: Path) -> None:
    """A store written before runs recorded their peak memory keeps working beside new records."""
    result = train(resolve_config({"dataset": "yeast", "method": "an", "subset": 200, "epochs": 1, "device": "cpu"}))
    head = {"sweep": "s", "status": "ok", "error": None, "dataset": "yeast", "method": "an",
            "observation": "single_positive", "seed": 0, "lr": 3e-3, "batch_size": 64, "hparams": {}}
    new = {**head, "run_id": "new", **result.to_record()}
    old = {k: v for k, v in new.items() if not k.startswith("peak_")} | {"run_id": "old"}
    store = ResultsStore(tmp_path / "r.db")
    store.add_many([old, new])
    records = {r["run_id"]: r for r in store.records()}
    assert records["new"]["peak_host_memory_bytes"] == result.peak_host_memory_bytes
    assert "peak_host_memory_bytes" not in records["old"]
    frame = store.to_dataframe().set_index("run_id")
    assert frame.loc["new", "peak_host_memory_bytes"] == result.peak_host_memory_bytes
    assert math.isnan(frame.loc["old", "peak_host_memory_bytes"])


@pytest.mark.cuda
def test_a_cuda_run_records_the_gpu_peak_since_it_started(tmp_path: Path) -> None:
    # something bigger allocated before the run must not count: the peak is reset at its start
    ballast = torch.empty(4 * 2**30, dtype=torch.uint8, device="cuda")
    del ballast
    result = train(resolve_config({**MOSAIC, "device": "cuda", "num_workers": 0, "out": str(tmp_path / "run")}))
    record = json.loads((tmp_path / "run" / "result.json").read_text())
    peak = record["peak_gpu_memory_bytes"]
    assert isinstance(peak, int) and peak == result.peak_gpu_memory_bytes
    assert _lower_bound(result, MOSAIC["batch_size"]) <= peak < 4 * 2**30
    assert isinstance(record["peak_host_memory_bytes"], int)


@needs_proc
def test_a_sweep_keeps_each_runs_peak_in_the_store(tmp_path: Path) -> None:
    from spmlkit.experiments.sweep import SweepSpec, run_sweep

    spec = SweepSpec(name="peak", datasets=["yeast"], methods=["an"], seeds=[0, 1], settings={"epochs": 1},
                     store=str(tmp_path / "results.db"))
    before = peak_memory(torch.device("cpu"))[0]
    resident = _resident_bytes("VmRSS")
    run_sweep(spec)  # in this process: a run's peak is this process's peak while it trained
    after, high = peak_memory(torch.device("cpu"))[0], _resident_bytes("VmHWM")
    records = ResultsStore(tmp_path / "results.db").to_dataframe().to_dict("records")
    assert len(records) == 2
    for record in records:
        peak = record["peak_host_memory_bytes"]
        assert isinstance(peak, int)
        assert before <= peak <= after
        # in bytes: between what the process held before the sweep and its peak after, as Linux says
        assert resident - SLACK <= peak <= high + SLACK, \
            f"a run's peak {peak} bytes is not the process's ({resident}..{high} bytes)"
        assert "peak_gpu_memory_bytes" not in record or math.isnan(record["peak_gpu_memory_bytes"])
