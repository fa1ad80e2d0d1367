"""The five real-dataset DataModules on tiny official layouts: loaders, protocol, errors."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from datamodules import (
    Cars196DataModule,
    CUB200DataModule,
    Market1501DataModule,
    MSMT17DataModule,
    RetrievalDataModule,
    SOPDataModule,
)
from datamodules.catalog import DATASETS, datamodule_class
from tests.datamodules import _layouts

LAYOUTS = ["cub200", "cars196_annos", "cars196_devkit", "sop", "market1501", "msmt17"]


@pytest.fixture(params=LAYOUTS)
def tiny_dm(request: pytest.FixtureRequest, tmp_path: Path) -> RetrievalDataModule:
    """Each DataModule on its tiny layout, 2×2 batches of 32 px images, no workers."""
    return _tiny(request.param, tmp_path)


def _tiny(name: str, tmp_path: Path, **kwargs: int) -> RetrievalDataModule:
    common = {"p": 2, "k": 2, "image_size": 32, "num_workers": 0, "eval_batch_size": 4, **kwargs}
    if name == "cub200":
        return CUB200DataModule(_layouts.write_cub(tmp_path), train_classes=2, **common)
    if name == "cars196_annos":
        return Cars196DataModule(_layouts.write_cars_annos(tmp_path), train_classes=2, **common)
    if name == "cars196_devkit":
        return Cars196DataModule(_layouts.write_cars_devkit(tmp_path), train_classes=2, **common)
    if name == "sop":
        return SOPDataModule(_layouts.write_sop(tmp_path), **common)
    if name == "market1501":
        return Market1501DataModule(_layouts.write_market(tmp_path), **common)
    return MSMT17DataModule(_layouts.write_msmt17(tmp_path, "V2"), include_val=True, **common)


def test_loaders_yield_images_labels_cameras(tiny_dm: RetrievalDataModule) -> None:
    tiny_dm.prepare_data()
    tiny_dm.setup("fit")
    images, labels, cameras = next(iter(tiny_dm.train_dataloader()))
    assert images.shape == (4, 3, 32, 32) and images.dtype == torch.float32
    assert images.min() >= 0.0 and images.max() <= 1.0
    assert labels.unique().numel() == 2 and int(labels.max()) < tiny_dm.num_classes
    loaders = tiny_dm.test_dataloader()
    assert len(loaders) == (1 if tiny_dm.protocol == "same_set" else 2)
    for loader in loaders:
        for images, _, cameras in loader:
            assert images.shape[1:] == (3, 32, 32)
            assert (cameras == -1).all() == (tiny_dm.protocol == "same_set")
    assert tiny_dm.val_dataloader() == []


def _own_id(name: str, item: str | int, cars: dict[bytes, int]) -> int:
    """The id that the dataset's files give the image `item` of a `_layouts` dataset."""
    path = Path(str(item))
    if name == "cub200":  # images/<ccc>.Bird_<c>/..., the class_id of image_class_labels.txt
        return int(path.parent.name[:3])
    if name.startswith("cars196"):  # the `class` of the annotations, found by image content
        return cars[path.read_bytes()]
    if name == "sop":  # <category>_final/<111085122870 + class_id>_<n>.JPG
        return int(path.stem.split("_")[0]) - 111085122870
    return int(path.name[:4])  # Market's and MSMT17's PPPP_...


@pytest.mark.parametrize("name", LAYOUTS)
def test_evaluation_labels_are_the_datasets_own_ids(name: str, tmp_path: Path) -> None:
    cars = {}
    for image_id, label, _ in _layouts.cars_images():
        _layouts.write_jpeg(tmp_path / "car.jpg", image_id)
        cars[(tmp_path / "car.jpg").read_bytes()] = label
    dm = _tiny(name, tmp_path / "data", val_classes=1)
    train, val, test = dm.splits()
    assert val is not None
    for split in [val.query, test.query, *(s.gallery for s in (val, test) if s.gallery)]:
        assert list(split.labels) == [_own_id(name, item, cars) for item in split.items]
    own = [_own_id(name, item, cars) for item in train.items]  # training: the same ids, 0..C-1
    assert list(train.labels) == [sorted(set(own)).index(c) for c in own]


def test_protocols_recall_ks_and_image_sizes() -> None:
    for cls in (CUB200DataModule, Cars196DataModule):
        assert (cls.protocol, cls.default_recall_ks) == ("same_set", (1, 2, 4, 8))
    assert (SOPDataModule.protocol, SOPDataModule.default_recall_ks) == (
        "same_set",
        (1, 10, 100, 1000),
    )
    for cls in (Market1501DataModule, MSMT17DataModule):
        assert (cls.protocol, cls.default_recall_ks) == ("query_gallery", (1, 5, 10))
        assert cls(root="unused").image_size == (256, 128)
    assert CUB200DataModule(root="unused").image_size == 224


def test_hyperparameters_record_dataset_arguments() -> None:
    dm = MSMT17DataModule(root="unused", include_val=True, p=4)
    assert (dm.include_val, dm.hparams["include_val"], dm.hparams["p"]) == (True, True, 4)
    assert dm.official_counts["train"] == (32621, 1041)
    assert MSMT17DataModule(root="unused").official_counts["train"] == (30248, 1041)
    assert CUB200DataModule(root="unused", train_classes=3).hparams["train_classes"] == 3
    assert CUB200DataModule(root="unused", train_classes=3).official_counts == {}


def test_nothing_is_read_in_init(tmp_path: Path) -> None:
    for cls in DATASETS.values():
        cls(root=tmp_path / "absent")  # errors belong to prepare_data/setup


@pytest.mark.parametrize("name", sorted(DATASETS))
def test_missing_root_fails_in_prepare_data_with_the_fix(name: str, tmp_path: Path) -> None:
    dm = datamodule_class(name)(root=tmp_path / "absent")
    with pytest.raises(FileNotFoundError, match=rf"not found in {tmp_path}.*Expected layout") as e:
        dm.prepare_data()
    assert "--data.init_args.root=<dir>" in str(e.value)
    assert f"circlebench data info {name}" in str(e.value)


@pytest.mark.parametrize("name", sorted(DATASETS))
def test_no_root_fails_with_the_fix(name: str) -> None:
    dm = datamodule_class(name)(root=None)
    with pytest.raises(ValueError, match=r"root is None.*--data.init_args.root=<dir>"):
        dm.prepare_data()


def test_metadata_without_images_fails_verify(tmp_path: Path) -> None:
    root = _layouts.write_msmt17(tmp_path, "V1", images=False)
    (root / "train").mkdir()
    with pytest.raises(
        FileNotFoundError, match=r"expected the train images, e\.g\. .*/train/0000/"
    ):
        MSMT17DataModule(root=root.parent).verify()


def test_corrupt_image_error_names_the_file(tmp_path: Path) -> None:
    root = _layouts.write_cub(tmp_path)
    victim = root / "images" / "003.Bird_3" / "Bird_3_0001_790006.jpg"
    victim.write_bytes(victim.read_bytes()[:60])  # truncated JPEG
    dm = CUB200DataModule(root, train_classes=2, image_size=16, num_workers=0)
    with pytest.raises(OSError, match=rf"cannot decode image {victim}"):
        list(dm.test_dataloader()[0])


def test_grayscale_images_become_rgb(tiny_cub_root: Path) -> None:
    dm = CUB200DataModule(tiny_cub_root, train_classes=2, image_size=16, num_workers=0)
    dm.setup("fit")
    image, _, _ = dm.make_dataset(dm.splits()[0], train=True)[2]  # image id 3 is grayscale
    assert image.shape == (3, 16, 16)


def test_unknown_dataset_lists_the_choices() -> None:
    with pytest.raises(
        KeyError, match=r"unknown dataset 'cub'; choose one of \['cars196', 'cub200'"
    ):
        datamodule_class("cub")


def test_config_reaches_dataset_and_common_arguments() -> None:
    from jsonargparse import ArgumentParser

    parser = ArgumentParser()
    parser.add_subclass_arguments(RetrievalDataModule, "data")
    argv = ["--data=MSMT17DataModule", "--data.init_args.root=r", "--data.init_args.p=4"]
    config = parser.parse_args([*argv, "--data.init_args.include_val=true"]).data
    assert config.class_path == "datamodules.MSMT17DataModule"
    assert (config.init_args.include_val, config.init_args.p) == (True, 4)
    assert config.init_args.image_size == (256, 128)
    assert config.init_args.sampler_mode == "coverage"
    mode = parser.parse_args([*argv, "--data.init_args.sampler_mode=independent"]).data
    assert mode.init_args.sampler_mode == "independent"
    with pytest.raises(SystemExit):  # a Literal: anything else is refused with the choices
        parser.parse_args([*argv, "--data.init_args.sampler_mode=balanced"])
