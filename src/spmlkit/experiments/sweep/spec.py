"""The grid of a sweep: the sweep file, its checks, and the runs it expands to.

Everything here is pure data: no training, no store, no processes, so a sweep file is
checked completely (every mistake one ``ValueError`` naming the file, the key and the fix)
before any run is claimed, and a run's id depends only on its settings.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["SweepSpec", "load_sweep", "expand", "run_id", "group_key"]

_GRID_KEYS = {"name", "datasets", "methods", "seeds", "lrs", "batch_sizes", "observations", "hparams", "settings",
              "store", "val_variant", "dataset", "method"}


@dataclass
class SweepSpec:
    name: str = "sweep"
    datasets: list[str] = field(default_factory=lambda: ["yeast"])
    methods: list[str] = field(default_factory=lambda: ["an"])
    seeds: list[int] = field(default_factory=lambda: [0])
    lrs: list[float] = field(default_factory=lambda: [1e-3])
    batch_sizes: list[int] = field(default_factory=lambda: [64])
    observations: list[str] = field(default_factory=lambda: ["single_positive"])
    hparams: dict[str, dict[str, Any]] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    val_variant: str = "clean"
    store: str = "results.db"

    def __post_init__(self) -> None:
        from ...methods import get_method, resolve_hparams
        from ...protocol import Observation

        for m in self.methods:
            get_method(m)
        for o in self.observations:
            Observation.parse(o)
        unknown = sorted(set(self.hparams) - set(self.methods))
        if unknown:
            raise ValueError(f"sweep {self.name!r}: hparams given for methods not in the sweep: {', '.join(unknown)}")
        for m, grid in self.hparams.items():
            resolve_hparams(m, {k: (v[0] if isinstance(v, list) and v else v) for k, v in grid.items()})
        for key in ("datasets", "methods", "seeds", "lrs", "batch_sizes", "observations"):
            if not getattr(self, key):
                raise ValueError(f"sweep {self.name!r}: {key} must not be empty")


#: the grid axes: a scalar or a list of these, and an example for the error message
_AXES: dict[str, tuple[str, str]] = {
    "datasets": ("str", "[yeast]"), "methods": ("str", "[an, em]"), "observations": ("str", "[single_positive]"),
    "seeds": ("int", "[0, 1, 2]"), "batch_sizes": ("int", "[64]"), "lrs": ("number", "[0.001, 0.01]"),
}
#: the singular spelling a sweep file may use for an axis
_SINGULAR = {"dataset": "datasets", "method": "methods"}
_KIND_WORDS = {"str": "a non-empty string", "int": "an integer", "number": "a number"}


def _axis_value(value: Any, kind: str) -> Any:
    """One value of a grid axis, checked (and for ``lrs`` converted), so that a wrong type is
    one clear message from the file check instead of a traceback inside ``expand`` or the
    trainer; None when ``value`` does not fit."""
    if kind == "str" and isinstance(value, str) and value:
        return value
    if kind == "int" and isinstance(value, int) and not isinstance(value, bool):
        return value
    if kind == "number" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if kind == "number" and isinstance(value, str):  # PyYAML reads `1e-3` (no dot) as a string
        try:
            return float(value)
        except ValueError:
            return None
    return None


def _check_sweep_types(data: dict[str, Any], p: Path) -> dict[str, Any]:
    """The sweep file's values with every type checked: an axis may be a scalar or a list
    (``method: an`` and ``methods: [an]`` alike); the rest must be strings or mappings.
    Wrong types raise ``ValueError``, not ``TypeError``: they are the user's input, which
    :func:`~spmlkit.errors.user_input` turns into one line."""
    for single, plural in _SINGULAR.items():
        if single in data and plural in data:
            raise ValueError(f"sweep file {p}: give either `{single}` or `{plural}`, not both")
        if single in data:
            data[plural] = data.pop(single)
    for key, (kind, example) in _AXES.items():
        if key not in data:
            continue
        is_list = isinstance(data[key], list)
        values = data[key] if is_list else [data[key]]
        if not values:
            raise ValueError(f"sweep file {p}: {key} must not be empty; e.g. `{key}: {example}`")
        checked = []
        for i, value in enumerate(values):
            ok = _axis_value(value, kind)
            if ok is None:
                where = f"{key}[{i}]" if is_list else key
                raise ValueError(f"sweep file {p}: {where} must be {_KIND_WORDS[kind]}, got {type(value).__name__} "
                                 f"{value!r}; write one value or a list, e.g. `{key}: {example}`")
            checked.append(ok)
        data[key] = checked
    for key in ("name", "store", "val_variant"):
        if key in data and not (isinstance(data[key], str) and data[key]):
            raise ValueError(f"sweep file {p}: {key} must be a non-empty string, got {data[key]!r}")
    if "settings" in data and not isinstance(data["settings"], dict):
        raise ValueError(f"sweep file {p}: settings must be a mapping of trainer settings, got "
                         f"{type(data['settings']).__name__} {data['settings']!r}; e.g. `settings: {{epochs: 20}}`")
    hparams = data.get("hparams", {})
    if not isinstance(hparams, dict):
        raise ValueError(f"sweep file {p}: hparams must map method names to their grids, got "
                         f"{type(hparams).__name__} {hparams!r}; e.g. `hparams: {{em: {{alpha: [0.1, 0.2]}}}}`")
    for method, grid in hparams.items():
        if not isinstance(grid, dict):
            raise ValueError(f"sweep file {p}: hparams.{method} must map hyperparameter names to a value or a "
                             f"list of values, got {type(grid).__name__} {grid!r}; e.g. `{method}: {{alpha: [0.1]}}`")
    return data


def load_sweep(path: str | Path) -> SweepSpec:
    """Read and check a sweep file; every mistake in it is a ``ValueError`` naming the file,
    the key and the fix (the CLI prints it as one line)."""
    from ...training.config import load_config_file

    p = Path(path)
    data = load_config_file(p)
    unknown = sorted(set(data) - _GRID_KEYS)
    if unknown:
        raise ValueError(f"sweep file {p}: unknown key(s) {', '.join(unknown)}; valid keys: {', '.join(sorted(_GRID_KEYS))}")
    data = _check_sweep_types(data, p)
    data.setdefault("name", p.stem)
    try:
        spec = SweepSpec(**data)
    except ValueError as exc:
        raise ValueError(f"sweep file {p}: {exc}") from None
    if not Path(spec.store).is_absolute():
        spec.store = str(p.resolve().parent / spec.store)
    return spec


def _hparam_grid(grid: dict[str, Any]) -> list[dict[str, Any]]:
    keys = sorted(grid)
    values = [grid[k] if isinstance(grid[k], list) else [grid[k]] for k in keys]
    return [dict(zip(keys, combo)) for combo in itertools.product(*values)] or [{}]


def run_id(run: dict[str, Any]) -> str:
    """A stable id of a run's settings (the sweep name is not part of it)."""
    key = {k: v for k, v in run.items() if k != "sweep"}
    return hashlib.sha1(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:16]


def expand(spec: SweepSpec) -> list[dict[str, Any]]:
    """Every run of the sweep, in a deterministic order (dataset, method, hparams, lr, bs, seed)."""
    runs = []
    for dataset, observation, method in itertools.product(spec.datasets, spec.observations, spec.methods):
        for hp in _hparam_grid(spec.hparams.get(method, {})):
            for lr, bs, seed in itertools.product(spec.lrs, spec.batch_sizes, spec.seeds):
                run = {"sweep": spec.name, "dataset": dataset, "method": method, "observation": observation,
                       "seed": int(seed), "lr": float(lr), "batch_size": int(bs), "hparams": hp,
                       "val_variant": spec.val_variant, "settings": dict(spec.settings)}
                run["run_id"] = run_id(run)
                runs.append(run)
    return runs


def group_key(run: dict[str, Any]) -> str:
    """Runs of one sweep with equal keys differ only in seed and lr (everything else of a run
    is the rest of its grid point), which is what training them as one group asks."""
    return json.dumps({k: v for k, v in run.items() if k not in ("seed", "lr", "run_id", "sweep")}, sort_keys=True,
                      default=str)
