"""Data-parallel training on CPU with gloo, two processes launched by torchrun.

A 2-process run equals a 1-process run with the same global batch (weights to 1e-5, the same
validation mAP, the same label state), for methods of every family; a 2-process run stopped
and resumed equals an uninterrupted one (docs/architecture.md, "Distributed training").
"""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from spmlkit.training.checkpoint import load_checkpoint
from spmlkit.training.distributed import shard_bounds

HELPER = Path(__file__).parent / "helpers" / "distributed_runs.py"
#: every method family; PU-MLC with its batch statistics over the global batch (its default is per process)
RUNS = ["an", "em_apl:hp.warmup_epochs=1", "role", "gr", "pu_mlc:batch_statistics=global"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch(out: Path, specs: list[str], nproc: int) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    for key in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    launcher = [] if nproc == 1 else ["-m", "torch.distributed.run", "--nproc_per_node", str(nproc),
                                      "--master_addr", "127.0.0.1", "--master_port", str(_free_port())]
    done = subprocess.run([sys.executable, *launcher, str(HELPER), str(out), *specs], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def _assert_same_run(a: Path, b: Path, weights: float = 1e-5, scores: float = 1e-6) -> None:
    ra, rb = (json.loads((p / "result.json").read_text()) for p in (a, b))
    assert [h["val_map"] for h in ra["history"]] == pytest.approx([h["val_map"] for h in rb["history"]], abs=scores)
    assert ra["best_epoch"] == rb["best_epoch"] and ra["test_map"] == pytest.approx(rb["test_map"], abs=scores)
    ca, cb = load_checkpoint(a / "best.pt"), load_checkpoint(b / "best.pt")
    for key, value in ca["model"].items():
        if value.is_floating_point():
            assert torch.allclose(value, cb["model"][key], atol=weights, rtol=0), key
    assert torch.equal(ca["label_state"]["kind"], cb["label_state"]["kind"])
    assert torch.allclose(ca["label_state"]["target"], cb["label_state"]["target"], atol=1e-5)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Every method once in one process and once in two (one launch each)."""
    root = tmp_path_factory.mktemp("dist")
    _launch(root / "one", RUNS, 1)
    _launch(root / "two", RUNS, 2)
    return root


def test_shards_cover_every_row_once_in_order():
    for n in (0, 1, 5, 33):
        for w in (1, 2, 3):
            bounds = [shard_bounds(n, w, r) for r in range(w)]
            assert bounds[0][0] == 0 and bounds[-1][1] == n
            assert all(bounds[i][1] == bounds[i + 1][0] for i in range(w - 1))
            sizes = [b - a for a, b in bounds]
            assert max(sizes) - min(sizes) <= 1


@pytest.mark.parametrize("method", ["an", "em_apl", "role", "gr"])
def test_two_processes_equal_one_with_the_same_global_batch(runs, method):
    _assert_same_run(runs / "one" / method, runs / "two" / method)


def test_pu_mlc_with_global_statistics_equals_one_process_up_to_its_amplified_rounding(runs):
    """PU-MLC divides its logits by a temperature alpha * std (gradients of 10-50 here), which
    amplifies the float32 rounding of summing the batch in two halves: its weights agree to
    1e-4 after two epochs (measured: 3e-5), the others' to 1e-5 (measured: 3e-8)."""
    _assert_same_run(runs / "one" / "pu_mlc", runs / "two" / "pu_mlc", weights=1e-4, scores=1e-3)


def test_em_apl_pseudo_labels_were_made_from_the_gathered_predictions(runs):
    kind = load_checkpoint(runs / "two" / "em_apl" / "best.pt")["label_state"]["kind"]
    assert kind.eq(4).sum() > 0   # pseudo-negatives exist, and are equal to one process's (test above)


def test_a_two_process_run_stopped_and_resumed_equals_an_uninterrupted_one(tmp_path):
    base = "em_apl:hp.warmup_epochs=1,epochs=3"
    _launch(tmp_path, [f"{base},name=full", f"{base},name=cut,stop_after=1", f"{base},name=cut,resume=1"], 2)
    _assert_same_run(tmp_path / "full", tmp_path / "cut")


def _global_bn_worker(rank: int, port: int, out: str) -> None:
    from spmlkit.training.distributed import Distributed, GlobalBatchNorm

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE="2", RANK=str(rank), LOCAL_RANK=str(rank))
    dist = Distributed.from_environment("cpu")
    x = (torch.randn(7, 4, 5, 5, generator=torch.Generator().manual_seed(0)) * 3 + 10).requires_grad_()
    weights = torch.randn(7, 4, 5, 5, generator=torch.Generator().manual_seed(1))
    bn = GlobalBatchNorm(4)
    part = x[dist.shard(7)]
    y = dist.gather_rows(bn(part), 7)
    (y * weights).sum().backward()
    torch.save({"y": y.detach(), "grad": x.grad[dist.shard(7)], "running": bn.running_var.clone()}, f"{out}/{rank}.pt")
    dist.close()


def test_global_batch_norm_equals_batch_norm_over_the_whole_batch(tmp_path):
    """Two processes with half a batch each normalise as one process with the whole batch."""
    import torch.multiprocessing as mp

    mp.spawn(_global_bn_worker, args=(_free_port(), str(tmp_path)), nprocs=2)
    x = (torch.randn(7, 4, 5, 5, generator=torch.Generator().manual_seed(0)) * 3 + 10).requires_grad_()
    weights = torch.randn(7, 4, 5, 5, generator=torch.Generator().manual_seed(1))
    bn = torch.nn.BatchNorm2d(4)
    y = bn(x)
    (y * weights).sum().backward()
    parts = [torch.load(tmp_path / f"{r}.pt") for r in range(2)]
    assert torch.allclose(parts[0]["y"], y.detach(), atol=1e-5)
    # each process computed the same loss on the gathered output, so each slice's gradient is
    # two (world size) times the one-process gradient; DistributedDataParallel's average undoes it
    assert torch.allclose(torch.cat([p["grad"] for p in parts]) / 2, x.grad, atol=1e-5)
    assert torch.allclose(parts[0]["running"], bn.running_var, atol=1e-5)
