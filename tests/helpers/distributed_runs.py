"""Train several small digits-mosaic runs in one process group (launched by torchrun), or in one
process when no torchrun environment is set. Used by tests/test_distributed.py:

    python tests/helpers/distributed_runs.py OUT METHOD[:k=v,...] ...          (one process)
    torchrun --nproc_per_node 2 tests/helpers/distributed_runs.py OUT ...       (two processes)

One launch for all methods keeps the test fast: torch and the mosaic data load once. Every run
names its device, the CPU (gloo): under ``--device auto`` a machine with one GPU would give it to
both processes, which NCCL refuses, and the one-process runs they are compared with would
train on the GPU.
"""

import os
import sys

from spmlkit.experiments.presets import resolve_config
from spmlkit.training import train
from spmlkit.training.distributed import Distributed


def _value(text: str):
    """A setting's value from its text: true / false, a list of ints (``32|24``), a number, or the text."""
    if text in ("true", "false"):
        return text == "true"
    if "|" in text:
        return [int(v) for v in text.split("|")]
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def main(out: str, specs: list[str]) -> None:
    device = os.environ.get("SPMLKIT_TEST_DEVICE", "cpu")
    group = Distributed.from_environment(device)  # joined once: every run below finds it open and leaves it
    for spec in specs:
        method, _, extra = spec.partition(":")
        values = dict(kv.split("=", 1) for kv in extra.split(",") if kv)
        stop_after = int(values.pop("stop_after")) if "stop_after" in values else None
        resume = values.pop("resume", "0") == "1"
        name = values.pop("name", method)
        hparams = {k[3:]: float(v) if "." in v else int(v) for k, v in values.items() if k.startswith("hp.")}
        settings = {k: _value(v) for k, v in values.items() if not k.startswith("hp.")}
        config = resolve_config({
            "dataset": "digits-mosaic", "method": method, "backbone": "small:cnn-gn", "mosaic_train": 240,
            "mosaic_test": 60, "hflip": True, "batch_size": 33, "epochs": int(settings.pop("epochs", 2)), "device": device,
            "optimizer": "sgd", "lr": float(settings.pop("lr", 0.01)), "num_threads": 1, "hparams": hparams, "out": f"{out}/{name}",
            **settings,
        })
        train(config, stop_after=stop_after, resume=resume)
    group.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
