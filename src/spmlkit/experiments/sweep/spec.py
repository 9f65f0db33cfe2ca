"""The grid of a sweep: the sweep file, its checks, and the runs it expands to.

Everything here is pure data: no training, no store, no processes, so a sweep file is
checked completely (every mistake one ``ValueError`` naming the file, the key and the fix)
before any run is claimed, and a run's id depends only on its settings.

The grid is never held in memory: :func:`iter_runs` makes its runs one at a time and
:func:`grid_size` counts them by multiplying the axes, so a sweep of ten million runs costs
what a sweep of ten does until its runs train (docs/architecture.md, "Grids of any size").
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["SweepSpec", "load_sweep", "expand", "iter_runs", "grid_size", "run_id", "group_key", "MAX_GRID_RUNS",
           "batch_sizes_of", "observations_of", "first_repeated", "repeat_words", "value_key"]

#: the most runs one sweep may name. A record takes a few kilobytes of store (its history,
#: per-class APs, configuration), so 10^8 runs would need hundreds of gigabytes of store and,
#: at a tenth of a second for the smallest run, months of one core: a grid that large is a
#: mistake in the sweep file (an axis pasted twice, a range too fine), and saying so at once is
#: worth more than starting it (docs/architecture.md, "Grids of any size")
MAX_GRID_RUNS = 100_000_000

_GRID_KEYS = {"name", "datasets", "methods", "seeds", "lrs", "batch_sizes", "observations", "hparams", "settings",
              "store", "val_variant", "dataset", "method", "plugins", "weight_decays"}


@dataclass
class SweepSpec:
    name: str = "sweep"
    datasets: list[str] = field(default_factory=lambda: ["yeast"])
    methods: list[str] = field(default_factory=lambda: ["an"])
    seeds: list[int] = field(default_factory=lambda: [0])
    lrs: list[float] = field(default_factory=lambda: [1e-3])
    #: None: each (dataset, method)'s own batch size, the one ``spmlkit train`` would use with the
    #: sweep's ``settings`` as its config file (64 on feature sets, 16 on a user's images, a preset's)
    batch_sizes: list[int] | None = None
    #: None: each dataset's own observation (``single_positive`` for a benchmark, ``given`` -- its own
    #: labels -- for a user's data, docs/protocol.md, "Your own data"), as ``spmlkit train`` resolves it
    observations: list[str] | None = None
    hparams: dict[str, dict[str, Any]] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    #: validation labels for model selection; None: each dataset's own (clean where full labels
    #: exist, observed for a user's prepared folder), resolved per run so a run's id names it
    val_variant: str | None = None
    store: str = "results.db"
    #: where every method's hyperparameters come from on every data set, when not from each
    #: (method, dataset) preset as in ``train``: "defaults" (the recipes') or a data set whose presets
    #: are taken everywhere (:func:`~spmlkit.experiments.presets.hparams_preset`); a benchmark across
    #: data sets sets it (docs/leaderboard.md, "One source of hyperparameters")
    hparams_from: str | None = None
    #: plug-ins whose methods, losses or datasets the grid names (.py files, module names;
    #: docs/plugins.md): loaded here, and carried by every run so that a worker loads them too
    plugins: list[str] = field(default_factory=list)
    #: weight decays to sweep; None: not an axis (every run keeps the weight decay its settings
    #: give, and its id is what it was before this axis existed)
    weight_decays: list[float] | None = None

    def __post_init__(self) -> None:
        from ...methods import check_hparams, get_method
        from ...plugins import load_plugins
        from ...protocol import Observation
        from ..presets import check_hparams_from

        check_hparams_from(self.hparams_from)

        if "plugins" in self.settings:
            raise ValueError(f"sweep {self.name!r}: give plug-ins as the sweep file's own `plugins:` key, not in "
                             "settings")
        load_plugins(self.plugins)
        #: plug-in code behind each (method, dataset) of the grid (:func:`make_run`), asked once
        self._code: dict[tuple[str, str], list[str]] = {}
        #: the digest of each data set's files (:func:`~spmlkit.data.data_digest.data_digest`), read once
        self._data: dict[str, str | None] = {}
        for m in self.methods:
            get_method(m)
        for o in self.observations or ():
            Observation.parse(o)
        unknown = sorted(set(self.hparams) - set(self.methods))
        if unknown:
            raise ValueError(f"sweep {self.name!r}: hparams given for methods not in the sweep: {', '.join(unknown)}")
        for m, grid in self.hparams.items():
            empty = sorted(k for k, v in grid.items() if isinstance(v, list) and not v)
            if empty:
                raise ValueError(f"sweep {self.name!r}: hparams.{m}.{empty[0]} must not be empty; give a value or "
                                 f"a list of values")
            check_hparams(m, {k: (v[0] if isinstance(v, list) and v else v) for k, v in grid.items()})
        for key in ("datasets", "methods", "seeds", "lrs", "batch_sizes", "observations"):
            value = getattr(self, key)
            if value is not None and not value:  # None: the default of each data set (batch sizes, observations)
                raise ValueError(f"sweep {self.name!r}: {key} must not be empty")
        if self.weight_decays is not None:
            if not self.weight_decays:
                raise ValueError(f"sweep {self.name!r}: weight_decays must not be empty; leave it out to keep each "
                                 "run's own weight decay")
            bad = [w for w in self.weight_decays if not (isinstance(w, (int, float)) and math.isfinite(w) and w >= 0)]
            if bad:
                raise ValueError(f"sweep {self.name!r}: weight_decays must be numbers >= 0, got {bad[0]!r}")
            if _sets_weight_decay(self.settings):
                raise ValueError(f"sweep {self.name!r}: give the weight decay either in settings or as the "
                                 "weight_decays axis, not both")
        self._refuse_repeats()
        size = grid_size(self)
        if size > MAX_GRID_RUNS:
            raise ValueError(f"sweep {self.name!r}: the grid has {size:,} runs ({_size_words(self)}), more than the "
                             f"{MAX_GRID_RUNS:,} one sweep may hold; drop values from its lists or split it into "
                             "several sweep files")

    def _refuse_repeats(self) -> None:
        """A value given twice on an axis (``seeds: [0, 0]``, ``methods: [an, an]``, one data set
        under two names, ``0.001`` and ``1e-3``) would run one grid point twice under one id: a
        table row twice, "mean ± std over 2 seeds" of one seed, a count that is not the product
        of the axes. Refused, naming the axis and the value (docs/sweep-files.md)."""
        from ...data.registry import same_data

        keys: dict[str, Callable[[Any], Any]] = {"observations": _observation_key}
        for axis in ("datasets", "methods", "seeds", "lrs", "batch_sizes", "observations", "weight_decays"):
            pair = first_repeated(getattr(self, axis) or (), keys.get(axis, value_key))
            if pair is not None:
                raise ValueError(f"sweep {self.name!r}: {axis} {repeat_words(*pair)}; give each value once")
        for i, first in enumerate(self.datasets):
            for second in self.datasets[i + 1:]:
                why = same_data(first, second)
                if why is not None:
                    raise ValueError(f"sweep {self.name!r}: datasets {first} and {second} are the same data set "
                                     f"({why}); name it once")
        for method, grid in self.hparams.items():
            for name, values in grid.items():
                pair = first_repeated(values, value_key) if isinstance(values, list) else None
                if pair is not None:
                    raise ValueError(f"sweep {self.name!r}: hparams.{method}.{name} {repeat_words(*pair)}; give each "
                                     "value once")


def _observation_key(text: str) -> tuple:
    """What an observation draws: ``single_positive`` and ``pos=1,neg=0`` are one draw (one
    positive, no negative, the protocol's seed), so they are one value of the axis."""
    from ...protocol import Observation

    o = Observation.parse(text)
    if o.kind in ("single_positive", "counts"):
        pos, neg = (1, 0) if o.kind == "single_positive" else (o.num_pos, o.num_neg)
        return ("counts", pos, neg, 1200 if o.seed is None else o.seed)
    if o.kind == "ratio":
        return ("ratio", o.ratio, 0 if o.seed is None else o.seed)
    return (o.kind,)


def value_key(value: Any) -> Any:
    """What makes two values of an axis the same value: numbers by value (``0.001`` is ``1e-3``,
    ``1`` is ``1.0``), but ``true`` is no number; anything else by its JSON form."""
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, (int, float)):
        return ("number", float(value))
    return ("other", json.dumps(value, sort_keys=True, default=str))


def first_repeated(values: Iterable[Any], key: Callable[[Any], Any] = value_key) -> tuple[Any, Any] | None:
    """The first value that repeats an earlier one, as (the earlier, the repeat); None when all differ.
    One pass with a set, so a list of a million seeds costs a million look-ups."""
    seen: dict[Any, Any] = {}
    for value in values:
        k = key(value)
        if k in seen:
            return seen[k], value
        seen[k] = value
    return None


def repeat_words(first: Any, again: Any) -> str:
    """``lists 0 twice``, or ``lists 0.001 and 1e-3, the same value`` when written differently."""
    if str(first) == str(again):
        return f"lists {first} twice"
    return f"lists {first} and {again}, the same value"


#: the grid axes: a scalar or a list of these, and an example for the error message
_AXES: dict[str, tuple[str, str]] = {
    "datasets": ("str", "[yeast]"), "methods": ("str", "[an, em]"), "observations": ("str", "[single_positive]"),
    "seeds": ("int", "[0, 1, 2]"), "batch_sizes": ("int", "[64]"), "lrs": ("number", "[0.001, 0.01]"),
    "weight_decays": ("number", "[0, 0.0001]"),
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
    if "plugins" in data:
        plugins = [data["plugins"]] if isinstance(data["plugins"], str) else data["plugins"]
        if not (isinstance(plugins, list) and all(isinstance(ref, str) and ref for ref in plugins)):
            raise ValueError(f"sweep file {p}: plugins must be a .py file or module name, or a list of them, got "
                             f"{data['plugins']!r}; e.g. `plugins: [my_loss.py]`")
        data["plugins"] = plugins
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


def load_sweep(path: str | Path, plugins: list[str] | tuple[str, ...] = ()) -> SweepSpec:
    """Read and check a sweep file; every mistake in it is a ``ValueError`` naming the file,
    the key and the fix (the CLI prints it as one line). Its ``plugins`` that are files are
    relative to the file's folder, as its ``store`` is; ``plugins`` adds more (``--plugin``)."""
    from ...plugins import is_file_reference
    from ...training.config import load_config_file

    p = Path(path)
    data = load_config_file(p)
    if not data:  # an empty file would otherwise run the defaults, which nobody asked for
        raise ValueError(f"sweep file {p} is empty; name the grid, e.g. `datasets: [yeast]` and `methods: [an, em]` "
                         "(see `spmlkit sweep --help`)")
    unknown = sorted(set(data) - _GRID_KEYS)
    if unknown:
        raise ValueError(f"sweep file {p}: unknown key(s) {', '.join(unknown)}; valid keys: {', '.join(sorted(_GRID_KEYS))}")
    data = _check_sweep_types(data, p)
    data.setdefault("name", p.stem)
    here = p.resolve().parent
    data["plugins"] = list(dict.fromkeys(
        [str(here / Path(ref).expanduser()) if is_file_reference(ref) else ref for ref in data.get("plugins", [])]
        + [str(Path(ref).expanduser().absolute()) if is_file_reference(ref) else ref for ref in plugins]))
    try:
        spec = SweepSpec(**data)
    except ValueError as exc:
        raise ValueError(f"sweep file {p}: {exc}") from None
    if not Path(spec.store).is_absolute():
        spec.store = str(p.resolve().parent / spec.store)
    return spec


def _hparam_axes(grid: dict[str, Any]) -> tuple[list[str], list[list[Any]]]:
    """A method's hyperparameter grid as sorted names and each one's values (a scalar is one value)."""
    keys = sorted(grid)
    return keys, [grid[k] if isinstance(grid[k], list) else [grid[k]] for k in keys]


def _hparam_grid(grid: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every combination of a method's hyperparameter grid, one at a time ({} when it has none)."""
    keys, values = _hparam_axes(grid)
    return (dict(zip(keys, combo)) for combo in itertools.product(*values))


def _hparam_count(grid: dict[str, Any]) -> int:
    return math.prod(len(v) for v in _hparam_axes(grid)[1])


def grid_size(spec: SweepSpec) -> int:
    """How many runs ``spec`` names, counted without making them."""
    per_method = sum(_hparam_count(spec.hparams.get(m, {})) for m in spec.methods)
    return (len(spec.datasets) * len(spec.observations or [None]) * per_method * len(spec.lrs)
            * len(spec.batch_sizes or [None]) * len(spec.seeds) * len(_weight_decays(spec)))


def _sets_weight_decay(settings: dict[str, Any]) -> bool:
    from ...training.config import flat_settings

    try:
        return "weight_decay" in flat_settings(dict(settings or {}))
    except ValueError:  # the settings are refused where the runs are checked, with the full message
        return False


def _weight_decays(spec: SweepSpec) -> list[float | None]:
    """The weight-decay axis: its values, or one None (no axis: runs carry no weight decay key)."""
    return list(spec.weight_decays) if spec.weight_decays is not None else [None]


def _size_words(spec: SweepSpec) -> str:
    """The factors of :func:`grid_size`, for a message: ``1000 seeds x 100 lrs x ...``."""
    combos = sum(_hparam_count(spec.hparams.get(m, {})) for m in spec.methods)
    parts = [f"{len(spec.datasets)} datasets", f"{len(spec.observations or [None])} observations",
             f"{combos} method x hyperparameter combinations", f"{len(spec.lrs)} lrs",
             f"{len(spec.batch_sizes or [None])} batch sizes", f"{len(spec.seeds)} seeds"]
    if spec.weight_decays is not None:
        parts.append(f"{len(spec.weight_decays)} weight decays")
    return " x ".join(parts)


def observations_of(spec: SweepSpec, dataset: str) -> list[str]:
    """The observations ``dataset``'s runs train under: the sweep's, or the dataset's own."""
    if spec.observations is not None:
        return list(spec.observations)
    from ..presets import default_observation

    return [default_observation(dataset)]


def batch_sizes_of(spec: SweepSpec, dataset: str, method: str) -> list[int]:
    """The batch sizes of ``(dataset, method)``'s runs: the sweep's, or what ``spmlkit train`` would use."""
    if spec.batch_sizes is not None:
        return list(spec.batch_sizes)
    return [_default_batch_size(dataset, method, json.dumps(spec.settings, sort_keys=True, default=str))]


@functools.lru_cache(maxsize=1024)
def _default_batch_size(dataset: str, method: str, settings: str) -> int:
    """``spmlkit train --dataset D --method M --config SETTINGS``'s batch size (the dataset's
    defaults, the (method, dataset) preset, the settings), once per process and point."""
    from ...training.config import OptimisationConfig
    from ..presets import resolve_config

    try:
        return resolve_config({"dataset": dataset, "method": method}, file_values=json.loads(settings),
                              file_name="sweep settings").optimisation.batch_size
    except ValueError:  # settings the runs' own check refuses (run_config, before any run), saying why there
        return OptimisationConfig.batch_size


def run_id(run: dict[str, Any]) -> str:
    """A stable id of a run's settings. Neither the sweep's name nor where its plug-ins are loaded
    from is part of it; the plug-in *code* a run trains with is (``plugin_code``, docs/plugins.md),
    and so is the content of a user's data folder (``data_digest``, docs/architecture.md, "What a
    run's id is made of")."""
    key = {k: v for k, v in run.items() if k not in ("sweep", "plugins")}
    return hashlib.sha1(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:16]


def make_run(spec: SweepSpec, dataset: str, observation: str, method: str, hparams: dict[str, Any], lr: float,
             batch_size: int, seed: int, weight_decay: float | None = None) -> dict[str, Any]:
    """One grid point of ``spec`` as a run, with its id. ``weight_decay`` is a key of the run only
    where the sweep has that axis, so the runs of other sweeps keep their ids."""
    run = {"sweep": spec.name, "dataset": dataset, "method": method, "observation": observation, "seed": int(seed),
           "lr": float(lr), "batch_size": int(batch_size), "hparams": hparams, "val_variant": spec.val_variant or _dataset_val_variant(dataset),
           "settings": dict(spec.settings)}
    if weight_decay is not None:
        run["weight_decay"] = float(weight_decay)
    if spec.hparams_from is not None and _preset_involved(method, dataset, spec.hparams_from):
        run["hparams_from"] = spec.hparams_from
    # both only with plug-ins, so that every other run keeps the id it always had
    if spec.plugins:
        run["plugins"] = list(spec.plugins)
    code = spec._code.get((method, dataset))
    if code is None:
        from ...plugins import plugin_code

        code = spec._code[(method, dataset)] = plugin_code(method, dataset)
    if code:
        run["plugin_code"] = code
    if dataset not in spec._data:
        spec._data[dataset] = _data_digest(dataset, spec.settings)
    if spec._data[dataset] is not None:  # a user's folder: what it holds now, not only its path
        run["data_digest"] = spec._data[dataset]
    run["run_id"] = run_id(run)
    return run


def _data_digest(dataset: str, settings: dict[str, Any]) -> str | None:
    """The digest of ``dataset``'s files (None for a named data set: its runs keep their ids); a
    user's images named by their form (``folder``, ``csv``) are the settings' prepared folder."""
    from ...data.data_digest import data_digest
    from ...training.config import flat_settings

    try:
        prepared = flat_settings(dict(settings or {})).get("prepared")
    except ValueError:  # the settings are refused where the runs are checked, with the full message
        prepared = None
    return data_digest(dataset, prepared)


def _preset_involved(method: str, dataset: str, hparams_from: str) -> bool:
    """Whether ``hparams_from`` can change the run: a preset of the method applies to the data
    set either way. Only then does the run carry it, so a run that no preset touches keeps the
    id it has in any other sweep or benchmark, and is found finished there."""
    from ..presets import PRESETS, hparams_preset

    return f"{method}/{dataset}" in PRESETS or hparams_preset(method, dataset, hparams_from) is not None


def _dataset_val_variant(dataset: str) -> str:
    from ..presets import default_val_variant

    return default_val_variant(dataset)


def iter_runs(spec: SweepSpec) -> Iterator[dict[str, Any]]:
    """Every run of the sweep, made one at a time, in a deterministic order (dataset, method,
    hparams, lr, bs, seed, weight decay): memory stays that of one run whatever the grid's size.

    Where a batched group may not vary the seed (:func:`~spmlkit.training.plan.group_settings`: the
    seed draws each run's rows under partition 'random', docs/protocol.md, "The tabular protocol";
    or the method groups one seed's runs) the seed and batch size come first instead (seed, bs, lr,
    weight decay), so that the runs that may train as one group -- one seed's, differing in lr and
    weight decay -- are next to each other, which is where the sweep looks for them."""
    partition = "random" if partitions_by_seed(spec.settings) else "official"
    for dataset in spec.datasets:
        for observation, method in itertools.product(observations_of(spec, dataset), spec.methods):
            sizes = batch_sizes_of(spec, dataset, method)
            by_seed = "seed" not in _group_settings(method, partition)
            for hp in _hparam_grid(spec.hparams.get(method, {})):
                if by_seed:
                    points = ((lr, bs, seed, wd) for seed, bs, lr, wd in
                              itertools.product(spec.seeds, sizes, spec.lrs, _weight_decays(spec)))
                else:
                    points = itertools.product(spec.lrs, sizes, spec.seeds, _weight_decays(spec))
                for lr, bs, seed, wd in points:
                    yield make_run(spec, dataset, observation, method, hp, lr, bs, seed, wd)


def partitions_by_seed(settings: dict[str, Any]) -> bool:
    """Whether a sweep's ``settings`` (flat or in sections) make each run's seed draw its rows."""
    from ...training.config import flat_settings

    try:
        return flat_settings(dict(settings or {})).get("partition") == "random"
    except ValueError:  # the settings are refused where the runs are checked, with the full message
        return False


def expand(spec: SweepSpec) -> list[dict[str, Any]]:
    """Every run of the sweep as a list (:func:`iter_runs`), for grids known to be small (a
    benchmark's, a test's); a sweep itself never lists its grid."""
    return list(iter_runs(spec))


def in_grid(spec: SweepSpec, run: dict[str, Any]) -> bool:
    """Whether ``run`` (a stored record's ``config``) is a point of ``spec``'s grid: each of its
    values on an axis of the grid, and its id the one the grid gives that point. Asked of the
    store's finished runs, so counting a grid's finished runs costs the store's size, not the grid's."""
    try:
        method, hparams = run["method"], run["hparams"]
        keys, values = _hparam_axes(spec.hparams.get(method, {}))
        weight_decay = run.get("weight_decay")
        on_axes = (run["dataset"] in spec.datasets and method in spec.methods and run["lr"] in spec.lrs
                   and run["seed"] in spec.seeds and isinstance(hparams, dict) and sorted(hparams) == keys
                   and all(hparams[k] in v for k, v in zip(keys, values))
                   and run["observation"] in observations_of(spec, run["dataset"])
                   and run["batch_size"] in batch_sizes_of(spec, run["dataset"], method)
                   and weight_decay in _weight_decays(spec))
        if not on_axes:
            return False
        point = make_run(spec, run["dataset"], run["observation"], method, hparams, run["lr"], run["batch_size"],
                         run["seed"], weight_decay)
    except (KeyError, TypeError, ValueError):  # a record another program or version wrote: not this grid's
        return False
    return point["run_id"] == run.get("run_id")


def settings_to_check(spec: SweepSpec) -> Iterator[dict[str, Any]]:
    """Runs that together use every value of the grid: each (dataset, observation, method,
    hyperparameters) with the first lr, batch size and seed, then each lr, batch size and seed
    with the first of the rest. Checking these finds every bad value of a grid of any size in
    as many checks as the axes have values, not as the grid has runs."""
    wds = _weight_decays(spec)
    for dataset in spec.datasets:
        for observation, method in itertools.product(observations_of(spec, dataset), spec.methods):
            for hp in _hparam_grid(spec.hparams.get(method, {})):
                yield make_run(spec, dataset, observation, method, hp, spec.lrs[0],
                               batch_sizes_of(spec, dataset, method)[0], spec.seeds[0], wds[0])
    method, dataset = spec.methods[0], spec.datasets[0]
    first_hp = next(_hparam_grid(spec.hparams.get(method, {})))
    head = (dataset, observations_of(spec, dataset)[0], method, first_hp)
    sizes = batch_sizes_of(spec, dataset, method)
    for lr in spec.lrs[1:]:
        yield make_run(spec, *head, lr, sizes[0], spec.seeds[0], wds[0])
    for bs in sizes[1:]:
        yield make_run(spec, *head, spec.lrs[0], bs, spec.seeds[0], wds[0])
    for seed in spec.seeds[1:]:
        yield make_run(spec, *head, spec.lrs[0], sizes[0], seed, wds[0])
    for wd in wds[1:]:
        yield make_run(spec, *head, spec.lrs[0], sizes[0], spec.seeds[0], wd)


def group_key(run: dict[str, Any]) -> str:
    """Runs of one sweep with equal keys differ only in the settings their method lets one batched
    group vary, which is what training them as one group asks: the run's settings without those
    :func:`~spmlkit.training.plan.group_settings` names (the decision the run plan reads too), and
    without the run's id and sweep. A method unknown here keeps every setting (such a run is
    refused when it is checked)."""
    partition = "random" if partitions_by_seed(run.get("settings") or {}) else "official"
    free = {"run_id", "sweep", *_group_settings(run["method"], partition)}
    return json.dumps({k: v for k, v in run.items() if k not in free}, sort_keys=True, default=str)


def _group_settings(method: str, partition: str) -> tuple[str, ...]:
    """:func:`~spmlkit.training.plan.group_settings`; none for a method unknown here (such a run is
    refused when it is checked)."""
    from ...training.plan import group_settings

    try:
        return group_settings(method, partition)
    except ValueError:
        return ()
