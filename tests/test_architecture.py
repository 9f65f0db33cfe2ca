"""Layers only look down and no modules import each other in a circle (docs/architecture.md,
"Layers"): checked on every module's imports."""

import ast
import re
from pathlib import Path


import spmlkit

ROOT = Path(spmlkit.__file__).parent

#: top-level part of spmlkit -> layer; a module may import its own layer and the ones below
LAYERS = {
    "__init__": 0, "protocol": 0, "labels": 0, "metrics": 0, "io": 0, "errors": 0, "signatures": 0, "cpus": 0, "transfer": 0, "allocator": 0,
    "names": 0, "file_names": 0,
    "output_dir": 0, "stacked": 0,
    "losses": 1, "labeling": 1,
    "data": 2, "models": 2, "methods": 2, "plugins": 2,
    "training": 3,
    "experiments": 4,
    "cli": 5, "estimator": 5, "extract": 5, "predict": 5, "export": 5, "__main__": 5,
}


def _part(path: Path) -> str:
    rel = path.relative_to(ROOT).parts
    return rel[0].removesuffix(".py")


def _imported_parts(path: Path) -> set[str]:
    """spmlkit parts imported by ``path`` (absolute and relative imports, also inside functions)."""
    tree = ast.parse(path.read_text())
    package = list(path.relative_to(ROOT).parent.parts)
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                target = base + (node.module.split(".") if node.module else [])
                names = [target + [a.name] for a in node.names] if not target else [target]
            elif node.module and node.module.startswith("spmlkit"):
                names = [node.module.split(".")[1:] or [a.name for a in node.names]]
            else:
                continue
            for parts in names:
                if parts:
                    found.add(parts[0].removesuffix(".py"))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("spmlkit."):
                    found.add(alias.name.split(".")[1])
    return found


def test_every_part_has_a_layer():
    parts = {_part(p) for p in ROOT.rglob("*.py")}
    assert parts <= set(LAYERS), sorted(parts - set(LAYERS))


def test_lower_layers_never_import_upper_ones():
    violations = []
    for path in sorted(ROOT.rglob("*.py")):
        own = LAYERS[_part(path)]
        for part in _imported_parts(path):
            if part in LAYERS and LAYERS[part] > own:
                violations.append(f"{path.relative_to(ROOT)} (layer {own}) imports {part} (layer {LAYERS[part]})")
    assert not violations, "\n".join(violations)


def test_no_module_sits_beside_a_package_of_the_same_name():
    for path in ROOT.rglob("*.py"):
        assert not (path.parent / path.stem).is_dir(), f"{path} sits beside the package {path.parent / path.stem}"


def _module_names(root: Path, package: str) -> dict[str, Path]:
    """Dotted module name -> file, for every module of the package in ``root`` (a package's
    name is its ``__init__.py``'s)."""
    names = {}
    for path in root.rglob("*.py"):
        parts = [package, *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def _ancestors(name: str) -> list[str]:
    """The packages Python runs before it runs ``name``: ``a.b.c`` -> ``a.b``, ``a``."""
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(len(parts) - 1, 0, -1)]


def _import_graph(root: Path, package: str) -> dict[str, set[str]]:
    """Which modules of the package each module imports, anywhere in its file (inside
    functions too: they run, only later). Importing ``a.b.c`` also runs ``a.b``'s
    ``__init__`` first, so it counts as importing that package too, except where the package
    is the importing module's own (Python has started it before the module, whatever the
    module imports); a name taken from its own package's ``__init__`` still counts, since
    that ``__init__`` may be the one importing the module. ``from a.b import c`` imports the
    module ``a.b.c`` when there is one."""
    modules = _module_names(root, package)
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        own_package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        targets = []
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets += [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = own_package[: len(own_package) - node.level + 1] + (node.module or "").split(".")
                    base_name = ".".join(part for part in base if part)
                else:
                    base_name = node.module or ""
                targets += [f"{base_name}.{alias.name}" if f"{base_name}.{alias.name}" in modules else base_name
                            for alias in node.names]
        for target in targets:
            while target and target not in modules:  # `import a.b.name`: the module a.b
                target = target.rpartition(".")[0]
            if not target:
                continue  # outside the package
            if target != name:
                graph[name].add(target)  # even its own package: a name from an __init__ that may import it
            graph[name].update(p for p in _ancestors(target) if p != name and p not in _ancestors(name))
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The groups of modules that import each other, directly or not (the graph's strongly
    connected components of more than one module), each sorted, in sorted order."""
    reach = {}
    for start in graph:
        seen, todo = set(), [start]
        while todo:
            for nxt in graph[todo.pop()]:
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        reach[start] = seen
    groups = {tuple(sorted(w for w in reach[v] if v in reach[w])) for v in graph if v in reach[v]}
    return sorted(list(group) for group in groups)


def test_the_import_graph_finds_every_kind_of_import(tmp_path: Path) -> None:
    """The checker itself, on a package made for it: absolute, relative and function-level
    imports, a package's ``__init__`` run by importing its module, and a circle of three."""
    files = {
        "__init__.py": "",
        "a.py": "import pkg.sub.deep\n",  # pkg.sub.deep, and pkg.sub (its __init__ runs first)
        "b.py": "def later():\n    from .sub import deep\n",  # inside a function: still an import
        "c.py": "from pkg import a\nimport os\n",  # a module of pkg; os is outside
        "sub/__init__.py": "from . import deep, user\n",  # its own modules: no cycle through the package
        "sub/deep.py": "from .. import c\n",
        "sub/helper.py": "from . import deep\nfrom .deep import name\n",  # modules of its own package
        "sub/user.py": "from ..sub import value\n",  # a name of its own package's __init__
        "loop/__init__.py": "",
        "loop/x.py": "from .y import f\n",
        "loop/y.py": "from pkg.loop import z\n",
        "loop/z.py": "from . import x\nfrom pkg.loop.x import g\n",
    }
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    graph = _import_graph(tmp_path, "pkg")
    assert graph["pkg.a"] == {"pkg.sub.deep", "pkg.sub"}
    assert graph["pkg.b"] == {"pkg.sub.deep", "pkg.sub"}
    assert graph["pkg.c"] == {"pkg.a"}
    assert graph["pkg.sub"] == {"pkg.sub.deep", "pkg.sub.user"}
    assert graph["pkg.sub.deep"] == {"pkg.c"}
    assert graph["pkg.sub.helper"] == {"pkg.sub.deep"}  # its own package pkg.sub is not a dependency
    assert graph["pkg.sub.user"] == {"pkg.sub"}  # ... unless it takes a name from its __init__
    assert graph["pkg.loop.y"] == {"pkg.loop.z"}
    assert _cycles(graph) == [["pkg.a", "pkg.c", "pkg.sub", "pkg.sub.deep", "pkg.sub.user"],
                              ["pkg.loop.x", "pkg.loop.y", "pkg.loop.z"]]


def test_no_modules_import_each_other_in_a_circle() -> None:
    """A circle makes what a module sees depend on which module was imported first (a name
    not yet defined, half a module), and it ties layers that should stand alone."""
    cycles = _cycles(_import_graph(ROOT, "spmlkit"))
    assert not cycles, "modules importing each other in a circle:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def _drawn_layers(doc: str) -> dict[str, int]:
    """Part -> layer as the picture of docs/architecture.md, "Layers" draws them: a row starting
    with ``L<n>`` opens layer n's boxes, and the first line of each box names its parts
    (``name/`` a package, ``name.py`` a module)."""
    section = doc.split("## Layers", 1)[1].split("\n## ", 1)[0]
    picture = section.split("```", 2)[1]
    drawn = {}
    for line in picture.splitlines():
        row = re.match(r"\s*L(\d)\s+(.*)", line)
        if row:
            for name in re.findall(r"([A-Za-z_]+)(?:/|\.py)", row.group(2)):
                drawn[name] = int(row.group(1))
    return drawn


def test_the_documented_layers_are_the_checked_ones():
    """The picture maintainers read is the table this file checks: every part, on its layer."""
    doc = (Path(__file__).resolve().parents[1] / "docs" / "architecture.md").read_text()
    assert _drawn_layers(doc) == LAYERS
