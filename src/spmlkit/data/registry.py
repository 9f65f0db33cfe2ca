"""Every dataset spmlkit can name, and the one place that decides what a dataset argument is.

A run, a sweep, ``extract`` and the command line's choices all ask two questions of a dataset
argument: *what kind is it* (features for a head, or images for a backbone) and *how is it
read*. :func:`resolve_dataset` answers both once per process and argument (the answer is kept,
so deciding touches the file system once): a registered name (:data:`DATASETS`: Yeast, the
MULAN sets, the image benchmarks, the digits mosaic), a folder written by ``spmlkit extract``, a
folder written by ``spmlkit prepare`` (a benchmark's or a user's own images), or a paper's ``.mat``
data file with its own partition and observed positives (:mod:`spmlkit.data.mat_file`).
:func:`load_features` then reads a feature dataset, a named one once per process (a sweep runs
hundreds of runs on it). ``spmlkit datasets`` lists the registry.

A user's feature dataset joins it through :func:`register_dataset`, the way spmlkit registers
its own (docs/plugins.md): a function that returns a :class:`TabularDataset`, under a name.
"""

from __future__ import annotations

import difflib
import logging
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from ..names import REGISTRY, Registry, origin_of

if TYPE_CHECKING:  # the registry itself stays light: the command line builds its choices from it
    from .tabular import TabularDataset

__all__ = ["DATASETS", "FEATURE_DATASETS", "PREPARABLE", "DatasetEntry", "DatasetRef", "Registry", "is_feature_dataset",
           "labels_held", "load_features", "register_dataset", "resolve_dataset", "same_data"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DatasetEntry:
    """A named dataset: its kind, where it comes from, its size when known without reading it."""

    name: str
    kind: str  # "features" | "images"
    source: str  # one phrase: where the data comes from
    load: Callable[[], TabularDataset] | None = None  # feature datasets
    train_rows: int | None = None
    test_rows: int | None = None
    labels: int | None = None
    cached: Callable[[], bool] | None = None  # None: nothing to download
    listed: bool = True  # aliases (mulan/<set>) answer but are not listed
    prepare: bool = False  # read from its official files by `spmlkit prepare NAME --root DIR`

    def status(self) -> str:
        """Where the data stands on this machine, in a few words (``spmlkit datasets``)."""
        if self.prepare:
            return "prepare from its files"
        if self.cached is None:
            return "ready"
        return "ready (in the data folder)" if self.cached() else "downloads on first use"


def _load_yeast() -> TabularDataset:
    from .yeast import load_yeast

    return load_yeast()


def _mulan_loader(name: str) -> Callable[[], TabularDataset]:
    def load() -> TabularDataset:
        from .mulan import load_mulan

        return load_mulan(name)

    return load


def _mulan_cached(name: str) -> Callable[[], bool]:
    def cached() -> bool:
        from .mulan import is_cached

        return is_cached(name)

    return cached


#: the image benchmarks `spmlkit prepare` reads (data/formats/readers.py has a reader for each; a test
#: checks the two agree) with their official train rows, test rows and labels (docs/protocol.md,
#: "Datasets"; COCO's are its "spml" variant)
_IMAGE_SIZES = {"voc2012": (5717, 5823, 20), "voc2007": (5011, 4952, 20), "coco2014": (82081, 40137, 80),
                "nuswide": (150000, 60260, 81), "cub": (5994, 5794, 312)}


DATASETS: Registry[DatasetEntry] = REGISTRY.dataset
"""Every named dataset (``spmlkit datasets`` lists them): the dataset family of the one registry."""

FEATURE_DATASETS: dict[str, Callable[[], TabularDataset]] = {}
"""The named feature datasets and their loaders (:func:`register_dataset` adds each)."""


def register_dataset(name: str, *, source: str, train_rows: int | None = None, test_rows: int | None = None,
                     labels: int | None = None) -> Callable[[Callable[[], TabularDataset]], Callable[[], TabularDataset]]:
    """Decorator naming a feature dataset: ``load()`` returns its :class:`TabularDataset` (the
    official train and test lists with full 0/1 labels), read once per process on first use.
    ``source`` is the phrase ``spmlkit datasets`` shows; the sizes are shown when given. spmlkit
    registers Yeast this way, and a user's plug-in its own sets (docs/plugins.md)."""

    def decorate(load: Callable[[], TabularDataset]) -> Callable[[], TabularDataset]:
        if not callable(load):
            raise TypeError(f"dataset {name!r}: register_dataset decorates a function returning a TabularDataset")
        entry = DatasetEntry(name, "features", source, load, train_rows, test_rows, labels)
        DATASETS.register(name, entry, origin=origin_of(getattr(load, "__module__", "") or ""))
        FEATURE_DATASETS[name] = load
        return load

    return decorate


def _register_builtins() -> None:
    from .mulan import MULAN_SETS

    register_dataset("yeast", source="river package (no download)", train_rows=1500, test_rows=917,
                     labels=14)(_load_yeast)
    for name, spec in MULAN_SETS.items():
        # the bare name is listed; mulan/<set> answers too, and is listed for yeast, whose bare name is river's
        aliases = [(f"mulan/{name}", True)] if name == "yeast" else [(name, True), (f"mulan/{name}", False)]
        for alias, listed in aliases:
            DATASETS.register(alias, DatasetEntry(alias, "features", f"MULAN ({spec.domain}), fetched once",
                                                  _mulan_loader(name), spec.train_rows, spec.test_rows or None,
                                                  spec.labels,
                                                  _mulan_cached(name), listed))
            FEATURE_DATASETS[alias] = DATASETS[alias].load
    for name, rows in _IMAGE_SIZES.items():
        DATASETS.register(name, DatasetEntry(name, "images", "official files (download, then prepare)", None, *rows,
                                             prepare=True))
    DATASETS.register("digits-mosaic", DatasetEntry("digits-mosaic", "images", "generated in memory"))
    DATASETS.register("digits_mosaic", DatasetEntry("digits_mosaic", "images", "generated in memory", listed=False))


_register_builtins()

PREPARABLE: tuple[str, ...] = tuple(name for name, entry in DATASETS.items() if entry.prepare)
"""The benchmarks ``spmlkit prepare`` reads from their official files."""


@dataclass(frozen=True)
class DatasetRef:
    """What a dataset argument is: its kind and how it is read.

    ``form``: ``"named"`` (a registered name), ``"features-folder"`` (written by ``spmlkit
    extract`` or ``spmlkit prepare table``), ``"prepared-folder"`` (written by ``spmlkit prepare``;
    ``name`` is the dataset it records) or ``"user-form"`` (``folder``/``csv``/``prepared``: users'
    data, found through ``--prepared``).

    ``labels``: what the train list holds, ``"full"`` labels (a benchmark: observation is
    simulated from them) or ``"observed"`` ones (a user's own: observation "given"); ``test``:
    whether there is a labelled test list. Both come from the folder's ``meta.json``, so a sweep
    checks them before any run without reading the data (docs/protocol.md, "Your own data").
    ``observed``: full labels come with observed ones too (``form`` ``"mat-file"``, a paper's data
    file: observation "given" trains on its authors' observed positives).
    """

    argument: str
    kind: str
    form: str
    name: str
    path: Path | None = None
    labels: str = "full"
    test: bool = True
    observed: bool = False


def resolve_dataset(argument: str) -> DatasetRef:
    """Decide once what ``argument`` names (a one-line error for something spmlkit cannot read)."""
    from .formats.user_data import USER_DATASETS

    argument = str(argument)
    if argument in DATASETS:
        entry = DATASETS[argument]
        return DatasetRef(argument, entry.kind, "named", entry.name)
    if argument in (*USER_DATASETS, "prepared"):
        return DatasetRef(argument, "images", "user-form", argument, labels="observed" if argument != "prepared"
                          else "full")
    from .mat_file import is_mat_file

    if is_mat_file(argument):  # read when loaded: a missing or bad file is said then, in one line
        path = Path(argument).expanduser().absolute()
        return DatasetRef(argument, "features", "mat-file", path.stem, path, observed=True)
    # a folder is decided once per process and absolute path (a relative one means another folder elsewhere)
    return _resolve_folder(argument, str(Path(argument).expanduser().absolute()))


@lru_cache(maxsize=64)
def _resolve_folder(argument: str, absolute: str) -> DatasetRef:
    from .feature_dir import feature_dir_labels, is_feature_dir

    path = Path(absolute)
    if is_feature_dir(path):
        held = feature_dir_labels(path)
        return DatasetRef(argument, "features", "features-folder", argument, path, held.labels, held.test)
    recorded = _prepared_dataset(path)
    if recorded is not None:
        name, labels, test = recorded
        return DatasetRef(argument, "images", "prepared-folder", name, path, labels, test)
    if path.exists():
        raise ValueError(f"{argument} is neither a folder written by `spmlkit extract` nor one written by "
                         "`spmlkit prepare` (no meta.json of spmlkit's in it, or a damaged one); prepare it first (`spmlkit prepare "
                         "folder|csv ...`) and name the folder that command reports")
    close = difflib.get_close_matches(argument, [n for n, e in DATASETS.items() if e.listed], n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise ValueError(f"unknown dataset {argument!r}{hint}; known datasets: "
                     f"{', '.join(n for n, e in DATASETS.items() if e.listed)} (`spmlkit datasets` lists them), a "
                     "folder written by `spmlkit extract`, or a folder written by `spmlkit prepare`")


def _prepared_dataset(path: Path) -> tuple[str, str, bool] | None:
    """The dataset a ``spmlkit prepare`` folder records, which labels its train list holds
    ("full" or "observed") and whether it has a test list; None when ``path`` is not one."""
    import json

    from .formats.prepared import META

    meta = path / META
    if not meta.is_file():
        return None
    try:
        recorded = json.loads(meta.read_text())
        name = recorded.get("dataset")
    except (OSError, ValueError, AttributeError):
        return None
    if not isinstance(name, str):
        return None
    counts = recorded.get("counts")
    test = not (isinstance(counts, dict) and counts.get("test") == 0)
    return name, "observed" if recorded.get("observation") == "given" else "full", test


def labels_held(dataset: str, prepared: str | None = None) -> DatasetRef:
    """What a run's data holds (:attr:`DatasetRef.labels`, :attr:`DatasetRef.test`), from the
    dataset argument and, for a user's data named by its form (``folder``, ``csv``), the prepared
    folder it reads; decided from ``meta.json`` files only."""
    ref = resolve_dataset(dataset)
    if ref.form == "user-form" and prepared:
        try:
            return resolve_dataset(prepared)
        except ValueError:
            return ref  # not a prepared folder: reading it says what is wrong
    return ref


def same_data(first: str, second: str) -> str | None:
    """Why two dataset arguments name the same data (None when they do not): a MULAN set and its
    ``mulan/<set>`` alias, river's yeast and MULAN's (equal array for array: tests/test_mulan.py),
    two spellings of one folder. Naming one data set twice in one benchmark would train it twice
    and give it two rows of a leaderboard."""
    def identity(argument: str) -> tuple[str, str]:
        if argument in DATASETS:
            name = DATASETS[argument].name.removeprefix("mulan/")
            return ("mulan", name) if name in _mulan_names() else ("named", DATASETS[argument].name)
        return ("folder", str(Path(argument).expanduser().resolve()))

    if first == second or identity(first) != identity(second):
        return None
    kind, name = identity(first)
    if kind == "folder":
        return f"both are the {'file' if Path(name).is_file() else 'folder'} {name}"
    if name == "yeast":
        return "river's copy of yeast and MULAN's own files hold the same arrays"
    return f"mulan/{name} is another name for {name}"


@lru_cache(maxsize=1)
def _mulan_names() -> frozenset[str]:
    from .mulan import MULAN_SETS

    return frozenset(MULAN_SETS)


def is_feature_dataset(name: str) -> bool:
    """A named feature dataset or a folder written by ``spmlkit extract`` (False for anything else)."""
    try:
        return resolve_dataset(str(name)).kind == "features"
    except ValueError:
        return False


def load_features(name: str) -> TabularDataset:
    """A named feature dataset (Yeast, a MULAN set) or a feature folder written by ``spmlkit extract``."""
    ref = resolve_dataset(str(name))
    if ref.kind != "features":
        raise ValueError(f"{name!r} is an image dataset, not a feature dataset; train on it with "
                         f"`spmlkit train --dataset {name}` or extract its features first (`spmlkit extract`)")
    if ref.form == "mat-file":
        from .mat_file import load_mat_file

        return load_mat_file(ref.path)
    if ref.form == "named":
        # a set read from the data folder is kept per folder: $SPMLKIT_DATA may name another one later
        if DATASETS[ref.name].cached is not None:
            from .download import data_home

            return _load_named(ref.name, str(data_home()))
        return _load_named(ref.name, "")
    from .feature_dir import load_feature_dir

    return load_feature_dir(ref.path)


@lru_cache(maxsize=16)
def _load_named(name: str, folder: str) -> TabularDataset:
    """Named datasets are read once per process (a sweep runs hundreds of runs on one)."""
    ds = DATASETS[name].load()
    from .tabular import TabularDataset

    if not isinstance(ds, TabularDataset):  # a plug-in's loader (docs/plugins.md) returned something else
        raise ValueError(f"dataset {name!r} ({DATASETS.origin(name)}): its loader returned a {type(ds).__name__}, "
                         "not a spmlkit.data.TabularDataset")
    for array in (ds.X_train, ds.Y_train, ds.X_test, ds.Y_test):
        if array is not None:  # a set without a test list (cal500) has none
            array.setflags(write=False)  # shared between runs: nobody may change them
    return ds
