"""`spmlkit presets`, `spmlkit methods`, `spmlkit losses`: what a user reads before choosing a run.

The tables are read back cell by cell (rich draws them with ``│`` between cells; a cell too long
for its column continues on the next line, whose first cell is empty)."""

from spmlkit import losses
from spmlkit.cli import main
from spmlkit.experiments.presets import PRESETS
from spmlkit.methods import METHODS


def _rows(text: str) -> list[list[str]]:
    """The first line of every table row, as its cells."""
    cells = [[c.strip() for c in line.split("│")[1:-1]] for line in text.splitlines() if line.startswith("│")]
    return [row for row in cells if row[0]]


def test_presets_lists_each_preset_of_a_dataset_with_its_published_target(capsys):
    assert main(["presets", "--dataset", "voc2012"]) == 0
    rows = {row[0]: row for row in _rows(capsys.readouterr().out)}
    assert set(rows) == {name for name, preset in PRESETS.items() if preset.dataset == "voc2012"}
    # preset | target (published) | source | batch | lr | epochs | hyperparameters: EM Table 1's rows
    # on EM's protocol for VOC (batch 8, lr 1e-5, 10 epochs)
    assert rows["em/voc2012"][1:7] == ["89.09 ± 0.17", "EM", "8", "1e-05", "10", "alpha=0.2"]
    assert rows["bce/voc2012"][1:3] == ["89.42 ± 0.27", "EM"]
    assert rows["gr/voc2012"][1:3] == ["89.83 ± 0.12", "GR"]  # GR Table 2
    assert rows["epr/voc2012"][1:3] == ["85.23 ± 0.44", "CRISP"]  # CRISP Table 1: EPR's only published number


def test_presets_of_a_data_set_without_any_say_so_instead_of_an_empty_table(capsys):
    assert main(["presets", "--dataset", "emotions"]) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert "│" not in said and said.startswith(
        "no preset is tuned on emotions: its runs use the data set's defaults and each method's recipe defaults")
    assert said.endswith("Presets exist for: coco2014, cub, nuswide, voc2012, yeast, voc2007, cal500, corel5k, delicious, "
                          "scene, tmc2007")
    assert main(["presets", "--dataset", "yaest"]) == 0
    assert "no preset is tuned on yaest (did you mean yeast?)" in " ".join(capsys.readouterr().out.split())


def test_methods_lists_every_recipe_in_order(capsys):
    assert main(["methods"]) == 0
    rows = _rows(capsys.readouterr().out)
    assert [row[0] for row in rows] == list(METHODS)
    # method | loss | labels | label-state algorithm | ... | on features (the first line of its cell)
    assert {row[0]: row[1:4] for row in rows}["em_apl"] == ["em_apl", "observed", "apl"]
    assert {row[0]: row[1:4] for row in rows}["bce"] == ["bce", "full", ""]
    assert {row[0]: row[1:4] for row in rows}["boostlu_ll_cp"] == ["ll_cp", "observed", ""]
    assert {row[0]: row[-1] for row in rows}["em_apl"] == "yes"
    assert {row[0]: row[-1] for row in rows}["boostlu_ll_cp"].startswith("no: BoostLU boosts class")


def test_losses_lists_every_loss_with_its_defaults(capsys):
    assert main(["losses"]) == 0
    rows = _rows(capsys.readouterr().out)
    assert [row[0] for row in rows] == list(losses.available())
    assert {row[0]: row[1] for row in rows}["an_ls"] == "ls_coef=0.1"
