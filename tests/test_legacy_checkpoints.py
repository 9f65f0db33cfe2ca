"""A run saved before a method was one object resumes: its ``last.pt`` and ``best.pt`` held the
method's parts under "components" (the loss's tensors, its extra state, the label algorithm's
state) and its ``config.yaml`` said ``image_head: linear`` where a run now says nothing (the
method's own). Such a checkpoint is written here from a run of today by putting its method's state
back into that layout, and resumed: it continues as the whole run does."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml

from spmlkit.cli import main
from spmlkit.training.checkpoint import load_checkpoint


def _as_before(method_state: dict) -> dict:
    """A method's state_dict in the layout of the checkpoints before methods were objects."""
    extra = method_state.get("_extra_state", {})
    tensors = {k: v for k, v in method_state.items() if k != "_extra_state"}
    if any(k.startswith("criterion.") for k in tensors) or "loss_extra" in extra:  # a method made of parts
        return {"loss": {k.removeprefix("criterion."): v for k, v in tensors.items()},
                "loss_extra": extra.get("loss_extra", {}), **({"labeling": extra["labeling"]}
                                                               if extra.get("labeling") is not None else {})}
    return {"loss": tensors, "loss_extra": dict(extra)}  # SMILE: its networks were its loss's


def _write_old_layout(run: Path) -> None:
    for name in ("last.pt", "best.pt"):
        ckpt = load_checkpoint(run / name)
        ckpt["components"] = _as_before(ckpt.pop("method"))
        ckpt["config"]["model"]["image_head"] = "linear"  # the default before a method could bring its head
        torch.save(ckpt, run / name)
    config = yaml.safe_load((run / "config.yaml").read_text())
    (run / "config.yaml").write_text(yaml.safe_dump(config))


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("method", ["em_apl", "smile"])
def test_a_checkpoint_of_the_layout_before_methods_were_objects_resumes_as_the_whole_run(method, tmp_path,
                                                                                        monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    args = ["train", "--method", method, "--epochs", "7", "--subset", "300", "--quiet"]
    if method == "em_apl":
        args += ["--hparam", "warmup_epochs=2"]  # APL's rounds after epochs 2..6: its state matters at the cut
    assert main(args + ["--out", "whole"]) == 0
    assert main(args + ["--out", "cut", "--stop-after", "4"]) == 0
    _write_old_layout(Path("cut"))
    assert "components" in load_checkpoint(Path("cut/last.pt")) and "method" not in load_checkpoint(Path("cut/last.pt"))
    assert main(["train", "--resume", "--out", "cut", "--quiet"]) == 0
    whole, cut = (json.loads(Path(f"{d}/result.json").read_text()) for d in ("whole", "cut"))
    assert [h["train_loss"] for h in cut["history"]] == [h["train_loss"] for h in whole["history"]]
    assert cut["test_map"] == whole["test_map"] and cut["best_epoch"] == whole["best_epoch"]
    assert "method" in load_checkpoint(Path("cut/last.pt"))  # saved again in today's layout
