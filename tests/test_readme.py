"""The README's two commands stay true: CI runs exactly the README's test command."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _readme_commands():
    text = (ROOT / "README.md").read_text()
    head = text.split("---", 1)[0]
    return [line.strip() for line in head.splitlines() if line.startswith("    ")]


def test_readme_starts_with_exactly_two_commands():
    cmds = _readme_commands()
    assert len(cmds) == 2
    assert cmds[0].endswith("spmlkit benchmark --dataset yeast")
    assert cmds[1].endswith("python -m pytest")


def test_ci_runs_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text()
    m = re.search(r"^TEST_COMMAND='(.*)'$", ci, re.M)
    assert m and m.group(1) == _readme_commands()[1]


# ----------------------------------------------------------------------------- the README runs
"""Every Python block of README.md and docs/*.md runs as written, and so does every command of
their command blocks (an indented line or a bash fence) that needs no download and no GPU.

The blocks of one file run in order in one namespace, as a reader pasting them one after the
other into one session would; a line ``expression  # value`` must evaluate to that value. A
command is either run (the files it reads are made first, as the text describes them) or listed
in NOT_RUN with the reason, so a command added to the docs must be classified here."""

import ast
import shlex

import numpy as np
import pytest

FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.M | re.S)
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
COMMAND_WORDS = ("spmlkit", "python", "python3", "ray", "pip")

#: commands of the docs that the test does not run, and why
NOT_RUN = {
    "python3 -m venv .venv && .venv/bin/pip install -e . && .venv/bin/spmlkit benchmark --dataset yeast":
        "installs spmlkit and PyTorch from PyPI (a download); the benchmark alone is test_benchmark's",
    'python3 -m venv .venv && .venv/bin/pip install -e ".[test]" && .venv/bin/python -m pytest':
        "installs from PyPI and runs this very test suite",
    "spmlkit train --prepared prepared/photos --method em_apl":
        "an image run with ImageNet weights: downloads ResNet-50 (and wants a GPU)",
    "spmlkit train --prepared prepared/shop --method em_apl":
        "an image run with ImageNet weights: downloads ResNet-50 (and wants a GPU)",
    "spmlkit export --checkpoint runs/folder/em_apl/seed0 --format onnx":
        "needs the image run of docs/your-data.md (a download) and the export extra (onnx, onnxruntime)",
    "spmlkit export --checkpoint runs/folder/em_apl/seed0 --format torchscript":
        "needs the image run of docs/your-data.md (a download)",
    "spmlkit extract --prepared prepared/photos --features-out features/photos":
        "an image run with ImageNet weights: downloads ResNet-50; test_own_data_compared extracts with a small CNN",
    "spmlkit benchmark --dataset features/photos --out results/photos":
        "needs the features of the extract above (a download); test_own_data_compared benchmarks extracted features",
    "spmlkit benchmark --dataset prepared/genes --out results/genes":
        "216 runs, about 10 s on 2 cores; test_own_data_compared benchmarks a table on one seed and one lr",
    "spmlkit sweep grid.yaml --backend ray": "needs the ray extra and starts a Ray instance",
    "ray start --head --port 6379": "starts a Ray cluster",
    "ray start --address HEAD:6379": "joins a Ray cluster on another machine",
    "spmlkit sweep grid.yaml --backend ray --address HEAD:6379": "needs a Ray cluster",
}


@pytest.fixture(autouse=True)
def _plugins_of_the_docs_stay_here():
    """docs/plugins.md and docs/losses-api.md register losses and methods of a reader's own: taken
    back after each document, so no other test sees them."""
    from fixtures.plugins import isolated_plugins

    with isolated_plugins():
        yield


def _outside_fences(text: str) -> str:
    return FENCE.sub("", text)


#: the first line of a block that is a file the reader saves (``# my_loss.py``), not code to run
FILE_BLOCK = re.compile(r"# [\w.-]+\.(py|yaml)")


def python_blocks(path: Path) -> list[str]:
    """The Python blocks a reader runs; a block that is a file to save (``# my_loss.py``) is run by
    the commands that load it instead."""
    return [body for lang, body in FENCE.findall(path.read_text())
            if lang == "python" and not FILE_BLOCK.fullmatch(body.splitlines()[0] if body.strip() else "")]


def _command(line: str) -> str:
    """A command line without its trailing comment (``cmd   # what it does``)."""
    return re.split(r"\s{2,}#", line.strip())[0].strip()


def shell_commands(path: Path) -> list[str]:
    """The commands of ``path``'s command blocks: bash/sh fences, and indented lines outside fences
    that start with a command (Markdown's indented code blocks)."""
    text = path.read_text()
    commands = [_command(line) for lang, body in FENCE.findall(text) if lang in ("bash", "sh", "shell")
                for line in body.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    for line in _outside_fences(text).splitlines():
        if line.startswith("    ") and line.split() and line.split()[0] in COMMAND_WORDS:
            commands.append(_command(line))
    return commands


def _jpeg(path: Path, shade: int) -> None:
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (16, 16), (shade, 255 - shade, 128)).save(path)


def _photos_by_label(where: Path) -> None:
    """docs/your-data.md's folder per label (017.jpg filed under cat and dog: one image, two labels)."""
    for label, names in {"cat": ("001", "002", "017"), "dog": ("003", "017"), "outdoor": ("004",)}.items():
        for i, name in enumerate(names):
            _jpeg(where / "photos" / label / f"{name}.jpg", 40 * i + len(label))
    (where / "photos" / "dog" / "017.jpg").write_bytes((where / "photos" / "cat" / "017.jpg").read_bytes())


def _labels_file(where: Path) -> None:
    """docs/your-data.md's labels file and the pictures it lists."""
    for i in (1, 2, 3):
        _jpeg(where / "pictures" / "shop" / f"000{i}.jpg", 60 * i)
    (where / "labels.csv").write_text("image,positives,negatives\nshop/0001.jpg,shoe,\n"
                                      "shop/0002.jpg,shoe;bag,hat\nshop/0003.jpg,hat,\n")


def _genes_tables(where: Path) -> None:
    """A table of genes (one observed function each) and a fully labelled test table."""
    functions = ("growth", "repair", "transport")
    rng = np.random.default_rng(0)
    for name, rows, test in (("genes.csv", 40, False), ("genes-test.csv", 12, True)):
        lines = ["gene,g1,g2,g3,g4,positives"]
        for i, x in enumerate(rng.normal(size=(rows, 4)).round(3)):
            # the training table: one observed function per gene; the test table: every true one
            labels = [f for f, v in zip(functions, x) if v > 0] if test else [functions[x[:3].argmax()]]
            lines.append(f"{name[0]}{i}," + ",".join(map(str, x)) + "," + ";".join(labels))
        (where / name).write_text("\n".join(lines) + "\n")


def _photos_with_test_photos(where: Path) -> None:
    """docs/protocol.md's folder of photos and a test folder of fully labelled ones."""
    for folder, labels in (("photos", ("cat", "dog", "outdoor")), ("test_photos", ("cat", "dog"))):
        for k, label in enumerate(labels):
            for i in range(2):
                _jpeg(where / folder / label / f"{folder[0]}{label}{i}.jpg", 30 * k + 90 * i + len(folder))


#: the files each document's commands read, as its text describes them (keyed on the file name)
INPUTS = {
    "README.md": (_photos_by_label,),
    "your-data.md": (_photos_by_label, _labels_file, _genes_tables),
    "protocol.md": (_genes_tables, _photos_with_test_photos),
}


def _make_inputs(doc: Path, where: Path) -> None:
    """The files the commands of ``doc`` read, as its text shows them: each ``# NAME.yaml`` or
    ``# NAME.py`` block written to that file, and the folders and tables of :data:`INPUTS`."""
    for lang, body in FENCE.findall(doc.read_text()):
        first = body.splitlines()[0] if body.strip() else ""
        if lang in ("yaml", "python") and FILE_BLOCK.fullmatch(first):
            (where / first[2:]).write_text(body)
    for make in INPUTS.get(doc.name, ()):
        make(where)


def _check_values(block: str, namespace: dict) -> None:
    """``expression  # literal`` lines: the expression's value is the literal the text shows."""
    for line in block.splitlines():
        code, _, comment = line.partition("  #")
        try:
            expected = ast.literal_eval(comment.strip())
            tree = ast.parse(code.strip())
        except (ValueError, SyntaxError):
            continue
        if len(tree.body) == 1 and isinstance(tree.body[0], ast.Expr):
            assert eval(code.strip(), namespace) == expected, line


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("doc", DOCUMENTS, ids=lambda p: p.name)
def test_every_python_block_runs_as_written(doc, tmp_path, monkeypatch):
    blocks = python_blocks(doc)
    monkeypatch.chdir(tmp_path)
    _make_inputs(doc, tmp_path)
    namespace: dict = {"__name__": f"{doc.stem}_blocks"}
    for i, block in enumerate(blocks):
        exec(compile(block, f"{doc.name}, python block {i + 1}", "exec"), namespace)
        _check_values(block, namespace)
    if doc.name == "README.md":  # the estimator on Yeast's simulated single positives, scored on the truth
        assert 0.3 < namespace["mAP"] < 0.5
    if doc.name == "python-api.md":  # the API block's run and the user-arrays block are in there
        assert len(blocks) >= 2 and 0 < namespace["result"].test_map < 1 and namespace["clf"].classes_.tolist() == [
            0, 1, 2, 3]


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("doc", DOCUMENTS, ids=lambda p: p.name)
def test_every_command_runs_or_says_why_not(doc, tmp_path, monkeypatch, capsys):
    from spmlkit.cli import main

    commands = shell_commands(doc)
    monkeypatch.chdir(tmp_path)
    _make_inputs(doc, tmp_path)
    for command in commands:
        if command in NOT_RUN:
            continue
        words = shlex.split(command)
        assert words[0] == "spmlkit", f"{doc.name}: {command!r} is neither run here nor listed in NOT_RUN"
        code = main(words[1:])
        printed = capsys.readouterr()
        assert code == 0, f"{doc.name}: `{command}` exited {code}: {printed.err.strip()[-500:]}"


def test_not_run_lists_only_commands_the_docs_hold():
    held = {c for doc in DOCUMENTS for c in shell_commands(doc)}
    assert set(NOT_RUN) <= held, sorted(set(NOT_RUN) - held)
    assert {"spmlkit train", "spmlkit train --dry-run", "spmlkit sweep grid.yaml --dry-run"} <= held - set(NOT_RUN)
