"""Users' own data that reads as something it is not: links out of the image folder, label values as names.

Each case is read with ``read_folder`` / ``read_csv_labels`` (nothing written) and asserted on the
exact problem or warning, then through ``spmlkit prepare`` for the one-line refusal.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_user_data_folder import write_image

from spmlkit.cli import main
from spmlkit.data.formats import read_csv_labels, read_folder


def _labels(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


# ------------------------------------------------------------------ links out of the image folder


def test_a_link_in_a_label_folder_to_a_file_outside_the_tree_is_a_problem(tmp_path, capsys):
    photos = tmp_path / "photos"
    write_image(photos / "cat" / "c.png", {"cat"}, 0)
    write_image(photos / "dog" / "d.png", {"dog"}, 1)
    elsewhere = write_image(tmp_path / "elsewhere" / "secret.png", {"dog"}, 2)
    (photos / "dog" / "link.png").symlink_to(elsewhere)
    (photos / "cat" / "inside.png").symlink_to(photos / "cat" / "c.png")   # a link within the tree is fine
    data = read_folder(photos)
    assert data.problems == [f"{photos / 'dog' / 'link.png'}: a link to {elsewhere}, outside the training folder "
                             f"{photos}; copy the image into the folder, or remove the link"]
    out = tmp_path / "out"
    assert main(["prepare", "folder", "--root", str(photos), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and f"a link to {elsewhere}, outside the training folder" in err and not out.exists()


def test_a_label_folder_that_links_out_of_the_tree_is_named_per_image(tmp_path):
    photos = tmp_path / "photos"
    write_image(photos / "cat" / "c.png", {"cat"}, 0)
    write_image(tmp_path / "other" / "a.png", {"dog"}, 1)
    (photos / "dog").symlink_to(tmp_path / "other", target_is_directory=True)
    data = read_folder(photos)
    assert data.problems == [f"{photos / 'dog' / 'a.png'}: a link to {tmp_path / 'other' / 'a.png'}, outside the "
                             f"training folder {photos}; copy the image into the folder, or remove the link"]


def test_a_labels_file_row_whose_image_links_outside_the_images_folder(tmp_path):
    pictures = tmp_path / "pictures"
    write_image(pictures / "a.png", {"cat"}, 0)
    elsewhere = write_image(tmp_path / "private" / "b.png", {"dog"}, 1)
    (pictures / "b.png").symlink_to(elsewhere)
    labels = _labels(tmp_path / "labels.csv", ["image,positives", "a.png,cat", "b.png,dog"])
    data = read_csv_labels(labels, pictures)
    assert data.problems == [f"{labels} row 3: image 'b.png' is a link to {elsewhere}, outside the images folder "
                             f"{pictures}; copy the image into that folder, or pass a folder that holds it"]


# ------------------------------------------------------------------ 0 / 1 / -1 as label names


def test_a_positives_column_of_zeros_and_ones_is_refused(tmp_path, capsys):
    pictures = tmp_path / "pictures"
    for i in range(3):
        write_image(pictures / f"{i}.png", {"cat"}, i)
    labels = _labels(tmp_path / "labels.csv", ["image,positives", "0.png,1", "1.png,0", "2.png,-1;1"])
    data = read_csv_labels(labels, pictures)
    assert data.problems == [f"{labels}: the positives column holds only '-1', '0', '1': label values, not label "
                             "names; write the names of the labels observed for each image (e.g. cat;dog), or list "
                             "the classes in a --classes file if these are really their names"]
    assert main(["prepare", "csv", "--labels", str(labels), "--images", str(pictures),
                 "--out", str(tmp_path / "out")]) == 2
    assert "label values, not label names" in capsys.readouterr().err
    classes = _labels(tmp_path / "classes.txt", ["-1", "0", "1"])
    assert read_csv_labels(labels, pictures, classes=classes).problems == []   # named on purpose: accepted


def test_a_value_beside_real_names_is_a_warning(tmp_path):
    pictures = tmp_path / "pictures"
    for i in range(3):
        write_image(pictures / f"{i}.png", {"cat"}, i)
    labels = _labels(tmp_path / "labels.csv", ["image,positives", "0.png,cat", "1.png,dog;1", "2.png,dog"])
    data = read_csv_labels(labels, pictures)
    assert data.problems == [] and data.class_names == ["1", "cat", "dog"]
    assert f"{labels}: the positives column names '1' beside real label names (rows 3); they look like label " \
           "values and became classes of their own: write label names there, or list the classes in a --classes " \
           "file" in data.warnings


@pytest.mark.parametrize("names", [["3", "7"], ["10"]])
def test_other_numbers_are_names(tmp_path, names):
    """Digits are class names often enough (MNIST-like data): only 0, 1 and -1 read as values."""
    pictures = tmp_path / "pictures"
    write_image(pictures / "a.png", {"cat"}, 0)
    labels = _labels(tmp_path / "labels.csv", ["image,positives", f"a.png,{';'.join(names)}"])
    data = read_csv_labels(labels, pictures)
    assert data.problems == [] and not any("label values" in w for w in data.warnings)
