"""Metadata parsing shared by the datasets: a damaged number field names file, line and value."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from scipy.io import loadmat, savemat

from datamodules._files import read_rows
from datamodules.cars196 import cars196_splits
from datamodules.cub200 import INFO as CUB
from datamodules.cub200 import cub200_splits
from datamodules.msmt17 import msmt17_splits
from datamodules.sop import sop_splits
from tests.datamodules import _layouts


def test_read_rows_checks_number_columns_and_counts_blank_lines(tmp_path: Path) -> None:
    path = tmp_path / "labels.txt"
    path.write_text("1 3\n\n2 4\n")
    assert read_rows(path, CUB, 2, numbers={0: "image_id", 1: "class_id"}) == [
        ["1", "3"],
        ["2", "4"],
    ]
    path.write_text("1 3\n\n2 4\n3 1x\n")  # line 4 of the file, the third row
    with pytest.raises(ValueError, match=r"labels.txt line 4 column 2 \(class_id\) holds '1x'"):
        read_rows(path, CUB, 2, numbers={1: "class_id"})
    for bad in ["1.0", "1_0", "", "٣"]:  # int() would take '1_0' and the Arabic-Indic '٣'
        path.write_text(f"x{bad} 1\n")
        with pytest.raises(ValueError, match=r"line 1 column 1 \(image_id\)"):
            read_rows(path, CUB, 2, numbers={0: "image_id"})


def _replace(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


def _damage_cub_labels(tmp: Path) -> tuple[Callable[[], object], str]:
    root = _layouts.write_cub(tmp)
    _replace(root / "image_class_labels.txt", "\n3 2\n", "\n3 2x\n")
    return (
        lambda: cub200_splits(root, train_classes=2),
        r"image_class_labels.txt line 3 column 2 \(class_id\) holds '2x', not a whole number",
    )


def _damage_cub_images(tmp: Path) -> tuple[Callable[[], object], str]:
    root = _layouts.write_cub(tmp)
    _replace(root / "images.txt", "\n5 ", "\n5x ")
    return (
        lambda: cub200_splits(root, train_classes=2),
        r"images.txt line 5 column 1 \(image_id\) holds '5x'",
    )


def _damage_sop(tmp: Path) -> tuple[Callable[[], object], str]:
    root = _layouts.write_sop(tmp)
    _replace(root / "Ebay_train.txt", "\n2 1 2 ", "\n2 1x 2 ")
    return lambda: sop_splits(root), r"Ebay_train.txt line 3 column 2 \(class_id\) holds '1x'"


def _damage_msmt17(tmp: Path) -> tuple[Callable[[], object], str]:
    root = _layouts.write_msmt17(tmp, images=False)
    _replace(root / "list_gallery.txt", ".jpg 1\n", ".jpg 1x\n")
    return (
        lambda: msmt17_splits(root),
        r"list_gallery.txt line 2 column 2 \(person_id\) holds '1x'",
    )


def _damage_cars(tmp: Path) -> tuple[Callable[[], object], str]:
    root = _layouts.write_cars_annos(tmp)
    mat = loadmat(root / "cars_annos.mat")
    mat["annotations"][0, 2]["class"] = np.array(["2x"])
    savemat(root / "cars_annos.mat", {k: v for k, v in mat.items() if not k.startswith("__")})
    return lambda: cars196_splits(root, train_classes=2), r"entry 3 .* has class='2x'"


@pytest.mark.parametrize(
    "damage",
    [_damage_cub_labels, _damage_cub_images, _damage_sop, _damage_msmt17, _damage_cars],
    ids=["cub200-class_id", "cub200-image_id", "sop", "msmt17", "cars196"],
)
def test_non_number_in_a_number_field_names_file_line_column_and_value(
    tmp_path: Path, damage: Callable[[Path], tuple[Callable[[], object], str]]
) -> None:
    load, match = damage(tmp_path)
    with pytest.raises(ValueError, match=match) as error:
        load()
    assert "again" in str(error.value)  # the fix: extract or download the file again
