"""Layers only look down (docs/architecture.md, "Layers"): checked on every module's imports."""

import ast
from pathlib import Path

import spmlkit

ROOT = Path(spmlkit.__file__).parent

#: top-level part of spmlkit -> layer; a module may import its own layer and the ones below
LAYERS = {
    "__init__": 0, "protocol": 0, "labels": 0, "metrics": 0, "io": 0, "errors": 0,
    "methods": 1, "losses": 1, "labeling": 1,
    "data": 2, "models": 2,
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
