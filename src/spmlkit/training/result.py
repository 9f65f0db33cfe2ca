"""The one result type of a run, whatever its data source and entry point."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torch import nn

from ..labels import LabelState
from .config import RunConfig

__all__ = ["RunResult"]


@dataclass
class RunResult:
    """What a run produced: the selected epoch, its validation and test numbers, the history.

    ``model`` and ``label_state`` are the live objects of the selected epoch (for the estimator
    and for users of :func:`~spmlkit.training.train` in their own code); they are not part of
    :meth:`to_record`, the form the results store and ``result.json`` keep.
    """

    config: RunConfig
    best_epoch: int
    val_map: float
    test_map: float
    history: list[dict[str, float]]
    test_metrics: dict[str, float] = field(default_factory=dict)
    test_ap: list[float] = field(default_factory=list)
    analysis: dict[str, Any] = field(default_factory=dict)
    class_names: list[str] = field(default_factory=list)
    seconds: float = 0.0
    images_per_second: float = float("nan")
    stopped_early: bool = False
    finished: bool = True
    resumed_from: int = 0
    #: peak memory of the run (:func:`~spmlkit.training.device.peak_memory`): the host's is the
    #: process's peak resident set, the GPU's is None off CUDA; None where not measured
    peak_host_memory_bytes: int | None = None
    peak_gpu_memory_bytes: int | None = None
    #: how the run trained, as its training step saw it (docs/architecture.md, "How a run trained"):
    #: the processes of its torch.distributed group (1: a plain run), the most runs whose steps it
    #: took together as one batched group (1: alone), whether its training forward went through
    #: torch.compile, and the dtype of that forward's logits (bfloat16 under bf16 autocast; None
    #: when it took no step, as a resumed run that had already finished)
    processes: int = 1
    group_size: int = 1
    compiled: bool = False
    forward_dtype: str | None = None
    out: Path | None = None
    #: where the numbers came from (:func:`~spmlkit.training.provenance.run_provenance`): versions,
    #: command line, device, start and end times, the project's git commit when there is one
    provenance: dict[str, Any] = field(default_factory=dict)
    #: the one line of a run that diverged (training/divergence.py): a failed run without test
    #: numbers, which :func:`~spmlkit.training.train` raises and a group returns
    diverged: str | None = None
    model: nn.Module | None = field(default=None, repr=False, compare=False)
    label_state: LabelState | None = field(default=None, repr=False, compare=False)

    def labels_measured(self) -> dict[str, str | None]:
        """Which labels ``val_map`` and ``test_map`` are measured on: ``"full"`` labels (a benchmark's
        validation rows, any labelled test list) or ``"observed"`` ones (the observed positives of the
        validation rows, where nothing else exists: docs/protocol.md, "Your own data"); None for a
        number that does not exist (no validation split, no labelled test list). A record keeps
        them beside the numbers, so an observed-label mAP is never read as one on full labels."""
        def exists(value: float) -> bool:
            return value == value  # not NaN

        val = "full" if self.config.data.val_variant == "clean" else "observed"
        return {"val_map_labels": val if exists(self.val_map) else None,
                "test_map_labels": "full" if exists(self.test_map) else None}

    def to_record(self) -> dict[str, Any]:
        """Everything JSON-able: what the results store and ``result.json`` keep.

        A peak memory that was not measured is left out rather than written as null, so a run
        off CUDA has no ``peak_gpu_memory_bytes`` key, and a record written before these keys
        existed reads the same as one of a run that did not measure them; so is a
        ``forward_dtype`` of a run that took no step."""
        optional = {"peak_host_memory_bytes": self.peak_host_memory_bytes,
                    "peak_gpu_memory_bytes": self.peak_gpu_memory_bytes, "forward_dtype": self.forward_dtype}
        return {"config": self.config.to_dict(), "best_epoch": self.best_epoch, "val_map": self.val_map,
                "test_map": self.test_map, **self.labels_measured(), "test_metrics": self.test_metrics,
                "test_ap": self.test_ap,
                "history": self.history, "analysis": self.analysis, "class_names": self.class_names,
                "seconds": self.seconds, "images_per_second": self.images_per_second,
                "stopped_early": self.stopped_early, "finished": self.finished, "resumed_from": self.resumed_from,
                "processes": self.processes, "group_size": self.group_size, "compiled": self.compiled,
                **{k: v for k, v in optional.items() if v is not None}, **self.provenance}
