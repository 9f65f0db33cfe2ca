"""A run's folder: its resolved config, per-epoch metrics, checkpoints and final numbers.

Layout (``config.output.out``)::

    config.yaml          the resolved configuration (the run can be repeated from it); its
                         relative paths are relative to the run folder (:mod:`.run_paths`)
    metrics.csv/.json    one row per finished epoch
    last.pt              everything needed to resume: written atomically after every epoch
    best.pt              the best validation epoch: model, label state, config, class names,
                         threshold and input transform (what ``spmlkit predict`` and
                         ``spmlkit export`` load)
    result.json          the final result (test metrics, analysis, history) once finished
    diverged.json        instead of result.json, when the run diverged: the one line that says
                         where and why, the epochs it finished, its config (docs/protocol.md,
                         "Runs that diverge")
    tensorboard/         event files, when the run logs to TensorBoard (``loggers``)
    .spmlkit.json        marks the folder as a run folder (:mod:`spmlkit.output_dir`), written first

Both checkpoints hold only tensors, plain containers, numbers, strings, bools and None, so
that they load with ``torch.load(..., weights_only=True)`` (:mod:`.checkpoint`): loading one
never runs code.

Nothing of an earlier run is replaced without the user asking: starting a run in a folder
that already holds one is refused unless it is resumed (``resume=True``) or replaced on
purpose (``overwrite=True``). Nothing of anyone else's is replaced at all: a folder that holds
files spmlkit did not write, or another kind of spmlkit output, is refused even with
``overwrite=True`` (:mod:`spmlkit.output_dir`).
A run that fails before its first epoch is saved (no backbone
weights offline, a Ctrl-C during the first epoch) has nothing to resume: it takes its
``config.yaml`` (and a folder it made) away again (:meth:`RunDirectory.discard_unstarted`), and a
folder that holds nothing but a ``config.yaml`` (a process killed outright) is replaced by the next
start without ``--overwrite``. Each refusal names the one option that gets out.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

from ..io import atomic_torch_save, atomic_write_json, atomic_write_text
from ..output_dir import MARKER, RUN, check_output_dir, claim_output_dir, output_kind
from ..plugins import loaded_plugins, plugin_code
from .checkpoint import load_checkpoint, numpy_rng_state, plain_checkpoint, set_numpy_rng_state
from .config import RESUME_FREE, RunConfig, applies_to, flat_settings, load_config_file, saved_settings
from .loop import LoopState, Run
from .network import own_part
from .run_data import feature_scaling
from .run_paths import absolute_paths, paths_from_run_folder, paths_relative_to

__all__ = ["RunDirectory", "feature_spec"]

_CONFIG_HEADER = ("# spmlkit run configuration. Relative paths (root, prepared, a feature folder as dataset) are "
                  "relative to this folder.\n")
_RUN_FILES = ("config.yaml", "last.pt", "best.pt", "metrics.csv", "metrics.json", "result.json", "diverged.json")
_DIVERGED = "diverged.json"
#: what a run writes from its first finished epoch on: a folder without any of them holds no work
_WORK_FILES = _RUN_FILES[1:]


class RunDirectory:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._made: list[Path] = []  # the folders start() created, outermost first
        #: what the run's data holds (:func:`~spmlkit.data.data_digest.data_digest`), read by start()
        self._data_digest: str | None = None


    @property
    def last(self) -> Path:
        return self.path / "last.pt"

    @property
    def best(self) -> Path:
        return self.path / "best.pt"

    def holds_a_run(self) -> bool:
        """Whether the folder holds work of a run: an epoch's checkpoint, metrics or a result (a
        ``config.yaml`` alone is a start that never finished an epoch, and is not kept)."""
        return any((self.path / name).exists() for name in _WORK_FILES)

    @staticmethod
    def holds_run_files(path: Path) -> bool:
        """Whether an unmarked folder (:mod:`spmlkit.output_dir`) is a run folder of an spmlkit
        older than the marker: its ``config.yaml`` (a run writes it first) is spmlkit's, with a
        dataset and a method. File names alone prove nothing: ``last.pt`` and ``config.yaml``
        are common names in anyone's experiments."""
        try:
            values = saved_settings(yaml.safe_load((path / "config.yaml").read_text()))
        except (OSError, ValueError, AttributeError, yaml.YAMLError):
            return False
        return "dataset" in values and "method" in values

    def finished_epochs(self) -> int:
        """How many epochs the run in this folder finished, from its ``metrics.json`` (0: none)."""
        try:
            return len(json.loads((self.path / "metrics.json").read_text()))
        except (OSError, ValueError):
            return 0

    def start(self, config: RunConfig, *, resume: bool, overwrite: bool, kind: str | None = None
              ) -> dict[str, Any] | None:
        """Prepare the folder; returns the checkpoint to resume from (or None). ``kind`` (features |
        images) keeps the other kind's settings out of ``config.yaml``."""
        if self.path.exists() and not self.path.is_dir():
            raise ValueError(f"run folder {self.path} is an existing file; choose another --out")
        check_output_dir(self.path, RUN, option="--out", recognise=RunDirectory.holds_run_files)
        from ..data.data_digest import data_digest

        self._data_digest = data_digest(config.data.dataset, config.data.prepared)
        ckpt = None
        if resume:
            ckpt = self._resume_checkpoint(config, kind)
        else:
            if self.holds_a_run() and not overwrite:
                raise ValueError(self._refusal())
            if self.path.is_dir():  # (a path under a file is said in one line below, where it is created)
                for name in _RUN_FILES:
                    (self.path / name).unlink(missing_ok=True)
                shutil.rmtree(self.path / "tensorboard", ignore_errors=True)
        try:
            self._made = [p for p in (*reversed(self.path.parents), self.path) if not p.exists()]
            claim_output_dir(self.path, RUN, option="--out", recognise=RunDirectory.holds_run_files)
            atomic_write_text(self.path / "config.yaml", _CONFIG_HEADER + yaml.safe_dump(self.saved_config(config, kind),
                                                                                          sort_keys=False))
        except OSError as exc:
            raise ValueError(f"cannot write the run folder {self.path}: {exc.strerror or exc}") from None
        return ckpt

    def saved_config(self, config: RunConfig, kind: str | None = None) -> dict[str, Any]:
        """``config`` in sections as this folder saves it (``config.yaml``, checkpoints): relative
        paths relative to the run folder (:mod:`.run_paths`), so it resumes from anywhere; ``kind``
        (features | images) leaves out the other kind's settings (:meth:`RunConfig.to_dict`)."""
        return RunConfig(**paths_relative_to(config.flat(), self.path)).to_dict(kind)

    def saved_settings(self) -> dict[str, Any]:
        """The flat settings of this folder's ``config.yaml``, its paths resolved against the folder
        (what ``--resume`` continues with, from whatever folder it is typed in)."""
        return paths_from_run_folder(saved_settings(load_config_file(self.path / "config.yaml")), self.path)

    @staticmethod
    def config_file_settings(path: str | Path) -> dict[str, Any]:
        """The flat settings of a config file (``--config``). A run's own ``config.yaml`` has its
        paths relative to the run folder, and they are read so (repeating a run from anywhere);
        any other file's paths are the working folder's, as the user wrote them."""
        path = Path(path)
        values = flat_settings(load_config_file(path), where=f"config file {path}")
        if path.name == "config.yaml" and output_kind(path.parent) == RUN:
            return paths_from_run_folder(values, path.parent)
        return values

    def _refusal(self) -> str:
        """Why a fresh start is refused, and the one option that continues or replaces the run."""
        if (self.path / "result.json").exists():
            return (f"{self.path} already holds a finished run; to replace it, run the same command with "
                    "--overwrite (or write to another --out)")
        if (self.path / _DIVERGED).exists():
            return (f"{self.path} holds a run that diverged ({_DIVERGED}); to start it afresh, run the command with "
                    "--overwrite (or write to another --out)")
        done = self.finished_epochs()
        epochs = f" ({done} epoch{'s' if done != 1 else ''} done)" if done else ""
        return (f"{self.path} holds an unfinished run{epochs}; continue it with `spmlkit train --resume --out "
                f"{self.path}` (or add --overwrite to start it afresh)")

    def discard_unstarted(self) -> None:
        """Take away what :meth:`start` wrote when the run ends before its first checkpoint: its
        ``config.yaml``, a TensorBoard folder, and the folders it created while they are empty.
        A run with a checkpoint is left whole (it continues with ``--resume``)."""
        if self.last.exists() or (self.path / _DIVERGED).exists():  # a diverged run keeps its record
            return
        (self.path / "config.yaml").unlink(missing_ok=True)
        shutil.rmtree(self.path / "tensorboard", ignore_errors=True)
        if self.path in self._made:  # a folder this start made: its marker goes too, so no folder is left
            (self.path / MARKER).unlink(missing_ok=True)
        for folder in reversed(self._made):
            try:
                folder.rmdir()  # only when empty: the user's own files are never removed
            except OSError:
                break
        self._made = []

    def _resume_checkpoint(self, config: RunConfig, kind: str | None = None) -> dict[str, Any]:
        if (self.path / _DIVERGED).is_file():
            raise ValueError(f"--resume: the run in {self.path} diverged ({_DIVERGED}); resuming would repeat it from "
                             "its last saved epoch: start it afresh with --overwrite and a smaller lr")
        if not self.last.is_file():
            why = ("it stopped before its first epoch was saved" if self.path.is_dir() and not self.holds_a_run()
                   else "there is no run there")
            raise FileNotFoundError(f"--resume: no checkpoint at {self.last} ({why}); run the same command without "
                                    "--resume to start it")
        ckpt = load_checkpoint(self.last)
        self._check_same_code(ckpt, config)
        defaults = RunConfig().flat()  # a setting added since the run started counts as its default
        held = absolute_paths(paths_from_run_folder(saved_settings(ckpt["config"]), self.path))  # nested or flat
        # settings of the other kind of run change nothing (a feature run's image_head)
        compared = [k for k in defaults if k not in RESUME_FREE and (kind is None or applies_to(k) in (None, kind))]
        current = absolute_paths(config.flat())
        saved, now = {k: held.get(k, defaults[k]) for k in compared}, {k: current[k] for k in compared}
        for settings in (saved, now):  # None: the method's own part, as it was before settings could say None
            for key in ("image_head", "bottleneck"):
                if key in settings:
                    settings[key] = own_part(key, settings[key], settings["method"], settings["hparams"])
        diff = sorted(k for k in now if saved.get(k) != now[k])
        if diff:
            raise ValueError(f"--resume: the run in {self.path} was started with different settings "
                             f"({', '.join(diff)}); resume with the same config or start a new run folder")
        self._check_same_data(ckpt.get("data_digest"), config)
        # the best epoch's snapshot travels with the checkpoint, so that under torch.distributed
        # rank 0 alone reads the folder and hands both to every process
        best = load_checkpoint(self.best)
        ckpt["best_snapshot"] = {k: best[k] for k in ("model", _method_key(best), "label_state")}
        return ckpt

    def _check_same_data(self, saved: str | None, config: RunConfig) -> None:
        """Refuse to resume on data whose files changed since the run's last epoch was saved (a
        feature folder prepared or extracted again under the same path): its epochs would mix
        two data sets. A change of the labels alone is also caught by the label state; of the
        features, only here. A checkpoint of an spmlkit from before the digest has none to compare."""
        if saved is None or self._data_digest is None or saved == self._data_digest:
            return
        data = config.data.prepared if config.data.prepared else config.data.dataset
        raise ValueError(f"--resume: the data of the run in {self.path} changed since its last epoch was saved (the "
                         f"files of {data} hold other bytes than it trained on: digest {self._data_digest[:12]}, was "
                         f"{saved[:12]}); resume with the data it started on, or start the run afresh on this data "
                         "(another --out, or --overwrite)")

    def _check_same_code(self, ckpt: dict[str, Any], config: RunConfig) -> None:
        """Refuse to resume a run whose plug-in code changed since its epochs were trained.

        ``last.pt`` keeps the identity of the plug-in code the run trains with (:func:`~spmlkit.
        plugins.plugin_code`: each file's SHA-256, or its package's version). Resumed on other code,
        the run's first epochs would come from one version and the rest from another, while its
        ``result.json`` named the last alone. A checkpoint of an spmlkit from before this record
        says nothing either way, and is resumed."""
        if "plugin_code" not in ckpt:
            return
        then, now = list(ckpt["plugin_code"]), plugin_code(config.method.name, config.data.dataset)
        if then == now:
            return
        before, after = dict(_code_entry(e) for e in then), dict(_code_entry(e) for e in now)
        changed = sorted(name for name in before.keys() | after.keys() if before.get(name) != after.get(name))
        paths = {p.name: p.path for p in loaded_plugins() if p.path}
        what = "; ".join(f"{name}{f' ({paths[name]})' if name in paths else ''}: "
                         f"{before.get(name, 'not used')} then, {after.get(name, 'not used')} now" for name in changed)
        done = self.finished_epochs()
        raise ValueError(f"--resume: the plug-in code of the run in {self.path} changed since its first "
                         f"{done} epoch{'s' if done != 1 else ''} trained ({what}); resuming would train "
                         "the rest on other code than the first epochs: put the code it started with back to resume, "
                         "or start the run afresh on the new code (the same command without --resume, with "
                         "--overwrite)")

    # ------------------------------------------------------------------ per epoch
    def save_epoch(self, run: Run, optimizer: torch.optim.Optimizer, config: RunConfig,
                   extra_best: dict[str, Any]) -> None:
        """After every epoch: ``best.pt`` if this epoch is the best, ``last.pt``, the metrics."""
        ls = run.loop
        saved = self.saved_config(config)
        if ls.best_epoch == ls.epoch:
            atomic_torch_save(plain_checkpoint({**ls.best_snapshot, "config": saved, "epoch": ls.epoch,
                                                "val_map": ls.best_val_map, **extra_best}, "best.pt"), self.best)
        atomic_torch_save(plain_checkpoint({
            "model": run.model.state_dict(), "optimizer": optimizer.state_dict(),
            "method": run.method.state_dict(), "label_state": run.state.state_dict(),
            "generator": run.generator.get_state(), "torch_rng": torch.get_rng_state(),
            "numpy_rng": numpy_rng_state(), "config": saved, "loop": ls.progress(),
            "plugin_code": plugin_code(config.method.name, config.data.dataset),  # what --resume must find again
            **({} if run.recipe is None else {"recipe": run.recipe.state_dict()}),
            **({} if self._data_digest is None else {"data_digest": self._data_digest}),
        }, "last.pt"), self.last)
        self.write_metrics(ls.history)

    def write_metrics(self, history: list[dict[str, float]]) -> None:
        import pandas as pd

        atomic_write_text(self.path / "metrics.json", json.dumps(history, indent=1))
        # one number per cell: a per-class vector (a method's estimate per class) stays in metrics.json
        scalars = [{k: v for k, v in epoch.items() if not isinstance(v, (list, tuple, dict))} for epoch in history]
        atomic_write_text(self.path / "metrics.csv", pd.DataFrame(scalars).to_csv(index=False))

    def write_result(self, record: dict[str, Any]) -> None:
        atomic_write_json(self.path / "result.json", record)

    def write_diverged(self, message: str, loop: LoopState, config: RunConfig) -> None:
        """The record of a run that diverged, in place of ``result.json``: its line, where, the
        epochs it finished (those epochs' checkpoints and metrics stay as they were)."""
        atomic_write_json(self.path / _DIVERGED, {"status": "diverged", "error": message, **loop.diverged,
                                                  "history": loop.history, "config": self.saved_config(config)})

    # ------------------------------------------------------------------ resume
    def check_compatible(self, ckpt: dict[str, Any], model: torch.nn.Module) -> None:
        """Refuse, in one line, a ``last.pt`` whose model weights do not fit this run's model.

        The settings are compared when the run starts, but the class count comes from the
        data (a re-prepared dataset, a copied run folder), and torch reports a size mismatch
        as a multi-line RuntimeError that names neither the file nor the way out.
        """
        problems = weight_mismatches(ckpt.get("model", {}), model)
        if not problems:
            return
        held, wanted = num_outputs(ckpt.get("model", {})), num_outputs(model.state_dict())
        what = (f"a model for {held} classes, but this run has {wanted} classes" if held != wanted
                else "the weights of another model than this run builds")
        raise ValueError(f"--resume: {self.last} holds {what} ({'; '.join(problems[:3])}); resume it with the data "
                         "and backbone it was written for, or start the run afresh (another --out, or --overwrite "
                         "to replace this one)")

    def restore(self, ckpt: dict[str, Any], run: Run, optimizer: torch.optim.Optimizer) -> LoopState:
        """Load ``last.pt`` into the run's objects and rebuild the loop state (with the best snapshot)."""
        self.check_compatible(ckpt, run.model)
        _adopt_legacy_method_state(ckpt, run)
        for name, target, key in (("model", run.model, "model"), ("optimizer", optimizer, "optimizer"),
                                  ("method", run.method, "method"), ("label state", run.state, "label_state")):
            try:
                target.load_state_dict(ckpt[key])
            except (RuntimeError, ValueError, KeyError) as exc:  # size mismatches, missing entries
                reason = " ".join(str(exc).split())
                raise ValueError(f"--resume: the {name} saved in {self.last} does not fit this run ({reason}); "
                                 "resume with the data and settings it was written for, or start the run afresh "
                                 "(another --out, or --overwrite)") from exc
        if run.recipe is not None:  # the schedule's position and the averaged weights
            try:
                run.recipe.load_state_dict(ckpt.get("recipe", {}))
            except (RuntimeError, ValueError, KeyError) as exc:
                raise ValueError(f"--resume: the recipe state saved in {self.last} does not fit this run "
                                 f"({' '.join(str(exc).split())}); start the run afresh (another --out, or "
                                 "--overwrite)") from exc
        run.generator.set_state(ckpt["generator"])
        torch.set_rng_state(ckpt["torch_rng"])
        set_numpy_rng_state(ckpt["numpy_rng"])
        loop = ckpt["loop"]
        ls = LoopState(epoch=loop["epoch"], history=loop["history"], best_val_map=loop["best_val_map"],
                       best_epoch=loop["best_epoch"], bad_epochs=loop["bad_epochs"],
                       stopped_early=loop["stopped_early"])
        ls.best_snapshot = ckpt["best_snapshot"]
        return ls


def _method_key(ckpt: dict[str, Any]) -> str:
    """Where a checkpoint holds the method's state: "method", or "components" in checkpoints written
    before a method was one object (:func:`_adopt_legacy_method_state`)."""
    return "components" if "components" in ckpt and "method" not in ckpt else "method"


def _adopt_legacy_method_state(ckpt: dict[str, Any], run: Run) -> None:
    """A ``last.pt`` (and its best snapshot) written before a method was one object held the method's
    parts under "components"; the run's method reads them into its own layout
    (:meth:`~spmlkit.methods.Method.legacy_state`), so such a run resumes rather than starts over."""
    for holder in (ckpt, ckpt.get("best_snapshot") or {}):
        if _method_key(holder) == "components":
            holder["method"] = run.method.legacy_state(holder.pop("components"))


def _code_entry(entry: str) -> tuple[str, str]:
    """``("my_loss.py", "sha256:4305...")`` from a :func:`~spmlkit.plugins.plugin_code` entry."""
    name, _, fingerprint = entry.rpartition(" ")
    return name, fingerprint


def feature_spec(X_fit: np.ndarray, standardize: bool) -> dict[str, Any]:
    """What a feature run's ``best.pt`` records about its inputs (its ``"transform"``).

    The model of a feature run sees z-scored features, with the mean and std of the run's
    own training rows; without them a deployed model (``spmlkit export``) could not be fed
    new rows the way it was trained. Stored as float64 tensors, the precision the run
    standardised in.
    """
    spec: dict[str, Any] = {"kind": "features", "dim": int(np.shape(X_fit)[1]), "standardize": bool(standardize)}
    if standardize:
        mean, std = feature_scaling(X_fit)
        spec["mean"] = torch.from_numpy(np.asarray(mean, dtype=np.float64))
        spec["std"] = torch.from_numpy(np.asarray(std, dtype=np.float64))
    return spec


def weight_mismatches(state: dict[str, Any], model: torch.nn.Module) -> list[str]:
    """What keeps ``state`` from loading into ``model``: ``"key: file [..], model [..]"`` per difference.

    Checked before ``load_state_dict`` so that a checkpoint of another model is reported as
    the user's file not fitting (one line each), not as torch's multi-line size-mismatch error.
    """
    own = model.state_dict()
    problems = [f"{k}: file {list(v.shape)}, model {list(own[k].shape)}" for k, v in state.items()
                if k in own and hasattr(v, "shape") and tuple(v.shape) != tuple(own[k].shape)]
    missing = [k for k in own if k not in state]
    extra = [k for k in state if k not in own]
    if missing:
        problems.append(f"missing in the file: {', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''}")
    if extra:
        problems.append(f"not in the model: {', '.join(extra[:3])}{' ...' if len(extra) > 3 else ''}")
    return problems


def num_outputs(state: dict[str, Any]) -> int | None:
    """The number of classes a state dict predicts: the rows of its last 2-D weight (the classifier).

    Both model kinds (``SPMLNet``'s ``head`` and ``FeatureHead``'s last linear layer) register
    the classifier last, so this needs no knowledge of which kind the state came from.
    """
    weights = [v for k, v in state.items() if k.endswith("weight") and getattr(v, "ndim", 0) == 2]
    return int(weights[-1].shape[0]) if weights else None
