"""The real subsets in ../shared/data (MANIFEST.md): counts, class splits, metadata-only parsing."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

from datamodules import CUB200DataModule
from datamodules.cars196 import devkit_annotations
from datamodules.cub200 import cub200_splits
from datamodules.msmt17 import msmt17_splits


@pytest.mark.parametrize(
    ("folder", "train_classes", "counts"),
    [("cub200", 3, (178, 145)), ("cub200_50cls_small", 25, (1402, 1487))],
)
def test_cub_subsets_split_by_class(
    shared_data: Path, folder: str, train_classes: int, counts: tuple[int, int]
) -> None:
    splits = cub200_splits(shared_data / folder, train_classes)
    assert (len(splits.train), len(splits.query)) == counts
    assert sorted(set(splits.train.labels)) == list(range(1, train_classes + 1))  # class ids
    assert sorted(set(splits.query.labels)) == list(range(train_classes + 1, 2 * train_classes + 1))
    train, _, test = CUB200DataModule(shared_data / folder, train_classes).splits()
    assert sorted(set(train.labels)) == list(range(train_classes))  # relabelled for training
    assert test.query.labels == splits.query.labels  # evaluation: the files' class ids


def test_cub_50_class_subset_loads_its_grayscale_images(shared_data: Path) -> None:
    dm = CUB200DataModule(shared_data / "cub200_50cls_small", train_classes=25, image_size=32)
    dm.prepare_data()
    train, _, test = dm.splits()
    items = [*train.items, *test.query.items]
    gray = [i for i, path in enumerate(items) if Image.open(path).mode == "L"]
    assert len(gray) == 2
    for i in gray:
        split, j = (train, i) if i < len(train) else (test.query, i - len(train))
        image, _, _ = dm.make_dataset(split, train=False)[j]
        assert image.shape == (3, 32, 32)


def test_cars_devkit_metadata_parses_without_images(shared_data: Path) -> None:
    train = devkit_annotations(shared_data / "cars196" / "metadata_only", "train")
    assert len(train) == 8144
    assert len({label for _, label in train}) == 196
    assert train[0] == ("cars_train/00001.jpg", 14)  # Audi TTS Coupe 2012, as in the devkit


def test_cars_full_load_needs_labelled_test_annotations(shared_data: Path) -> None:
    from datamodules.cars196 import cars196_splits

    root = shared_data / "cars196" / "metadata_only"
    with pytest.raises(FileNotFoundError, match=r"Cars196.*not found in .*metadata_only"):
        cars196_splits(root)


@pytest.mark.parametrize(("include_val", "train_images"), [(False, 30248), (True, 30248 + 2373)])
def test_msmt17_lists_parse_without_images(
    shared_data: Path, include_val: bool, train_images: int
) -> None:
    splits = msmt17_splits(shared_data / "msmt17" / "metadata_only", include_val)
    assert splits.gallery is not None
    assert (len(splits.train), len(set(splits.train.labels))) == (train_images, 1041)
    assert (len(splits.query), len(set(splits.query.labels))) == (11659, 3060)
    assert (len(splits.gallery), len(set(splits.gallery.labels))) == (82161, 3060)
    cameras = {*splits.train.cameras, *splits.query.cameras, *splits.gallery.cameras}
    assert cameras == set(range(15))
