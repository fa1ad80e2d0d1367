from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from datamodules.base import Split
from datamodules.cars196 import cars196_splits, devkit_annotations
from tests.datamodules import _layouts


def _content(split: Split) -> list[tuple[int, str]]:
    """(label, image digest) pairs: equal across layouts when the same images are listed."""
    return sorted(
        (label, hashlib.sha256(Path(item).read_bytes()).hexdigest())
        for item, label in zip(split.items, split.labels, strict=True)
    )


def test_cars_annos_split_is_by_class(tiny_cars_annos_root: Path) -> None:
    splits = cars196_splits(tiny_cars_annos_root, train_classes=2)
    assert (len(splits.train), len(splits.query), splits.gallery) == (2 + 3, 4 + 5, None)
    assert sorted(set(splits.train.labels)) == [1, 2]  # official class ids
    assert sorted(set(splits.query.labels)) == [3, 4]
    assert all("/car_ims/" in p and Path(p).is_file() for p in splits.train.items)


def test_devkit_layout_gives_the_same_split_as_cars_annos(
    tiny_cars_annos_root: Path, tiny_cars_devkit_root: Path
) -> None:
    annos = cars196_splits(tiny_cars_annos_root, train_classes=2)
    devkit = cars196_splits(tiny_cars_devkit_root, train_classes=2)
    assert _content(devkit.train) == _content(annos.train)
    assert _content(devkit.query) == _content(annos.query)
    # both halves of the devkit feed both sides of the class split
    assert {Path(p).parent.name for p in devkit.train.items} == {"cars_train", "cars_test"}


def test_labelled_test_annotations_may_sit_in_devkit(tiny_cars_devkit_root: Path) -> None:
    before = cars196_splits(tiny_cars_devkit_root, train_classes=2)
    name = "cars_test_annos_withlabels.mat"
    shutil.move(tiny_cars_devkit_root / name, tiny_cars_devkit_root / "devkit" / name)
    assert cars196_splits(tiny_cars_devkit_root, train_classes=2) == before


def test_devkit_metadata_parses_without_images(tmp_path: Path) -> None:
    root = _layouts.write_cars_devkit(tmp_path, test_labels=False)
    shutil.rmtree(root / "cars_train")
    shutil.rmtree(root / "cars_test")
    train = devkit_annotations(root, "train")
    assert len(train) == sum(not test for _, _, test in _layouts.cars_images())
    assert train[0] == ("cars_train/00001.jpg", 1)


def test_missing_labelled_test_annotations_are_named(tmp_path: Path) -> None:
    root = _layouts.write_cars_devkit(tmp_path, test_labels=False)
    with pytest.raises(FileNotFoundError, match=r"cars_test_annos_withlabels.mat.*has no labels"):
        cars196_splits(root, train_classes=2)


def test_empty_root_lists_both_layouts(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"Cars196.*cars_annos.mat and car_ims/, or devkit"):
        cars196_splits(tmp_path)


def test_missing_image_folder_is_named(tiny_cars_annos_root: Path, tmp_path: Path) -> None:
    shutil.rmtree(tiny_cars_annos_root / "car_ims")
    with pytest.raises(FileNotFoundError, match=r"car_ims/ beside cars_annos.mat"):
        cars196_splits(tiny_cars_annos_root)
    root = _layouts.write_cars_devkit(tmp_path / "d")
    shutil.rmtree(root / "cars_test")
    with pytest.raises(FileNotFoundError, match="cars_test/ beside devkit/"):
        cars196_splits(root)


def test_wrong_or_corrupt_mat_file(tiny_cars_annos_root: Path) -> None:
    mat = tiny_cars_annos_root / "cars_annos.mat"
    from scipy.io import savemat

    savemat(mat, {"something": [1, 2]})
    with pytest.raises(ValueError, match=r"holds no variable 'annotations'.*something"):
        cars196_splits(tiny_cars_annos_root)
    mat.write_bytes(b"not a mat file at all" * 10)
    with pytest.raises(ValueError, match=r"cannot read .*cars_annos.mat as a MATLAB file"):
        cars196_splits(tiny_cars_annos_root)


def test_train_classes_must_leave_both_sides(tiny_cars_annos_root: Path) -> None:
    with pytest.raises(ValueError, match=r"train_classes=98 .*classes 1\.\.4"):
        cars196_splits(tiny_cars_annos_root)
