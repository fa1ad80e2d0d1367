from __future__ import annotations

from pathlib import Path

import pytest

from datamodules.cub200 import cub200_splits


def test_split_is_by_class_and_ignores_the_classification_split(tiny_cub_root: Path) -> None:
    splits = cub200_splits(tiny_cub_root, train_classes=2)
    assert (len(splits.train), len(splits.query), splits.gallery) == (2 + 3, 4 + 5, None)
    assert list(splits.train.labels) == [1, 1, 2, 2, 2]  # official class ids
    assert sorted(set(splits.query.labels)) == [3, 4]
    assert set(splits.train.cameras) == set(splits.query.cameras) == {-1}
    assert all("/images/001.Bird_1/" in p or "/images/002.Bird_2/" in p for p in splits.train.items)
    assert all(Path(p).is_file() for p in [*splits.train.items, *splits.query.items])


def test_root_may_be_the_parent_of_cub_200_2011(tiny_cub_root: Path) -> None:
    by_parent = cub200_splits(tiny_cub_root.parent, train_classes=3)
    assert by_parent == cub200_splits(tiny_cub_root, train_classes=3)


@pytest.mark.parametrize("train_classes", [0, 4, 100])
def test_train_classes_must_leave_both_sides(tiny_cub_root: Path, train_classes: int) -> None:
    with pytest.raises(ValueError, match=rf"train_classes={train_classes}.*1 <= train_classes < 4"):
        cub200_splits(tiny_cub_root, train_classes=train_classes)


def test_missing_root_names_dataset_path_layout_and_source(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="CUB-200-2011 not found in") as error:
        cub200_splits(tmp_path / "nowhere")
    message = str(error.value)
    for expected in ["nowhere", "images.txt", "CUB_200_2011.tgz", "--data.init_args.root"]:
        assert expected in message


def test_missing_label_file_is_named(tiny_cub_root: Path) -> None:
    (tiny_cub_root / "image_class_labels.txt").unlink()
    with pytest.raises(FileNotFoundError, match=r"expected the file image_class_labels.txt"):
        cub200_splits(tiny_cub_root, train_classes=2)


def test_damaged_metadata_line_is_reported(tiny_cub_root: Path) -> None:
    path = tiny_cub_root / "image_class_labels.txt"
    path.write_text(path.read_text().replace("2 1\n", "2\n"))
    with pytest.raises(ValueError, match=r"image_class_labels.txt line 2 has 1 fields, expected 2"):
        cub200_splits(tiny_cub_root, train_classes=2)


def test_metadata_files_must_list_the_same_images(tiny_cub_root: Path) -> None:
    path = tiny_cub_root / "image_class_labels.txt"
    path.write_text(path.read_text() + "99 4\n")
    with pytest.raises(ValueError, match="list different image ids"):
        cub200_splits(tiny_cub_root, train_classes=2)
