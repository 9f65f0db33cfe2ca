"""Run logging beyond metrics.csv: the logger interface, TensorBoard, plug-ins by name or entry point."""

import importlib.machinery
import importlib.metadata
import json
import sys
import types

import pytest

from spmlkit.cli import main
from spmlkit.experiments.presets import resolve_config
from spmlkit.training import loggers, train

pytestmark = pytest.mark.usefixtures("one_thread")

YEAST = {"dataset": "yeast", "method": "an", "subset": 200, "epochs": 3, "lr": 0.01}


class Recorder(loggers.RunLogger):
    """A user's logger: keeps every call, so a test can see what the trainer sent."""

    instances: list["Recorder"] = []

    def __init__(self, run_dir):
        self.run_dir, self.configs, self.records, self.closed = run_dir, [], [], 0
        Recorder.instances.append(self)

    def log_config(self, config):
        self.configs.append(config)

    def log_metrics(self, record, step):
        self.records.append((step, record))

    def close(self):
        self.closed += 1


def make_recorder(run_dir):
    """The entry-point form: a module-level factory a package would name."""
    return Recorder(run_dir)


@pytest.fixture
def registry(monkeypatch):
    """Registrations made by a test end with it."""
    monkeypatch.setattr(loggers, "_REGISTRY", dict(loggers._REGISTRY))
    monkeypatch.setattr(loggers, "_NEEDS", dict(loggers._NEEDS))
    Recorder.instances = []
    return loggers


def test_tensorboard_receives_every_epoch_of_metrics_json(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run = tmp_path / "run"
    res = train(resolve_config({**YEAST, "out": str(run), "loggers": ["tensorboard"]}))
    history = json.loads((run / "metrics.json").read_text())
    assert len(history) == 3 == len(res.history)
    events = EventAccumulator(str(run / "tensorboard"))
    events.Reload()
    scalars = events.Scalars("val_map")
    assert [s.step for s in scalars] == [1, 2, 3]
    assert [s.value for s in scalars] == pytest.approx([h["val_map"] for h in history], rel=1e-6)
    assert [s.value for s in events.Scalars("train_loss")] == pytest.approx([h["train_loss"] for h in history],
                                                                           rel=1e-6)
    assert "config/text_summary" in events.Tags()["tensors"]  # the resolved config, as text


def test_tensorboard_through_the_command_line(tmp_path):
    pytest.importorskip("tensorboard")
    run = tmp_path / "run"
    assert main(["train", "--dataset", "yeast", "--subset", "200", "--epochs", "2", "--logger", "tensorboard",
                 "--out", str(run), "--quiet"]) == 0
    assert "tensorboard" in (run / "config.yaml").read_text()
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    history = json.loads((run / "metrics.json").read_text())
    events = EventAccumulator(str(run / "tensorboard"))
    events.Reload()
    assert [(s.step, s.value) for s in events.Scalars("val_map")] == [
        (h["epoch"], pytest.approx(h["val_map"], rel=1e-6)) for h in history]


def test_a_logger_registered_by_name_receives_every_epoch(tmp_path, registry):
    registry.register_logger("recorder", Recorder)
    run = tmp_path / "run"
    train(resolve_config({**YEAST, "out": str(run), "loggers": ["recorder"]}))
    (logger,) = Recorder.instances
    history = json.loads((run / "metrics.json").read_text())
    assert logger.run_dir == run
    assert [step for step, _ in logger.records] == [1, 2, 3]
    assert json.dumps([record for _, record in logger.records]) == json.dumps(history)  # NaN included
    assert len(logger.configs) == 1 and logger.configs[0]["output"]["loggers"] == ["recorder"]
    assert logger.closed == 1


def test_a_resumed_run_logs_the_epochs_it_trains_and_may_add_a_logger(tmp_path, registry):
    registry.register_logger("recorder", Recorder)
    config = resolve_config({**YEAST, "epochs": 4, "out": str(tmp_path / "run")})
    train(config, stop_after=2)
    config.output.loggers = ["recorder"]  # loggers do not change the numbers: resuming with one is allowed
    train(config, resume=True)
    (logger,) = Recorder.instances
    assert [step for step, _ in logger.records] == [3, 4] and logger.closed == 1


def test_a_logger_is_closed_when_the_run_stops_early(tmp_path, registry):
    registry.register_logger("recorder", Recorder)
    train(resolve_config({**YEAST, "out": str(tmp_path / "run"), "loggers": ["recorder"]}), stop_after=1)
    (logger,) = Recorder.instances
    assert [step for step, _ in logger.records] == [1] and logger.closed == 1


def test_a_logger_from_an_entry_point(tmp_path, registry, monkeypatch):
    point = importlib.metadata.EntryPoint(name="from-a-package", value=f"{__name__}:make_recorder",
                                          group=loggers.ENTRY_POINT_GROUP)
    real = importlib.metadata.entry_points
    monkeypatch.setattr(importlib.metadata, "entry_points",
                        lambda **kw: [point] if kw.get("group") == loggers.ENTRY_POINT_GROUP else real(**kw))
    assert "from-a-package" in registry.available_loggers()
    train(resolve_config({**YEAST, "epochs": 2, "loggers": ["from-a-package"], "out": str(tmp_path / "run")}))
    assert [step for step, _ in Recorder.instances[-1].records] == [1, 2]


def test_an_unknown_logger_is_one_line_before_any_work(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", "--dataset", "yeast", "--epochs", "2", "--logger", "tensorbord", "--out", str(run)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "unknown logger 'tensorbord'" in err and "tensorboard" in err
    assert "register_logger" in err
    assert not run.exists()


def test_a_missing_logger_package_is_one_line_with_the_pip_command(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "mlflow", None)  # as if not installed, whether it is or not
    run = tmp_path / "run"
    assert main(["train", "--dataset", "yeast", "--epochs", "2", "--logger", "mlflow", "--out", str(run)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "pip install mlflow" in err
    assert not run.exists()


def test_the_mlflow_and_wandb_adapters(tmp_path, monkeypatch):
    calls = []
    mlflow = types.ModuleType("mlflow")
    mlflow.__spec__ = importlib.machinery.ModuleSpec("mlflow", None)
    mlflow.active_run = lambda: None
    mlflow.start_run = lambda **kw: calls.append(("mlflow.start_run", kw))
    mlflow.log_params = lambda params: calls.append(("mlflow.log_params", params))
    mlflow.log_metrics = lambda metrics, step: calls.append(("mlflow.log_metrics", step, metrics))
    mlflow.end_run = lambda: calls.append(("mlflow.end_run",))

    class Run:
        config = types.SimpleNamespace(update=lambda cfg, allow_val_change: calls.append(("wandb.config", cfg)))

        def log(self, metrics, step):
            calls.append(("wandb.log", step, metrics))

        def finish(self):
            calls.append(("wandb.finish",))

    wandb = types.ModuleType("wandb")
    wandb.__spec__ = importlib.machinery.ModuleSpec("wandb", None)
    wandb.init = lambda **kw: calls.append(("wandb.init", kw)) or Run()
    monkeypatch.setitem(sys.modules, "mlflow", mlflow)
    monkeypatch.setitem(sys.modules, "wandb", wandb)

    run = tmp_path / "run"
    train(resolve_config({**YEAST, "epochs": 2, "hparams": {"ls_coef": 0.1}, "method": "an_ls", "out": str(run),
                          "loggers": ["mlflow", "wandb"]}))
    history = json.loads((run / "metrics.json").read_text())
    kinds = [c[0] for c in calls]
    assert kinds[0] == "mlflow.start_run" and kinds[-2:] == ["mlflow.end_run", "wandb.finish"]
    params = next(c[1] for c in calls if c[0] == "mlflow.log_params")
    assert params["method.name"] == "an_ls" and params["method.hparams.ls_coef"] == "0.1"
    assert params["optimisation.lr"] == "0.01"
    logged = [(c[1], c[2]) for c in calls if c[0] == "mlflow.log_metrics"]
    assert [step for step, _ in logged] == [1, 2]
    assert [m["val_map"] for _, m in logged] == [h["val_map"] for h in history]
    assert [c[1] for c in calls if c[0] == "wandb.log"] == [1, 2]
    assert next(c[1] for c in calls if c[0] == "wandb.init")["dir"] == str(run)


def test_registering_a_name_twice_needs_replace(registry):
    registry.register_logger("recorder", Recorder)
    with pytest.raises(ValueError, match="already registered.*replace=True"):
        registry.register_logger("recorder", make_recorder)
    registry.register_logger("recorder", make_recorder, replace=True)
    with pytest.raises(ValueError, match="loggers must be a list of logger names"):
        registry.check_loggers("tensorboard")
    with pytest.raises(ValueError, match="given more than once"):
        registry.check_loggers(["recorder", "recorder"])
