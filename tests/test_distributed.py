"""Data-parallel training on CPU with gloo, two processes launched by torchrun.

A 2-process run equals a 1-process run with the same global batch (weights to 1e-5, the same
validation mAP, the same label state), for methods of every family; a 2-process run stopped
and resumed equals an uninterrupted one (docs/architecture.md, "Distributed training"). Every
run names the CPU (``device: cpu`` in tests/helpers/distributed_runs.py), on a machine with a
GPU too. More processes per node than GPUs, on CUDA, is one line before any process group is
made; that is checked here with CUDA's answers replaced, no GPU or process group needed.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from spmlkit.cli import main
from spmlkit.errors import InputError
from spmlkit.training.checkpoint import load_checkpoint
from spmlkit.training.distributed import Distributed, shard_bounds

HELPER = Path(__file__).parent / "helpers" / "distributed_runs.py"
#: every method family; PU-MLC with its batch statistics over the global batch (its default is per process)
RUNS = ["an", "em_apl:hp.warmup_epochs=1", "role", "gr", "pu_mlc:batch_statistics=global",
        # a recipe (docs/protocol.md, "Recipes"): crops drawn per row and cut from each process's slice, a schedule, an EMA
        "an:name=recipe,augment=multiscale_crop,crop_scale=32,crop_sizes=32|24|16,lr_schedule=onecycle,"
        "schedule_epochs=3,ema_decay=0.9"]


def _launch(out: Path, specs: list[str], nproc: int) -> None:
    """``specs`` trained by ``nproc`` processes. torchrun's ``--standalone`` rendezvous binds port 0
    and keeps the socket (and current torch hands that store to the workers), so the operating
    system picks a free port and nobody can take it between a probe and the bind, as a port
    found free here and handed to torchrun could be."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    for key in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    launcher = [] if nproc == 1 else ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(nproc)]
    done = subprocess.run([sys.executable, *launcher, str(HELPER), str(out), *specs], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def _assert_same_run(a: Path, b: Path, weights: float = 1e-5, scores: float = 1e-6,
                     processes: tuple[int, int] = (1, 2)) -> None:
    """Run ``b`` equals run ``a``, and each was trained by as many processes as the comparison
    is about (``processes``): each process training the whole run alone gives the same numbers."""
    ra, rb = (json.loads((p / "result.json").read_text()) for p in (a, b))
    assert (ra["processes"], rb["processes"]) == processes, "the runs were not trained by the processes compared"
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


def test_a_recipe_with_crops_a_schedule_and_an_ema_in_two_processes_equals_one(runs):
    _assert_same_run(runs / "one" / "recipe", runs / "two" / "recipe")
    history = json.loads((runs / "two" / "recipe" / "result.json").read_text())["history"]
    assert all("val_map_ema" in h and "lr" in h for h in history)


def test_pu_mlc_with_global_statistics_equals_one_process_up_to_its_amplified_rounding(runs):
    """PU-MLC divides its logits by a temperature alpha * std (gradients of 10-50 here), which
    amplifies the float32 rounding of summing the batch in two halves: its weights agree to
    1e-4 after two epochs (measured: 3e-5), the others' to 1e-5 (measured: 3e-8)."""
    _assert_same_run(runs / "one" / "pu_mlc", runs / "two" / "pu_mlc", weights=1e-4, scores=1e-3)


def test_em_apl_pseudo_labels_were_made_from_the_gathered_predictions(runs):
    """The label states compared above are not empty: APL's one round (after warm-up epoch 1 of
    2) took floor(0.9 * U_c) of each class's U_c unobserved training entries, from the
    predictions the two processes gathered (theta 0.9, APL's default)."""
    from spmlkit.labels import Kind
    from spmlkit.protocol import observe_labels, split_train_val
    from spmlkit.training.config import config_from_dict
    from spmlkit.training.run_data import load_run_data

    processes = json.loads((runs / "two" / "em_apl" / "result.json").read_text())["processes"]
    assert processes == 2, "the run was not trained by the processes compared"
    best = load_checkpoint(runs / "two" / "em_apl" / "best.pt")
    truth = load_run_data(config_from_dict(best["config"])).Y_train
    unobserved = (observe_labels(truth)[split_train_val(len(truth))[0]] == 0).sum(0)
    quota = sum(int(np.floor(0.9 * u)) for u in unobserved)
    assert int(best["label_state"]["kind"].eq(Kind.PSEUDO_NEGATIVE).sum()) == quota


def test_a_two_process_run_stopped_and_resumed_equals_an_uninterrupted_one(tmp_path):
    base = "em_apl:hp.warmup_epochs=1,epochs=3"
    _launch(tmp_path, [f"{base},name=full", f"{base},name=cut,stop_after=1", f"{base},name=cut,resume=1"], 2)
    _assert_same_run(tmp_path / "full", tmp_path / "cut", processes=(2, 2))


def _global_bn_worker(rank: int, port: int, out: str) -> None:
    """One of two processes, joining as a torchrun worker does: through the store its launcher
    serves at ``MASTER_PORT`` (``TORCHELASTIC_USE_AGENT_STORE``), here the test's."""
    from spmlkit.training.distributed import Distributed, GlobalBatchNorm

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), TORCHELASTIC_USE_AGENT_STORE="True",
                      TORCHELASTIC_RESTART_COUNT="0", WORLD_SIZE="2", RANK=str(rank), LOCAL_RANK=str(rank))
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

    from torch.distributed import TCPStore

    # the workers' rendezvous store, served from here on a port the operating system picks (port
    # 0) and held while they run, as torchrun serves its workers': no port is probed, then bound
    store = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    mp.spawn(_global_bn_worker, args=(store.port, str(tmp_path)), nprocs=2)
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


def _torchrun_rank0(monkeypatch, processes: int, gpus: int) -> list[str]:
    """This process as rank 0 of ``processes`` that torchrun started on a node with ``gpus`` CUDA
    GPUs. CUDA's answers are replaced, and choosing a GPU or making a process group is recorded
    in the returned list instead of done."""
    import torch.distributed as dist

    calls: list[str] = []
    monkeypatch.setenv("WORLD_SIZE", str(processes))
    monkeypatch.setenv("LOCAL_WORLD_SIZE", str(processes))
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpus > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: calls.append(f"set_device {device}"))
    monkeypatch.setattr(dist, "is_initialized", lambda: False)
    monkeypatch.setattr(dist, "init_process_group", lambda backend, **kwargs: calls.append(f"init {backend}"))
    monkeypatch.setattr(dist, "get_backend", lambda group=None: calls[-1].split()[-1])
    return calls


@pytest.mark.parametrize("device", ["auto", "cuda:0"])
def test_more_processes_per_node_than_gpus_is_one_line_before_any_process_group(monkeypatch, device):
    calls = _torchrun_rank0(monkeypatch, processes=3, gpus=2)
    with pytest.raises(InputError) as refused:
        Distributed.from_environment(device)
    message = str(refused.value)
    assert "\n" not in message
    assert "3 processes per node" in message and "this machine has 2 CUDA GPUs" in message
    assert "--nproc_per_node 2 or fewer" in message and "--device cpu" in message and "(gloo)" in message
    assert calls == []  # refused before a GPU was chosen or a process group made


def test_the_refusal_reaches_the_command_line_as_one_line_and_leaves_no_run_folder(monkeypatch, tmp_path, capsys):
    calls = _torchrun_rank0(monkeypatch, processes=2, gpus=1)
    run = tmp_path / "run"
    assert main(["train", "--dataset", "digits-mosaic", "--epochs", "1", "--out", str(run), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err
    assert "2 processes per node" in err and "1 CUDA GPU," in err and "--nproc_per_node 1 or fewer" in err
    assert calls == [] and not run.exists()


def test_a_launcher_without_local_world_size_is_counted_from_its_local_rank(monkeypatch):
    calls = _torchrun_rank0(monkeypatch, processes=2, gpus=1)
    monkeypatch.delenv("LOCAL_WORLD_SIZE")
    monkeypatch.setenv("LOCAL_RANK", "1")  # the second process of this node: at least two share it
    with pytest.raises(InputError, match="2 processes per node .* 1 CUDA GPU,"):
        Distributed.from_environment("auto")
    assert calls == []


def test_as_many_processes_as_gpus_or_any_number_on_the_cpu_start_their_group(monkeypatch):
    calls = _torchrun_rank0(monkeypatch, processes=2, gpus=2)
    group = Distributed.from_environment("auto")
    assert calls == ["set_device 0", "init nccl"]
    assert (group.backend, group.world_size, group.rank, group.owns_group) == ("nccl", 2, 0, True)
    calls = _torchrun_rank0(monkeypatch, processes=4, gpus=1)
    group = Distributed.from_environment("cpu")  # --device cpu: gloo, whatever the GPUs
    assert calls == ["init gloo"] and (group.backend, group.world_size) == ("gloo", 4)

