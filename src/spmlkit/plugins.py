"""Users' code as plug-ins: losses, label algorithms, methods and datasets from a file or a module.

A researcher's new loss lives in their own file, not in spmlkit. A plug-in is that file
(``my_loss.py``) or an importable module (``my_pkg.losses``); importing it registers its names in
the one registry (:mod:`spmlkit.names`) with the same decorators spmlkit's own modules use, and
from then on every command treats them as built-ins (docs/plugins.md). Plug-ins come from:

* ``--plugin FILE.py`` / ``--plugin MODULE`` on every command, repeatable;
* ``plugins:`` in a sweep file (paths relative to the file) or a config file;
* the ``SPMLKIT_PLUGINS`` environment variable (references separated by ``os.pathsep``);
* installed packages, through the entry-point group ``spmlkit.plugins`` (each entry names a module).

A process loads each plug-in once, whatever asks for it again. Other processes of the same work
(sweep workers, forked or spawned, and Ray tasks) load it again *by its reference* (a path or a
module name carried in the run's settings), never from a pickled object, so a worker on another
machine imports the same code from the same place. A plug-in that cannot be loaded -- no such
file, a syntax error, an exception while it is imported, a name it registers twice or that
spmlkit or another plug-in already has -- is one line naming the file and what to do
(:class:`~spmlkit.errors.InputError`; ``--debug`` shows the traceback). So is a plug-in that
*exits* or is interrupted while it is imported (``sys.exit``, a script's ``argparse`` reading
the command line, Ctrl-C): ``SystemExit`` and ``KeyboardInterrupt`` are no ``Exception``, and
left alone they ended spmlkit with the plug-in's status and no word of which file did it. While
it is imported a plug-in sees a command line of its own name alone (``sys.argv == [its file]``),
so a script's parser never reads spmlkit's options as its own, and what it writes to stderr is
held until the import ends, so that an exit is one line that quotes the plug-in's last words.
A reference that registers nothing (``--plugin os``, a helper module) is refused in one line:
it is no plug-in, and recording it as one would claim that its code made the numbers. An
exception raised by the user's code *later*, while a run trains, is left alone: its traceback
points into their file.

A command that needs no plug-in (``report`` reads numbers from a store) passes ``on_broken``:
an installed or environment plug-in that cannot be loaded is then a warning, not the end of the
command.

What produced a number is part of it: every plug-in is described by its file's SHA-256, or by its
package's version when it is installed (:class:`Plugin`), in ``result.json`` and in every record
of a sweep or benchmark (:func:`plugin_records`); a run whose method or dataset comes from a
plug-in carries that code's identity in its settings (:func:`plugin_code`), so changing the code
makes new runs rather than reusing results of the old code.

The loader sits above the families it loads into (it imports :mod:`spmlkit.methods` first, so
that spmlkit's own names are registered before any user code runs, and a loss's method is made
while the user's file is being imported, where a clash is reported with the file's line).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib
import importlib.util
import io
import os
import sys
import traceback
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import InputError
from .names import BUILTIN, REGISTRY

__all__ = ["ENTRY_POINT_GROUP", "PLUGIN_ENV", "Plugin", "env_plugins", "is_file_reference", "load_plugins",
           "loaded_plugins", "plugin_code", "plugin_records"]

#: the environment variable naming plug-ins to load in every command (separated by os.pathsep)
PLUGIN_ENV = "SPMLKIT_PLUGINS"
#: the entry-point group through which an installed package offers its plug-in module
ENTRY_POINT_GROUP = "spmlkit.plugins"


@dataclass(frozen=True)
class Plugin:
    """A plug-in of this process: where it came from and which code it is.

    ``name`` is what a person reads (``my_loss.py``, ``my_pkg.losses``); ``module`` the module it
    was imported as, which is the origin of every name it registered; ``kind`` ``"file"``,
    ``"module"`` or ``"entry point"``. The code is identified by ``package`` and ``version`` for
    an installed package, else by the ``sha256`` of its file (the file alone: modules it
    imports are not part of it)."""

    name: str
    module: str
    kind: str
    path: str | None = None
    sha256: str | None = None
    package: str | None = None
    version: str | None = None

    @property
    def fingerprint(self) -> str:
        """The code's identity in one word: ``my-pkg==1.2.0``, ``sha256:<hex>`` or ``unknown``."""
        if self.version is not None:
            return f"{self.package}=={self.version}"
        return f"sha256:{self.sha256}" if self.sha256 else "unknown"

    def record(self) -> dict[str, Any]:
        """What a run's record says of it: the fields above that are known, and the names it registered."""
        fields = {"name": self.name, "module": self.module, "kind": self.kind, "path": self.path,
                  "sha256": self.sha256, "package": self.package, "version": self.version}
        return {**{k: v for k, v in fields.items() if v is not None},
                "registered": REGISTRY.registered_by(self.module)}


#: the plug-ins this process loaded, by identity (a file's resolved path, a module's name), in order
_LOADED: dict[str, Plugin] = {}
#: every plug-in this process knows, by module (loaded here, or user code that registered names itself)
_BY_MODULE: dict[str, Plugin] = {}


def is_file_reference(ref: str) -> bool:
    """A reference names a file when it ends in ``.py`` or holds a path separator; else a module."""
    return ref.endswith(".py") or "/" in ref or os.sep in ref or (os.altsep is not None and os.altsep in ref)


def env_plugins() -> list[str]:
    """The references in ``SPMLKIT_PLUGINS`` (empty entries skipped), as written."""
    return [ref.strip() for ref in os.environ.get(PLUGIN_ENV, "").split(os.pathsep) if ref.strip()]


def load_plugins(refs: Iterable[str] = (), *, installed: bool = True,
                 on_broken: Callable[[str], None] | None = None) -> list[Plugin]:
    """Load the plug-ins ``refs`` (paths relative to the working folder, or module names) and, with
    ``installed``, those of ``SPMLKIT_PLUGINS`` and of installed packages' entry points; each once
    per process. Returns the plug-ins of ``refs``, in order. Nothing is imported when there is
    nothing to load, so a command without plug-ins pays nothing for them.

    ``on_broken``: for a command that needs no plug-in, an installed or environment plug-in that
    cannot be loaded is handed to it as its one line (and left out) instead of raised; ``refs``,
    which the caller named, are raised whatever it is."""
    refs = [str(ref) for ref in refs]
    env = env_plugins() if installed else []
    entries = _entry_points() if installed else ()
    if not (refs or env or entries):
        return []
    from . import methods  # noqa: F401  (spmlkit's names first; a loss's method is made as it registers)

    def tolerated(load: Callable[[], Plugin]) -> None:
        try:
            load()
        except InputError as exc:
            if on_broken is None:
                raise
            on_broken(str(exc))

    for entry in entries:
        tolerated(lambda: _load_entry_point(entry))
    for ref in env:
        tolerated(lambda: _load(ref, f"{PLUGIN_ENV} entry {ref!r}"))
    return [_load(ref, ref) for ref in refs]


def loaded_plugins() -> list[Plugin]:
    """Every plug-in of this process: those loaded here, then any other module that registered a name."""
    for origin in REGISTRY.origins():
        _plugin_of_module(origin)
    return list(_BY_MODULE.values())


def plugin_records() -> list[dict[str, Any]]:
    """:meth:`Plugin.record` of every plug-in of this process (the ``plugins`` of a run's record)."""
    return [plugin.record() for plugin in loaded_plugins()]


def plugin_code(method: str, dataset: str) -> list[str]:
    """The plug-in code a run of ``method`` on ``dataset`` trains with, as ``"<name> <fingerprint>"``
    (sorted; empty for spmlkit's own methods and datasets): the method's recipe, its losses, its
    label algorithm, the dataset. A sweep puts it in the run's settings, so a run of changed code is
    a new run."""
    origins: set[str] = set()
    if method in REGISTRY.method:
        origins.add(REGISTRY.method.origin(method))
        families = {"loss": REGISTRY.loss, "labeling": REGISTRY.labeling}
        for family, name in REGISTRY.method[method].parts():  # the registered parts it is made of
            if name in families[family]:
                origins.add(families[family].origin(name))
    if dataset in REGISTRY.dataset:
        origins.add(REGISTRY.dataset.origin(dataset))
    origins.discard(BUILTIN)
    return sorted(f"{plugin.name} {plugin.fingerprint}" for plugin in map(_plugin_of_module, origins))


# ----------------------------------------------------------------------------- loading


def _load(ref: str, label: str) -> Plugin:
    known = set(_LOADED.values())
    modules = set(sys.modules)
    before = _names_of_plugins()
    plugin = _load_file(ref, label) if is_file_reference(ref) else _load_module(ref, label)
    if plugin not in known and _names_of_plugins() == before and not _registered_under(plugin.module):
        _forget(plugin, imported_here=plugin.module not in modules)
        what = f"{plugin.module} ({plugin.path})" if plugin.path else plugin.module
        raise InputError(f"plug-in {label} registers nothing: importing {what} added no loss, method, label "
                         "algorithm, data set or run logger; give the file or module of yours that registers them "
                         "(docs/plugins.md)")
    return plugin


def _names_of_plugins() -> int:
    """How many names the plug-ins of this process have registered (spmlkit's own not counted): in
    the one registry, and the run loggers of :mod:`spmlkit.training.loggers` (a layer above this
    one, so read only once something has imported it: a plug-in that registers a logger has)."""
    loggers = sys.modules.get("spmlkit.training.loggers")
    users_loggers = len(loggers.users_loggers()) if loggers is not None else 0
    return users_loggers + sum(family.origin(name) != BUILTIN for family in REGISTRY.families() for name in family)


def _registered_under(module: str) -> bool:
    """Whether ``module`` or one of its submodules registered a name (a package the user's own code
    imported before naming it as a plug-in registered its names then)."""
    return any(origin == module or origin.startswith(module + ".") for origin in REGISTRY.origins())


def _forget(plugin: Plugin, *, imported_here: bool) -> None:
    """Take a plug-in back out of this process's records (it turned out to be none), and its
    module out of ``sys.modules`` when this load imported it."""
    for identity in [k for k, v in _LOADED.items() if v is plugin]:
        del _LOADED[identity]
    if _BY_MODULE.get(plugin.module) is plugin:
        del _BY_MODULE[plugin.module]
    if imported_here:
        sys.modules.pop(plugin.module, None)


def _load_file(ref: str, label: str) -> Plugin:
    path = Path(ref).expanduser()
    if not path.is_file():
        where = "is a folder, not a .py file" if path.is_dir() else f"does not exist (looked for {path.absolute()})"
        raise InputError(f"plug-in {label}: the file {where}; give the path of a Python file, e.g. --plugin my_loss.py")
    real = path.resolve()
    if str(real) in _LOADED:
        return _LOADED[str(real)]
    if real.suffix != ".py":
        raise InputError(f"plug-in {label}: a plug-in file is Python source ending in .py, got {real.name}")
    module = real.stem
    if not module.isidentifier():
        raise InputError(f"plug-in {label}: {real.name} cannot be imported under its name {module!r}; rename it to "
                         "letters, digits and underscores (e.g. my_loss.py)")
    held = sys.modules.get(module)
    if held is not None and _same_file(getattr(held, "__file__", None), real):  # the user imported it already
        return _remember(str(real), _describe_file(module, real, real.read_bytes()))
    if held is not None or _importable_elsewhere(module, real):
        other = getattr(held, "__file__", None) if held is not None else _spec_origin(module)
        raise InputError(f"plug-in {label}: its module name {module!r} is already that of "
                         f"{other or 'a built-in module'}; rename the file")
    source = real.read_bytes()
    plugin = _describe_file(module, real, source)
    folder = str(real.parent)
    if folder not in sys.path:  # its own helpers import as they would beside a script
        sys.path.append(folder)
    spec = importlib.util.spec_from_file_location(module, real)
    assert spec is not None and spec.loader is not None
    imported = importlib.util.module_from_spec(spec)
    sys.modules[module] = imported
    try:
        with _importing(label, str(real), str(real)):
            spec.loader.exec_module(imported)
    except BaseException as exc:
        sys.modules.pop(module, None)
        if isinstance(exc, InputError) or not isinstance(exc, Exception):
            raise
        raise InputError(_broken(label, exc, str(real))) from exc
    return _remember(str(real), plugin)


def _load_module(ref: str, label: str) -> Plugin:
    if not all(part.isidentifier() for part in ref.split(".")):
        raise InputError(f"plug-in {label}: neither a .py file nor a module name; give a path (my_loss.py) or a "
                         "module name (my_pkg.losses)")
    if ref in _LOADED:
        return _LOADED[ref]
    if ref in sys.modules:  # imported by the user's own code already
        return _remember(ref, _describe_module(ref, label, "module"))
    here = os.getcwd()
    if here not in sys.path:  # a module in the working folder imports as it would under `python -m`
        sys.path.append(here)
    try:
        with _importing(label, ref, lambda: _spec_origin(ref)):
            importlib.import_module(ref)
    except InputError:
        raise
    except ModuleNotFoundError as exc:
        if exc.name is not None and ref.startswith(exc.name):
            raise InputError(f"plug-in {label}: no module named {exc.name!r} (looked on the Python path and in "
                             f"{here}); give the file instead (--plugin path/to/{ref.split('.')[-1]}.py) or install "
                             "the package") from exc
        raise InputError(_broken(label, exc, _spec_origin(ref))) from exc
    except Exception as exc:
        raise InputError(_broken(label, exc, _spec_origin(ref))) from exc
    return _remember(ref, _describe_module(ref, label, "module"))


def _load_entry_point(entry: Any) -> Plugin:
    module = entry.value.partition(":")[0].strip()
    if module in _LOADED:
        return _LOADED[module]
    dist = getattr(entry, "dist", None)
    where = f"entry point {entry.name!r} of the installed package {dist.name if dist else '?'}"
    try:
        with _importing(where, module, lambda: _spec_origin(module), "fix or uninstall that package"):
            entry.load()
    except InputError:
        raise
    except Exception as exc:
        raise InputError(_broken(where, exc, _spec_origin(module), "fix or uninstall that package")) from exc
    plugin = Plugin(entry.name, module, "entry point", _spec_origin(module),
                    package=dist.name if dist else None, version=dist.version if dist else None)
    if plugin.version is None:
        plugin = _describe_module(module, entry.name, "entry point")
    return _remember(module, plugin)


@functools.lru_cache(maxsize=1)
def _entry_points() -> tuple[Any, ...]:
    """The installed packages' plug-ins, looked up once per process (a scan of every installed package)."""
    import importlib.metadata

    return tuple(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))


def _remember(identity: str, plugin: Plugin) -> Plugin:
    _LOADED[identity] = plugin
    _BY_MODULE.setdefault(plugin.module, plugin)
    return plugin


def _broken(label: str, exc: BaseException, file: str | None, todo: str = "fix it") -> str:
    """One line for a plug-in that failed while it was imported: what, where in the user's file, and
    ``todo``."""
    if isinstance(exc, SyntaxError):
        where = f" ({Path(exc.filename).name if exc.filename else file}, line {exc.lineno})" if exc.lineno else ""
        return f"plug-in {label} is not valid Python: {exc.msg}{where}; fix the file"
    from .names import RegistrationError

    if isinstance(exc, RegistrationError):  # a name taken, or not a safe name
        return f"plug-in {label}: {exc}{_line_in(exc, file)}"
    first = (str(exc).strip().splitlines() or [""])[0]
    return (f"plug-in {label} raised {type(exc).__name__} while it was imported: {first}{_line_in(exc, file)}; "
            f"{todo} (--debug shows the traceback)")


class _HeldStream:
    """A stand-in for ``sys.stderr`` while a plug-in is imported: what is written is held, and
    written on at :meth:`release`; from then on it writes straight through, so that an object
    the plug-in kept (a logging handler made at import) still reaches the real stream. Anything
    else (``encoding``, ``isatty``, ``fileno``) is the real stream's."""

    def __init__(self, stream: Any) -> None:
        self._stream, self._held = stream, io.StringIO()
        self._holding = True

    def write(self, text: str) -> int:
        return (self._held if self._holding else self._stream).write(text)

    def flush(self) -> None:
        if not self._holding:
            self._stream.flush()

    def __getattr__(self, name: str) -> Any:  # fileno, encoding, isatty ...: the real stream's
        return getattr(self._stream, name)

    def last_line(self) -> str:
        """The last non-empty line written so far (what an exiting script said last)."""
        lines = [line.strip() for line in self._held.getvalue().splitlines() if line.strip()]
        return lines[-1] if lines else ""

    def release(self, *, keep: bool) -> None:
        """Stop holding; with ``keep``, write what was held to the real stream first."""
        if keep and self._held.getvalue():
            self._stream.write(self._held.getvalue())
            self._stream.flush()
        self._holding = False


@contextlib.contextmanager
def _importing(label: str, argv0: str, file: str | Callable[[], str | None] | None, todo: str = "fix it"
               ) -> Iterator[None]:
    """Around a plug-in's import: it sees the command line ``[argv0]`` (its own name, none of
    spmlkit's options) and its stderr is held; an exit or an interrupt becomes one line naming
    it (:class:`InputError`), quoting the last line it wrote, which is not written again.
    ``file``: the plug-in's file, or how to find it once it is imported (a module's)."""
    argv, stderr = sys.argv, sys.stderr
    held = _HeldStream(stderr)
    sys.argv, sys.stderr = [argv0], held
    stopped: BaseException | None = None
    try:
        yield
    except (SystemExit, KeyboardInterrupt) as exc:
        stopped = exc
    finally:
        sys.argv = argv
        if sys.stderr is held:
            sys.stderr = stderr
        held.release(keep=stopped is None)
    if stopped is not None:
        path = file() if callable(file) else file
        raise InputError(_stopped(label, stopped, path, held.last_line(), todo)) from stopped


def _stopped(label: str, exc: BaseException, file: str | None, said: str, todo: str) -> str:
    """One line for a plug-in that exited or was interrupted while it was imported."""
    where = _line_in(exc, file)
    if isinstance(exc, KeyboardInterrupt):
        return (f"plug-in {label} was interrupted while it was imported{where}; nothing ran: run the command again "
                "(and keep long work out of a plug-in's import)")
    code = exc.code if isinstance(exc, SystemExit) else None
    words = f', after writing "{said}"' if said else ""
    return (f"plug-in {label} called sys.exit({code!r}) while it was imported{where}{words}; a plug-in only "
            "registers its names when imported: put a script's own work (its argument parsing, its training) under "
            f"`if __name__ == \"__main__\":`, or {todo} (--debug shows the traceback)")


def _line_in(exc: BaseException, file: str | None) -> str:
    """`` (my_loss.py, line 12)``: the last line of ``file`` the traceback passed, when it did."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if file and _same_file(f.filename, Path(file))]
    return f" ({Path(frames[-1].filename).name}, line {frames[-1].lineno})" if frames else ""


# ----------------------------------------------------------------------------- what the code is


def _describe_file(module: str, path: Path, source: bytes) -> Plugin:
    """A file's plug-in, named by the file's name: where it lies is no part of which code it is."""
    return Plugin(path.name, module, "file", str(path), hashlib.sha256(source).hexdigest())


def _describe_module(module: str, name: str, kind: str) -> Plugin:
    """A module's plug-in: its installed package's version, else its file's SHA-256."""
    package, version = _installed_version(module)
    path = _spec_origin(module)
    if version is not None:
        return Plugin(name, module, kind, path, package=package, version=version)
    sha = hashlib.sha256(Path(path).read_bytes()).hexdigest() if path and Path(path).is_file() else None
    return Plugin(name, module, kind, path, sha)


def _plugin_of_module(module: str) -> Plugin:
    """The plug-in behind an origin: loaded here, or user code that registered names itself."""
    if module not in _BY_MODULE:
        _BY_MODULE[module] = _describe_module(module, module, "module")
    return _BY_MODULE[module]


def _installed_version(module: str) -> tuple[str | None, str | None]:
    """(package, version) of the installed distribution that holds ``module``, or (None, None)."""
    import importlib.metadata

    top = module.partition(".")[0]
    try:
        names = [top] if _dist_version(top) else importlib.metadata.packages_distributions().get(top, [])
    except Exception:  # noqa: BLE001 - a broken installation only means "unknown"
        return None, None
    for name in names:
        version = _dist_version(name)
        if version is not None:
            return name, version
    return None, None


def _dist_version(name: str) -> str | None:
    import importlib.metadata

    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _spec_origin(module: str) -> str | None:
    """The file ``module`` is (or would be) imported from; None when unknown or not a file."""
    held = sys.modules.get(module)
    if held is not None:
        return getattr(held, "__file__", None)
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    return spec.origin if spec is not None and spec.has_location else None


def _importable_elsewhere(module: str, path: Path) -> bool:
    """Whether importing ``module`` would find another file than ``path`` (a stdlib or installed
    module of the same name, which the plug-in would hide from everyone after it)."""
    origin = _spec_origin(module)
    return origin is not None and not _same_file(origin, path)


def _same_file(a: str | None, b: Path) -> bool:
    try:
        return a is not None and Path(a).resolve() == b.resolve()
    except OSError:
        return False
