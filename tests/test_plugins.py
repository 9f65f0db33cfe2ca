"""Plug-ins (docs/plugins.md): a user's loss, method, label algorithm or data set from a file or a
module works wherever a built-in does, every process loads it by reference, a record says which
code produced it, and a broken plug-in is one line naming its file.

Every test runs inside :func:`~fixtures.plugins.isolated_plugins`, so what it registers is taken
back; a plug-in is loaded in this process only through the command line or the public loader.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures.plugins import MY_LOSS, isolated_plugins
from spmlkit.cli import main

#: two epochs on 300 rows of Yeast: a run of a second or two
QUICK = ["--epochs", "2", "--subset", "300"]


@pytest.fixture(autouse=True)
def _isolated():
    with isolated_plugins():
        yield


@pytest.fixture
def my_loss(tmp_path: Path) -> Path:
    path = tmp_path / "plugin" / "my_loss.py"
    path.parent.mkdir()
    path.write_text(MY_LOSS)
    return path


def _result(folder: Path) -> dict:
    return json.loads((folder / "result.json").read_text())


# ----------------------------------------------------------------------------- one registry


def test_the_one_registry_knows_who_registered_each_name(my_loss: Path) -> None:
    from spmlkit.names import BUILTIN, REGISTRY, origin_of
    from spmlkit.plugins import load_plugins

    assert origin_of("spmlkit.losses.elementwise") == BUILTIN and origin_of("my_pkg.losses") == "my_pkg.losses"
    assert "my_loss" not in REGISTRY.method
    (plugin,) = load_plugins([str(my_loss)])
    assert (plugin.name, plugin.module, plugin.kind) == ("my_loss.py", "my_loss", "file")
    assert plugin.sha256 == hashlib.sha256(my_loss.read_bytes()).hexdigest()
    # a loss is also a method of its name, trained on the observed labels with nothing around it
    method = REGISTRY.method["my_loss"]
    assert (method.parts(), method.labels, method.made_of.regularizers) == ((("loss", "my_loss"),), "observed", ())
    assert REGISTRY.loss.origin("my_loss") == REGISTRY.method.origin("my_loss") == "my_loss"
    assert REGISTRY.loss.origin("an") == REGISTRY.method.origin("an") == BUILTIN
    assert REGISTRY.registered_by("my_loss") == ["loss my_loss", "method my_loss"]
    # spmlkit's own parts of other recipes are no methods (method=False)
    assert "highrank" in REGISTRY.loss and "highrank" not in REGISTRY.method and "opml_soft" not in REGISTRY.method


def test_a_recipe_of_the_losses_author_takes_the_place_of_its_derived_method(tmp_path: Path) -> None:
    from spmlkit.methods import METHODS
    from spmlkit.plugins import load_plugins

    path = tmp_path / "recipe.py"
    path.write_text(MY_LOSS + "\nfrom spmlkit.methods import loss_method, register as register_method\n"
                    "register_method('my_loss', 'my loss with APL', paper='me')(loss_method('my_loss', labeling='apl'))\n")
    load_plugins([str(path)])
    assert (METHODS["my_loss"].made_of.labeling, METHODS["my_loss"].description) == ("apl", "my loss with APL")


def test_an_unknown_method_is_answered_with_the_closest_and_where_yours_come_from(capsys) -> None:
    from spmlkit.methods import get_method

    with pytest.raises(ValueError, match=r"unknown method 'em_apll' \(did you mean 'em_apl'\?\); valid names are: "
                                         r"an, an_ls, .*; one of your own comes from a plug-in: --plugin FILE\.py"):
        get_method("em_apll")
    assert main(["train", "--method", "em_apll", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "did you mean 'em_apl'?" in err and "--plugin" in err


# ----------------------------------------------------------------------------- broken plug-ins

BROKEN = {
    "syntax": ("import torch\ndef f(:\n    pass\n", "plug-in {f} is not valid Python: invalid syntax (bad.py, line 2); "
                                                      "fix the file"),
    "raises": ("x = 1\ny = x / 0\n", "plug-in {f} raised ZeroDivisionError while it was imported: division by zero "
                                     "(bad.py, line 2); fix it (--debug shows the traceback)"),
    "builtin name": (MY_LOSS.replace('"my_loss", "AN', '"an", "AN'),
                     "plug-in {f}: loss 'an' is a built-in name of spmlkit's; give yours another name (bad.py, line 6)"),
    "twice": (MY_LOSS + "\n@register('my_loss', 'again')\nclass Again(MyLoss):\n    pass\n",
              "plug-in {f}: loss 'my_loss' is registered twice by bad; register it once (bad.py, line 17)"),
    "a method's name": (MY_LOSS.replace('"my_loss", "AN', '"opml_sp", "AN'),
                        "plug-in {f}: loss 'opml_sp' would also be the method 'opml_sp', but spmlkit's method of that "
                        "name trains the loss 'opml_soft'; give the loss another name, or register it with method=False "
                        "(bad.py, line 6)"),
    "a name that is a path": (MY_LOSS.replace('"my_loss", "AN', '"../my_loss", "AN'),
                              "plug-in {f}: loss name '../my_loss' is not a safe name: 1 to 64 of the characters A-Z "
                              "a-z 0-9 _ - ., starting with a letter, a digit or _, without '..' (names become file "
                              "and folder names); register it under such a name (bad.py, line 6)"),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_a_broken_plugin_file_is_one_line_naming_it(case: str, tmp_path: Path, capsys) -> None:
    source, message = BROKEN[case]
    bad = tmp_path / "bad.py"
    bad.write_text(source)
    assert main(["methods", "--plugin", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err == f"spmlkit methods: error: {message.format(f=bad)}\n"
    assert "bad" not in sys.modules  # a failed import leaves no half module behind


@pytest.mark.parametrize("ref, message", [
    ("nowhere.py", "plug-in nowhere.py: the file does not exist (looked for {cwd}/nowhere.py); give the path of a "
                   "Python file, e.g. --plugin my_loss.py"),
    ("no_such_module", "plug-in no_such_module: no module named 'no_such_module' (looked on the Python path and in "
                       "{cwd}); give the file instead (--plugin path/to/no_such_module.py) or install the package"),
    ("my-loss", "plug-in my-loss: neither a .py file nor a module name; give a path (my_loss.py) or a module name "
                "(my_pkg.losses)"),
    ("json.py", "plug-in json.py: its module name 'json' is already that of {json}; rename the file"),
])
def test_a_plugin_that_cannot_be_found_or_imported_is_one_line(ref: str, message: str, capsys) -> None:
    Path("json.py").write_text("x = 1\n")
    assert main(["losses", "--plugin", ref]) == 2
    import json as stdlib_json

    err = capsys.readouterr().err
    assert err == f"spmlkit losses: error: {message.format(cwd=os.getcwd(), json=stdlib_json.__file__)}\n"


def test_an_error_inside_the_users_loss_keeps_its_traceback_into_their_file(tmp_path: Path) -> None:
    """Their code, their traceback: the CLI shows it whole, a sweep keeps its innermost frames."""
    bad = tmp_path / "bad_loss.py"
    bad.write_text(MY_LOSS.replace("return self.reduce(", "raise ArithmeticError('my bug')\n        return self.reduce("))
    with pytest.raises(ArithmeticError, match="my bug") as caught:
        main(["train", "--plugin", str(bad), "--method", "my_loss", "--out", "r", "--quiet", *QUICK])
    assert caught.traceback[-1].path == bad and caught.traceback[-1].lineno + 1 == 15
    (tmp_path / "s.yaml").write_text("methods: [my_loss]\nplugins: [bad_loss.py]\nsettings: {epochs: 1, subset: 200}\n")
    assert main(["sweep", str(tmp_path / "s.yaml"), "--quiet", "--jobs", "1"]) == 2
    from spmlkit.experiments.store import ResultsStore

    (record,) = ResultsStore(tmp_path / "results.db").records()
    assert record["error"].startswith("ArithmeticError: my bug\n")
    assert f'File "{bad}", line 15, in loss' in record["error"]


# ----------------------------------------------------------------------------- everywhere a built-in works


def test_a_plugin_loss_trains_what_it_computes(my_loss: Path, capsys) -> None:
    """With weight 1 the loss is AN term for term: the run is AN's to the last bit; at its default
    weight it is not (so the plug-in's own code trained)."""
    for name, method in (("w1", ["--plugin", str(my_loss), "--method", "my_loss", "--hparam", "weight=1"]),
                         ("w05", ["--plugin", str(my_loss), "--method", "my_loss"]), ("an", ["--method", "an"])):
        assert main(["train", *method, "--out", name, "--quiet", *QUICK]) == 0, capsys.readouterr().err
    an, w1, w05 = (_result(Path(n)) for n in ("an", "w1", "w05"))
    assert (w1["val_map"], w1["test_map"], w1["test_ap"]) == (an["val_map"], an["test_map"], an["test_ap"])
    assert w05["test_map"] != an["test_map"]
    (plugin,) = w05["plugins"]
    assert plugin == {"name": "my_loss.py", "module": "my_loss", "kind": "file", "path": str(my_loss),
                      "sha256": hashlib.sha256(MY_LOSS.encode()).hexdigest(),
                      "registered": ["loss my_loss", "method my_loss"]}
    assert an["plugins"] == [plugin]  # every plug-in of the process, whichever method it ran


def test_resume_loads_the_plugins_the_run_folder_names(my_loss: Path, tmp_path: Path, monkeypatch) -> None:
    three = ["--epochs", "3", "--subset", "300"]
    with isolated_plugins():
        assert main(["train", "--plugin", str(my_loss), "--method", "my_loss", "--out", "whole", "--quiet", *three]) == 0
    with isolated_plugins():
        assert main(["train", "--plugin", os.path.relpath(my_loss), "--method", "my_loss", "--out", "cut", "--quiet",
                     "--stop-after", "1", *three]) == 0
    saved = (Path("cut") / "config.yaml").read_text()
    assert "plugins:\n  - ../../plugin/my_loss.py\n" in saved  # relative to the run folder, as every saved path
    run = Path("cut").absolute()
    monkeypatch.chdir(tmp_path / "plugin")  # elsewhere, and without --plugin: the folder says what to load
    for stop in (["--stop-after", "1"], []):  # twice: a resumed run keeps naming its plug-ins
        with isolated_plugins():
            assert "my_loss" not in sys.modules
            assert main(["train", "--resume", "--out", str(run), "--quiet", *stop]) == 0
    assert _result(run)["test_map"] == _result(tmp_path / "cwd" / "whole")["test_map"]
    assert _result(run)["plugins"][0]["sha256"] == hashlib.sha256(MY_LOSS.encode()).hexdigest()


def test_a_fresh_process_trains_a_sweep_run_from_its_settings_alone(my_loss: Path, tmp_path: Path) -> None:
    """What a spawned worker or a Ray task gets is the run's settings, plain data naming the plug-in
    by path: a new interpreter loads it from there and records what the sweep's own process does."""
    from spmlkit.experiments.sweep import SweepSpec, expand
    from spmlkit.experiments.sweep.execute import execute_runs

    spec = SweepSpec(methods=["my_loss"], seeds=[0, 1], plugins=[str(my_loss)], settings={"epochs": 2, "subset": 300})
    runs = expand(spec)
    assert all(run["plugins"] == [str(my_loss)] for run in runs)
    payload = pickle.dumps(runs)
    assert b"my_loss.MyLoss" not in payload and b"__main__" not in payload  # nothing of the user's but its path
    code = ("import json, pickle, sys\nfrom spmlkit.experiments.sweep.execute import execute_runs\n"
            "records = execute_runs(pickle.load(sys.stdin.buffer), 'runs', 1)\n"
            "print(json.dumps([{k: r[k] for k in ('status', 'error', 'test_map', 'plugins')} for r in records]))\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, "-c", code], input=payload, capture_output=True, env=env, cwd=tmp_path,
                         timeout=300)
    assert out.returncode == 0, out.stderr.decode()[-2000:]
    fresh = json.loads(out.stdout.decode().splitlines()[-1])
    here = execute_runs(runs, "runs", 1)
    assert [r["status"] for r in fresh] == ["ok", "ok"], fresh
    assert [r["test_map"] for r in fresh] == [r["test_map"] for r in here]
    assert fresh[0]["plugins"] == here[0]["plugins"] and fresh[0]["plugins"][0]["name"] == "my_loss.py"


def test_a_run_of_changed_plugin_code_is_a_new_run_and_moving_the_file_is_not(my_loss: Path, tmp_path: Path) -> None:
    from spmlkit.experiments.sweep import SweepSpec, expand

    plain = {r["method"]: r["run_id"] for r in expand(SweepSpec(methods=["an", "em"]))}

    def ids(path: Path) -> dict[str, str]:
        with isolated_plugins():  # each version of the file in a process of its own, as two commands would be
            runs = expand(SweepSpec(methods=["an", "em", "my_loss"], plugins=[str(path)]))
            return {r["method"]: r["run_id"] for r in runs}

    first = ids(my_loss)
    moved = tmp_path / "elsewhere" / "my_loss.py"
    moved.parent.mkdir()
    moved.write_text(MY_LOSS)
    changed = tmp_path / "changed" / "my_loss.py"
    changed.parent.mkdir()
    changed.write_text(MY_LOSS.replace("weight: float = 0.5", "weight: float = 0.4"))
    assert {m: first[m] for m in ("an", "em")} == plain  # spmlkit's runs keep their ids beside a plug-in
    assert ids(moved) == first
    assert ids(changed)["my_loss"] != first["my_loss"] and {m: ids(changed)[m] for m in ("an", "em")} == plain


def test_the_report_never_averages_two_versions_of_a_plugin() -> None:
    import pandas as pd

    from spmlkit.experiments.report import select_and_aggregate

    def run(seed: int, code: str, test: float, val: float) -> dict:
        return {"dataset": "yeast", "observation": "single_positive", "method": "my_loss", "lr": 0.01,
                "batch_size": 64, "hparams": {}, "seed": seed, "status": "ok", "run_id": f"{code}{seed}",
                "plugin_code": [f"my_loss.py sha256:{code}"], "test_map": test, "val_map": val}

    df = pd.DataFrame([run(0, "old", 0.30, 0.50), run(1, "old", 0.32, 0.50), run(0, "new", 0.40, 0.60),
                       run(1, "new", 0.42, 0.62)])
    (row,) = select_and_aggregate(df).to_dict("records")
    assert (row["n_configs"], row["n_seeds"], row["run_ids"]) == (2, 2, ["new0", "new1"])
    assert row["mean"] == pytest.approx(41.0)


def _installed(site: Path, monkeypatch, module: str, source: str, package: str, version: str, entry: str) -> None:
    """An installed package ``package`` (``version``) whose module ``module`` (``source``) is offered as
    the plug-in ``entry`` of the entry-point group spmlkit.plugins: ``site`` on the Python path with
    the module and its dist-info, and the loader's cache of entry points emptied."""
    from spmlkit import plugins

    (site / module).mkdir(parents=True)
    (site / module / "__init__.py").write_text(source)
    info = site / f"{module}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {package}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text(f"[spmlkit.plugins]\n{entry} = {module}\n")
    monkeypatch.syspath_prepend(str(site))
    plugins._entry_points.cache_clear()


def test_the_environment_and_installed_packages_bring_plugins(my_loss: Path, tmp_path: Path, monkeypatch,
                                                              capsys) -> None:
    from spmlkit import plugins

    other = tmp_path / "plugin" / "other.py"
    other.write_text(MY_LOSS.replace('"my_loss"', '"other_loss"').replace("MyLoss", "Other"))
    _installed(tmp_path / "site", monkeypatch, "acme_spml", MY_LOSS.replace('"my_loss"', '"acme_loss"'), "acme-spml",
               "1.2.3", "acme")
    monkeypatch.setenv("SPMLKIT_PLUGINS", f"{my_loss}{os.pathsep}{other}")
    assert main(["methods"]) == 0
    listed = capsys.readouterr().out
    assert all(f"│ {name}" in listed for name in ("my_loss", "other_loss", "acme_loss"))
    by_name = {p.name: p for p in plugins.loaded_plugins()}
    assert by_name["acme"].fingerprint == "acme-spml==1.2.3" and by_name["acme"].kind == "entry point"
    assert by_name["other.py"].sha256 == hashlib.sha256(other.read_bytes()).hexdigest()
    # a run records them all, and keeps the environment's in its settings so --resume needs no variable
    assert main(["train", "--method", "acme_loss", "--out", "r", "--quiet", *QUICK]) == 0
    assert {p["name"] for p in _result(Path("r"))["plugins"]} == {"acme", "my_loss.py", "other.py"}
    assert (Path("r") / "config.yaml").read_text().count(".py\n") == 2


def test_loading_no_plugin_imports_nothing() -> None:
    """A command without plug-ins pays nothing for them: no spmlkit family, no torch."""
    code = ("import sys\nfrom spmlkit.plugins import load_plugins\nassert load_plugins() == []\n"
            "print(sorted(m for m in ('torch', 'spmlkit.methods', 'spmlkit.losses') if m in sys.modules))\n")
    env = {k: v for k, v in os.environ.items() if k != "SPMLKIT_PLUGINS"} | {"PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stderr


def test_a_plugin_dataset_label_algorithm_and_recipe(tmp_path: Path, capsys) -> None:
    """The three other families, registered as spmlkit registers its own: listed, trained on, and
    named in the run's plug-in code."""
    import numpy as np

    from spmlkit.data.registry import load_features
    from spmlkit.plugins import load_plugins, plugin_code

    path = tmp_path / "parts.py"
    path.write_text(
        "import numpy as np\nfrom spmlkit import labeling\nfrom spmlkit.data import TabularDataset\n"
        "from spmlkit.data.registry import register_dataset\nfrom spmlkit.labeling import APL\n"
        "from spmlkit.methods import loss_method, register\n\n"
        "@labeling.register('early_apl')\nclass EarlyAPL(APL):\n"
        "    def __init__(self, theta=0.9, warmup_epochs=2, num_epochs=10):\n"
        "        super().__init__(theta, warmup_epochs, num_epochs)\n\n"
        "register('em_early_apl', 'EM + early APL', paper='me')(loss_method('em_apl', labeling='early_apl'))\n\n"
        "@register_dataset('toy', source='generated', labels=3)\ndef toy():\n"
        "    rng = np.random.default_rng(0)\n"
        "    Y = np.eye(3, dtype=np.uint8)[rng.integers(0, 3, 120)]\n"
        "    X = (Y @ rng.normal(size=(3, 5)) + rng.normal(size=(120, 5))).astype(np.float32)\n"
        "    return TabularDataset('toy', X[:90], Y[:90], X[90:], Y[90:], ('a', 'b', 'c'))\n")
    (plugin,) = load_plugins([str(path)])
    assert plugin.record()["registered"] == ["labeling algorithm early_apl", "method em_early_apl", "dataset toy"]
    assert load_features("toy").X_train.shape == (90, 5)
    assert plugin_code("em_early_apl", "yeast") == plugin_code("an", "toy") == [f"parts.py {plugin.fingerprint}"]
    assert plugin_code("em_apl", "yeast") == []
    assert main(["datasets"]) == 0 and "toy " in capsys.readouterr().out
    assert main(["train", "--dataset", "toy", "--method", "em_early_apl", "--epochs", "3", "--out", "t", "--quiet"]) == 0
    history = json.loads((Path("t") / "metrics.json").read_text())
    assert [epoch["pseudo_negatives"] > 0 for epoch in history] == [False, True, True]  # after epoch 2, not 5
    assert np.isfinite(_result(Path("t"))["test_map"])


def test_the_estimator_loads_its_plugins_in_fit_and_a_clone_keeps_them(my_loss: Path) -> None:
    import numpy as np
    from sklearn.base import clone

    from spmlkit.estimator import SPMLClassifier

    clf = clone(SPMLClassifier(method="my_loss", plugins=(str(my_loss),), epochs=2, hparams={"weight": 1.0}))
    assert clf.get_params()["plugins"] == (str(my_loss),)
    rng = np.random.default_rng(0)
    Y = np.eye(4, dtype=np.int8)[rng.integers(0, 4, 200)]
    X = (Y @ rng.normal(size=(4, 6)) + rng.normal(size=(200, 6))).astype(np.float32)
    fitted = clf.fit(X, Y)
    same_as_an = SPMLClassifier(method="an", epochs=2).fit(X, Y)
    assert np.array_equal(fitted.predict_proba(X), same_as_an.predict_proba(X))  # weight 1 is AN


def test_report_says_when_a_methods_runs_come_from_two_versions_of_its_code(tmp_path: Path, capsys) -> None:
    from spmlkit.experiments.store import ResultsStore

    store = ResultsStore(tmp_path / "r.db")
    for i, (code, seed) in enumerate([("old", 0), ("new", 0), ("new", 1)]):
        store.add({"run_id": f"r{i}", "status": "ok", "dataset": "yeast", "method": "my_loss", "seed": seed,
                   "observation": "single_positive", "lr": 0.01, "batch_size": 64, "hparams": {},
                   "plugin_code": [f"my_loss.py sha256:{code}"], "val_map": 0.4 + i / 100, "test_map": 0.4})
    store.add({"run_id": "a0", "status": "ok", "dataset": "yeast", "method": "an", "seed": 0,
               "observation": "single_positive", "lr": 0.01, "batch_size": 64, "hparams": {}, "val_map": 0.4,
               "test_map": 0.39})
    assert main(["report", "--store", str(tmp_path / "r.db"), "--out", "rep", "--no-figures"]) == 0
    notes = [line for line in capsys.readouterr().out.splitlines() if line.startswith("note:")]
    assert notes == ["note: the store holds runs of 2 versions of the code of method my_loss (its plug-in changed "
                     "between them); each is a configuration of its own, and the table shows the one selected on "
                     'validation (docs/plugins.md, "What a record says")']


def test_a_broken_installed_plugin_is_one_line_naming_its_package(tmp_path: Path, monkeypatch, capsys) -> None:
    _broken_installed_plugin(tmp_path, monkeypatch)
    assert main(["datasets"]) == 2
    assert capsys.readouterr().err == (
        "spmlkit datasets: error: plug-in entry point 'broken' of the installed package broken-spml raised "
        "ModuleNotFoundError while it was imported: No module named 'nothing_by_this_name' (__init__.py, line 1); "
        "fix or uninstall that package (--debug shows the traceback)\n")


# ----------------------------------------------------------------------------- exits that lie

STOPPING = {
    "exit 0": ("import sys\nsys.exit(0)\n", "plug-in {f} called sys.exit(0) while it was imported (bad.py, line 2); "),
    "exit 3": ("import sys\nprint('bye', file=sys.stderr)\nsys.exit(3)\n",
               "plug-in {f} called sys.exit(3) while it was imported (bad.py, line 3), after writing \"bye\"; "),
    "argparse script": ("import argparse\nparser = argparse.ArgumentParser()\n"
                        "parser.add_argument('--data', required=True)\nargs = parser.parse_args()\n",
                        "plug-in {f} called sys.exit(2) while it was imported (bad.py, line 4), after writing "
                        "\"bad.py: error: the following arguments are required: --data\"; "),
    "interrupt": ("x = 1\nraise KeyboardInterrupt\n",
                  "plug-in {f} was interrupted while it was imported (bad.py, line 2); nothing ran: run the command "
                  "again (and keep long work out of a plug-in's import)\n"),
}


@pytest.mark.parametrize("case", sorted(STOPPING))
def test_a_plugin_that_exits_or_is_interrupted_while_imported_is_one_line_naming_it(case: str, tmp_path: Path,
                                                                                     capsys) -> None:
    """sys.exit(0) used to end `spmlkit train` with status 0 and nothing trained, sys.exit(3) with 3
    and no word, a script's argparse blamed spmlkit's own options, Ctrl-C said "interrupted" alone."""
    source, start = STOPPING[case]
    bad = tmp_path / "bad.py"
    bad.write_text(source)
    assert main(["train", "--plugin", str(bad), "--out", "r", *QUICK]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith(f"spmlkit train: error: {start.format(f=bad)}") and captured.out == ""
    assert len(captured.err.splitlines()) == 1  # the script's usage and error line are not printed beside it
    assert "unrecognized arguments" not in captured.err and not Path("r").exists()
    if case != "interrupt":
        assert captured.err.rstrip().endswith('under `if __name__ == "__main__":`, or fix it (--debug shows the '
                                              "traceback)")
    assert "bad" not in sys.modules and sys.argv[1:2] != [str(bad)]  # the command line is spmlkit's again


def test_the_loader_itself_turns_an_exit_into_its_line(tmp_path: Path) -> None:
    """The loader itself says it, so a process that is not the command line (the estimator, a sweep's
    runs) gets the same line instead of ending."""
    from spmlkit.plugins import load_plugins

    bad = tmp_path / "quits.py"
    bad.write_text("raise SystemExit('no GPU here')\n")
    with pytest.raises(ValueError, match=r"plug-in .*quits\.py called sys\.exit\('no GPU here'\) while it was "
                                         r"imported \(quits\.py, line 1\)"):
        load_plugins([str(bad)])


def test_what_a_plugin_writes_at_import_still_reaches_stderr(tmp_path: Path, capsys) -> None:
    """Held while it is imported, written after: a plug-in that prints (or keeps a handler on
    stderr) says what it says, once."""
    from spmlkit.plugins import load_plugins

    talks = tmp_path / "talks.py"
    talks.write_text(MY_LOSS + "\nimport logging, sys\nprint('my_loss loaded', file=sys.stderr)\n"
                     "handler = logging.StreamHandler()\n")
    load_plugins([str(talks)])
    import talks as module

    module.handler.stream.write("later\n")
    assert capsys.readouterr().err == "my_loss loaded\nlater\n"


@pytest.mark.parametrize("ref", ["os", "json", "helpers.py"])
def test_a_reference_that_registers_nothing_is_refused_and_not_recorded(ref: str, tmp_path: Path, capsys) -> None:
    """`--plugin os` was recorded as a plug-in (its SHA-256 in every result): a module that registers
    nothing is no plug-in, and saying so catches a wrong name (`json` for `json_loss.py`)."""
    from spmlkit.plugins import loaded_plugins

    Path("helpers.py").write_text("def helper():\n    return 1\n")
    assert main(["train", "--plugin", ref, "--out", "r", *QUICK]) == 2
    err = capsys.readouterr().err
    module = ref.removesuffix(".py")
    assert err.startswith(f"spmlkit train: error: plug-in {ref} registers nothing: importing {module} (")
    assert err.endswith("added no loss, method, label algorithm, data set or run logger; give the file or module of yours "
                        "that registers them (docs/plugins.md)\n") and len(err.splitlines()) == 1
    assert all(p.module != module for p in loaded_plugins()) and not Path("r").exists()
    assert "helpers" not in sys.modules  # a file imported only to find that out is taken back out


def test_a_plugin_that_registers_only_a_run_logger_is_a_plugin(tmp_path: Path, monkeypatch) -> None:
    from spmlkit.plugins import load_plugins
    from spmlkit.training import loggers

    monkeypatch.setattr(loggers, "_REGISTRY", dict(loggers._REGISTRY))  # the test's logger is the test's
    path = tmp_path / "my_logger.py"
    path.write_text("from spmlkit.training.loggers import register_logger\n"
                    "class Quiet:\n    def log_config(self, config): pass\n"
                    "    def log_metrics(self, metrics, step): pass\n    def close(self): pass\n"
                    "register_logger('quiet_for_test', lambda run_dir: Quiet())\n")
    (plugin,) = load_plugins([str(path)])
    assert plugin.name == "my_logger.py" and "quiet_for_test" in loggers.users_loggers()


def test_a_package_whose_submodule_registers_is_a_plugin(tmp_path: Path, monkeypatch) -> None:
    """Names registered by a module the plug-in imports count as the plug-in's: a package whose
    ``__init__`` imports its losses, imported by the user's code first or not."""
    from spmlkit.plugins import load_plugins

    package = tmp_path / "site" / "acme_pkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("from . import losses\n")
    (package / "losses.py").write_text(MY_LOSS.replace('"my_loss"', '"acme_pkg_loss"'))
    monkeypatch.syspath_prepend(str(package.parent))
    for _ in range(2):  # the second time as a module the process has already imported
        with isolated_plugins():
            import acme_pkg  # noqa: F401

            (plugin,) = load_plugins(["acme_pkg"])
            assert plugin.module == "acme_pkg"
    with isolated_plugins():
        sys.modules.pop("acme_pkg", None), sys.modules.pop("acme_pkg.losses", None)
        assert [p.module for p in load_plugins(["acme_pkg"])] == ["acme_pkg"]


def _broken_installed_plugin(tmp_path: Path, monkeypatch) -> None:
    from spmlkit import plugins

    site = tmp_path / "site"
    (site / "broken_spml").mkdir(parents=True)
    (site / "broken_spml" / "__init__.py").write_text("import nothing_by_this_name\n")
    info = site / "broken_spml-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-spml\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[spmlkit.plugins]\nbroken = broken_spml\n")
    monkeypatch.syspath_prepend(str(site))
    plugins._entry_points.cache_clear()


def test_a_broken_installed_plugin_does_not_block_report(tmp_path: Path, monkeypatch, capsys) -> None:
    """`report` reads numbers from a store and needs no plug-in: a broken installed entry point (or a
    broken file in SPMLKIT_PLUGINS) is one warning, and the report is written."""
    from spmlkit.experiments.store import ResultsStore

    store = ResultsStore(tmp_path / "r.db")
    for seed in (0, 1):
        store.add({"run_id": f"a{seed}", "status": "ok", "dataset": "yeast", "method": "an", "seed": seed,
                   "observation": "single_positive", "lr": 0.01, "batch_size": 64, "hparams": {}, "val_map": 0.4,
                   "test_map": 0.39 + seed / 100})
    _broken_installed_plugin(tmp_path, monkeypatch)
    (tmp_path / "gone.py").write_text("import sys\nsys.exit(0)\n")
    monkeypatch.setenv("SPMLKIT_PLUGINS", str(tmp_path / "gone.py"))
    assert main(["report", "--store", str(tmp_path / "r.db"), "--out", "rep", "--no-figures"]) == 0
    warnings = capsys.readouterr().err.splitlines()
    assert warnings == [
        "spmlkit report: warning: plug-in entry point 'broken' of the installed package broken-spml raised "
        "ModuleNotFoundError while it was imported: No module named 'nothing_by_this_name' (__init__.py, line 1); "
        "fix or uninstall that package (--debug shows the traceback); going on without it (this command needs no "
        "plug-in)",
        f"spmlkit report: warning: plug-in SPMLKIT_PLUGINS entry '{tmp_path / 'gone.py'}' called sys.exit(0) while it "
        "was imported (gone.py, line 2); a plug-in only registers its names when imported: put a script's own work "
        "(its argument parsing, its training) under `if __name__ == \"__main__\":`, or fix it (--debug shows the "
        "traceback); going on without it (this command needs no plug-in)"]
    assert "39.50 ± 0.50" in (Path("rep") / "table.md").read_text()
    # a plug-in the report is asked for by name is still loaded or refused
    assert main(["report", "--store", str(tmp_path / "r.db"), "--out", "rep", "--no-figures", "--plugin",
                 str(tmp_path / "gone.py")]) == 2


def test_resume_refuses_a_plugin_edited_since_the_runs_first_epochs(my_loss: Path, capsys) -> None:
    """Edited between `--stop-after 1` and `--resume`, the run trained epoch 1 on the old code and
    epochs 2-3 on the new, and result.json named the new file alone. Refused in one line naming
    the file; the old file back resumes, `--overwrite` without `--resume` starts afresh on the new."""
    three = ["--epochs", "3", "--subset", "300", "--quiet"]
    run = ["train", "--plugin", str(my_loss), "--method", "my_loss", "--out", "cut", *three]
    with isolated_plugins():
        assert main([*run, "--stop-after", "1"]) == 0
    old = my_loss.read_text()
    old_sha, before = hashlib.sha256(old.encode()).hexdigest(), (Path("cut") / "last.pt").read_bytes()
    my_loss.write_text(old.replace("weight: float = 0.5", "weight: float = 0.4"))
    new_sha = hashlib.sha256(my_loss.read_bytes()).hexdigest()
    capsys.readouterr()
    with isolated_plugins():
        assert main(["train", "--resume", "--out", "cut", "--quiet"]) == 2
    assert capsys.readouterr().err == (
        f"spmlkit train: error: --resume: the plug-in code of the run in cut changed since its first 1 epoch trained "
        f"(my_loss.py ({my_loss}): sha256:{old_sha} then, sha256:{new_sha} now); resuming would train the rest on "
        "other code than the first epochs: put the code it started with back to resume, or start the run afresh on "
        "the new code (the same command without --resume, with --overwrite)\n")
    assert (Path("cut") / "last.pt").read_bytes() == before and not (Path("cut") / "result.json").exists()
    with isolated_plugins():  # the user's choice: the new code, from the first epoch
        assert main([*run, "--overwrite"]) == 0
    assert [p["sha256"] for p in _result(Path("cut"))["plugins"]] == [new_sha]
    assert len(json.loads((Path("cut") / "metrics.json").read_text())) == 3
    with isolated_plugins():  # or the code it started with, put back: it resumes
        assert main([*run, "--overwrite", "--stop-after", "1"]) == 0
    my_loss.write_text(old.replace("weight: float = 0.5", "weight: float = 0.3"))
    with isolated_plugins():
        assert main(["train", "--resume", "--out", "cut", "--quiet"]) == 2
    my_loss.write_text(old.replace("weight: float = 0.5", "weight: float = 0.4"))
    with isolated_plugins():
        assert main(["train", "--resume", "--out", "cut", "--quiet"]) == 0
    assert _result(Path("cut"))["plugins"][0]["sha256"] == new_sha


#: a method whose name climbs out of the run folder ``runs/<dataset>/<method>/seed<seed>``: from the test's
#: working folder, three levels up is the test's own folder
ESCAPING = ("from spmlkit.methods import loss_method, register\n"
            "register({name!r}, 'AN, elsewhere', paper='nobody')(loss_method('an'))\n")


def test_a_method_named_as_a_path_is_refused_at_registration_and_writes_nothing(tmp_path: Path, capsys) -> None:
    name = "../../../elsewhere/x"
    plugin = tmp_path / "escape.py"
    plugin.write_text(ESCAPING.format(name=name))
    assert main(["train", "--plugin", str(plugin), "--method", name, *QUICK, "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err == (f"spmlkit train: error: plug-in {plugin}: method name {name!r} is not a safe name: 1 to 64 of the "
                   "characters A-Z a-z 0-9 _ - ., starting with a letter, a digit or _, without '..' (names become file "
                   "and folder names); register it under such a name (escape.py, line 2)\n")
    assert not (tmp_path / "elsewhere").exists() and not Path("runs").exists()


@pytest.mark.parametrize("family, name, ok", [
    ("method", "x/y", False), ("method", ".hidden", False), ("method", "-rf", False), ("method", "a..b", False),
    ("method", "", False), ("method", "a" * 65, False), ("method", "my-method.v2_1", True), ("loss", "a b", False),
    ("labeling algorithm", "\u00e9t\u00e9", False), ("dataset", "acme/set1", True), ("dataset", "../set1", False),
    ("dataset", "a/b/c", False), ("dataset", "/set1", False), ("dataset", "acme/", False)])
def test_the_safe_name_rule(family: str, name: str, ok: bool) -> None:
    from spmlkit.names import BadName, check_name

    if ok:
        assert check_name(name, family, namespaced=family == "dataset") == name
    else:
        with pytest.raises(BadName, match=f"{family} name .* is not a safe name"):
            check_name(name, family, namespaced=family == "dataset")


def test_every_built_in_name_is_a_safe_name_and_a_plugin_dataset_is_checked_too(tmp_path: Path, capsys) -> None:
    from spmlkit.names import BUILTIN, REGISTRY, check_name

    for family in REGISTRY.families():
        names = [n for n in family if family.origin(n) == BUILTIN]
        assert names and all(check_name(n, family.what, namespaced=family.namespaced) == n for n in names)
    assert "mulan/emotions" in REGISTRY.dataset
    plugin = tmp_path / "sets.py"
    plugin.write_text("from spmlkit.data.registry import register_dataset\n"
                      "@register_dataset('..', source='nowhere')\ndef load():\n    pass\n")
    assert main(["datasets", "--plugin", str(plugin)]) == 2
    assert "dataset name '..' is not a safe name" in capsys.readouterr().err


def test_an_installed_plugins_methods_join_a_default_benchmark_only_when_asked(my_loss: Path, tmp_path: Path,
                                                                                monkeypatch, capsys) -> None:
    """An installed package's plug-in is loaded by every command; its loss joined every benchmark that
    named no methods. Default lists are spmlkit's methods and those of the plug-ins named for the
    command (--plugin, a config file, $SPMLKIT_PLUGINS); installed ones join with --with-plugins."""
    from spmlkit.cli import build_parser
    from spmlkit.cli.experiments import _benchmark_specs
    from spmlkit.experiments.benchmark import BenchmarkSpec, default_methods
    from spmlkit.methods import METHODS
    from spmlkit.names import BUILTIN

    monkeypatch.delenv("SPMLKIT_PLUGINS", raising=False)
    _installed(tmp_path / "site", monkeypatch, "acme_spml", MY_LOSS.replace('"my_loss"', '"acme_loss"'), "acme-spml",
               "1.2.3", "acme")

    builtin = tuple(m for m in METHODS if METHODS.origin(m) == BUILTIN and METHODS[m].on_features.trains)
    assert BenchmarkSpec(dataset="yeast").methods == builtin  # the entry point is loaded, not added
    assert "acme_loss" in METHODS and "acme_loss" not in default_methods(["yeast"])
    assert default_methods(["yeast"], installed=True) == (*builtin, "acme_loss")
    assert BenchmarkSpec(dataset="yeast", plugins=(str(my_loss),)).methods == (*builtin, "my_loss")

    def specs(*argv: str) -> tuple[str, ...]:
        args = build_parser().parse_args(["benchmark", *argv])
        return _benchmark_specs(args)[0][0].methods

    assert specs() == builtin
    assert specs("--with-plugins") == (*builtin, "acme_loss")
    assert specs("--plugin", str(my_loss)) == (*builtin, "my_loss")
    assert specs("--methods", "an,acme_loss") == ("an", "acme_loss")  # named: it runs
    monkeypatch.setenv("SPMLKIT_PLUGINS", str(my_loss))  # the environment names it for every command
    assert specs() == (*builtin, "my_loss")
    assert main(["benchmark", "--with-plugins", "--methods", "an", "--out", str(tmp_path / "o"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--with-plugins adds the installed plug-ins' methods to the default list" in err
    assert not (tmp_path / "o").exists()


def test_predict_of_a_plugin_run_on_features_says_it_scores_images_only(my_loss: Path, tmp_path: Path,
                                                                        capsys) -> None:
    """docs/plugins.md listed `predict` among the commands a plug-in run works with; its example runs are
    on Yeast's features, which `predict` does not score: refused in one line with where to score them."""
    assert main(["train", "--plugin", str(my_loss), "--method", "my_loss", "--out", "r", "--quiet", *QUICK]) == 0
    (tmp_path / "a.jpg").write_bytes(b"")
    capsys.readouterr()
    assert main(["predict", "--checkpoint", "r", "--images", str(tmp_path / "a.jpg"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is a run on features, not images: `spmlkit predict` scores image files" in err
    assert "SPMLClassifier" in err and "spmlkit export" in err
    doc = " ".join((Path(__file__).parents[1] / "docs" / "plugins.md").read_text().split())
    assert "`predict` scores image files only; a run on features" in doc
