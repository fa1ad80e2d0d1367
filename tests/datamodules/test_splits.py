"""Class-disjoint folds for tuning: they tile the training classes and never touch the test set."""

from __future__ import annotations

import random
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from datamodules import (
    Cars196DataModule,
    CUB200DataModule,
    Market1501DataModule,
    MSMT17DataModule,
    RetrievalDataModule,
    SOPDataModule,
    SyntheticDataModule,
)
from datamodules.splits import Split, Splits, class_folds, fold_sizes, fold_split
from tests.datamodules import _layouts


@pytest.mark.parametrize(("classes", "folds"), [(10, 3), (400, 3), (25, 4), (7, 7), (2, 2)])
def test_folds_tile_the_classes_disjointly_and_evenly(classes: int, folds: int) -> None:
    ids = random.Random(classes).sample(range(1000), classes)  # any ids, in any order
    parts = class_folds(ids, folds)
    assert len(parts) == folds
    assert sorted(c for part in parts for c in part) == sorted(ids)  # tile: each class once
    assert [len(p) for p in parts] == fold_sizes(classes, folds)
    assert max(map(len, parts)) - min(map(len, parts)) <= 1


def test_folds_are_a_function_of_the_classes_alone() -> None:
    ids = list(range(30))
    assert class_folds(ids, 3) == class_folds(list(reversed(ids)) + ids, 3)
    assert class_folds(ids, 3) != [ids[:10], ids[10:20], ids[20:]]  # shuffled, not id blocks


def test_fold_split_validates_on_its_fold_and_trains_on_the_rest() -> None:
    labels = [c for c in range(10, 22) for _ in range(3)]
    train = Split(list(range(len(labels))), labels, [-1] * len(labels))
    parts = class_folds(labels, 3)
    for fold, held in enumerate(parts):
        split = fold_split(train, 3, fold, protocol="same_set")
        assert set(split.query.labels) == set(held) and split.gallery is None
        kept = [train.labels[i] for i in split.train.items]
        assert set(kept) == set(labels) - set(held)
        assert sorted(set(split.train.labels)) == list(range(12 - len(held)))  # relabelled


@pytest.mark.parametrize(
    ("folds", "fold", "match"),
    [
        (1, 0, r"folds=1: class-disjoint cross-validation needs an int >= 2"),
        (True, 0, r"folds=True"),
        (13, 0, r"folds=13 is more than the 12 training classes"),
        (3, 3, r"fold=3 must be an int in \[0, 2\] for folds=3"),
        (3, -1, r"fold=-1 must be an int"),
    ],
)
def test_bad_folds_are_explained(folds: object, fold: object, match: str) -> None:
    labels = [c for c in range(12) for _ in range(2)]
    train = Split(list(range(24)), labels, [-1] * 24)
    with pytest.raises(ValueError, match=match):
        fold_split(train, folds, fold, protocol="same_set")  # type: ignore[arg-type]


def test_a_fold_datamodule_has_no_test_split() -> None:
    dm = SyntheticDataModule(num_train_classes=9, num_test_classes=4, images_per_class=2, folds=3)
    train, val, test = dm.splits()
    assert test is None and val is not None
    assert len(set(train.labels)) == 6 and len(set(val.query.labels)) == 3
    assert set(val.query.labels) <= set(range(9))  # validation classes are training classes
    with pytest.raises(ValueError, match=r"is a tuning fold \(folds=3, fold=0\): it has no test"):
        dm.test_dataloader()


def test_folds_and_val_classes_exclude_each_other() -> None:
    with pytest.raises(ValueError, match=r"val_classes=2 and folds=3 both carve a validation"):
        SyntheticDataModule(val_classes=2, folds=3)


def _no_test(root: Path, dm: RetrievalDataModule, test_only: list[str]) -> None:
    """Delete every test image of `dm` and the test-only metadata and folders under `root`."""
    splits = dm.load_splits()
    for split in (splits.query, splits.gallery):
        for item in split.items if split is not None else ():
            Path(str(item)).unlink(missing_ok=True)
    for name in test_only:
        path = root / name
        shutil.rmtree(path) if path.is_dir() else path.unlink()


# dataset -> (write the tiny layout, make the DataModule, test-only files to delete)
DATASETS: dict[str, tuple[Callable[[Path], Path], Callable[..., RetrievalDataModule], list[str]]]
DATASETS = {
    "cub200": (_layouts.write_cub, lambda r, **kw: CUB200DataModule(r, 3, **kw), []),
    "cars196": (
        _layouts.write_cars_annos,
        lambda r, **kw: Cars196DataModule(r, 3, **kw),
        [],
    ),
    "sop": (_layouts.write_sop, SOPDataModule, ["Ebay_test.txt"]),
    "market1501": (_layouts.write_market, Market1501DataModule, ["query", "bounding_box_test"]),
    "msmt17": (
        _layouts.write_msmt17,
        MSMT17DataModule,
        ["test", "list_query.txt", "list_gallery.txt"],
    ),
}


@pytest.mark.parametrize("name", sorted(DATASETS))
def test_a_fold_reads_no_test_file_and_builds_no_test_split(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write, make, test_only = DATASETS[name]
    root = write(tmp_path)
    _no_test(root, make(root), test_only)
    dm = make(root, folds=2, fold=1, p=1, k=2, num_workers=0, image_size=16)
    monkeypatch.setattr(type(dm), "load_splits", _forbidden)
    dm.prepare_data()  # verify() checks the training images only
    dm.setup("fit")
    images, labels, _ = next(iter(dm.train_dataloader()))
    assert images.shape[1:] == (3, 16, 16)
    assert [len(loader.dataset) for loader in dm.val_dataloader()]  # the held-out fold
    assert set(labels.tolist()) <= set(range(dm.num_classes))


def _forbidden(self: RetrievalDataModule) -> None:
    raise AssertionError(f"{type(self).__name__}.load_splits() called while tuning")


def test_every_dataset_builds_its_training_split_alone() -> None:
    """A dataset that kept the base `load_train` would build its test split to tune."""
    classes = [*RetrievalDataModule.__subclasses__()]
    own = [c for c in classes if c.__module__.startswith("datamodules.")]
    assert {c.__name__ for c in own if c.load_train is RetrievalDataModule.load_train} == set()


def test_the_test_sets_are_the_query_and_a_gallery_unless_same_set() -> None:
    train, query, gallery = (Split([i], [i], [-1]) for i in range(3))
    empty = Split([], [], [])
    assert Splits(train, query, None).test_sets() == [("query", query)]
    assert Splits(train, query, gallery).test_sets() == [("query", query), ("gallery", gallery)]
    assert Splits(train, query, empty).test_sets() == [("query", query), ("gallery", empty)]
