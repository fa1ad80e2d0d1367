"""RetrievalDataModule on a tiny generated image folder, the image Dataset and its errors."""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from types import SimpleNamespace
from typing import ClassVar

import numpy as np
import pytest
import torch
from PIL import Image

from datamodules import (
    CachedFeatureDataModule,
    ImageFileDataset,
    RetrievalDataModule,
    Split,
    Splits,
)
from datamodules.splits import carve_validation
from datamodules.transforms import fine_grained_transform


def write_images(
    root: Path, labels: list[int], cameras: list[int], *, gray_every: int = 0
) -> Split:
    """Tiny JPEGs named like `<label>/<index>_c<camera>.jpg`; every `gray_every`-th is grayscale."""
    rng = np.random.default_rng(0)
    items = []
    for i, (label, cam) in enumerate(zip(labels, cameras, strict=True)):
        path = root / f"{label:03d}" / f"{i:04d}_c{cam}.jpg"
        path.parent.mkdir(parents=True, exist_ok=True)
        shape = (20, 24) if gray_every and i % gray_every == 0 else (20, 24, 3)
        pixels = rng.integers(0, 255, shape, dtype=np.uint8)
        if not path.exists():  # several DataModules share one folder: write it once
            Image.fromarray(pixels).save(path)
        items.append(str(path))
    return Split(items, labels, cameras)


class FolderDataModule(RetrievalDataModule):
    """Test double: classes 10..15 train, 20..22 test, 1-2 cameras per identity."""

    dataset_name: ClassVar[str] = "folder"
    protocol: ClassVar = "same_set"
    default_recall_ks: ClassVar = (1, 2)

    def verify(self) -> None:
        if not self.root.is_dir():
            raise FileNotFoundError(f"folder dataset not found in {self.root}")

    def load_splits(self) -> Splits:
        train_labels = [10 + c for c in range(6) for _ in range(6)]
        test_labels = [20 + c for c in range(3) for _ in range(4)]
        train = write_images(self.root / "train", train_labels, [i % 2 for i in range(36)])
        test = write_images(self.root / "test", test_labels, [i % 2 for i in range(12)])
        if self.protocol == "same_set":
            return Splits(train, test, None)
        return Splits(train, test.subset(range(0, 12, 2)), test.subset(range(1, 12, 2)))


class ReIDFolderDataModule(FolderDataModule):
    protocol: ClassVar = "query_gallery"


def make_dm(tmp_path: Path, cls: type = FolderDataModule, **kwargs) -> FolderDataModule:
    defaults = {"p": 3, "k": 2, "image_size": 16, "num_workers": 0, "eval_batch_size": 5}
    return cls(tmp_path, **(defaults | kwargs))


def test_train_loader_yields_pk_batches_with_contiguous_labels(tmp_path: Path) -> None:
    dm = make_dm(tmp_path)
    dm.prepare_data()
    dm.setup("fit")
    assert dm.num_classes == 6
    loader = dm.train_dataloader()
    assert len(loader) == 36 // 6
    for images, labels, cameras in loader:
        assert images.shape == (6, 3, 16, 16) and images.dtype == torch.float32
        assert labels.dtype == cameras.dtype == torch.int64
        assert sorted(labels.bincount(minlength=6).tolist()) == [0] * (6 - 3) + [2] * 3
        assert set(labels.tolist()) <= set(range(6))
    assert dm.val_dataloader() == []


def test_eval_loaders_follow_the_protocol_in_order(tmp_path: Path) -> None:
    (query,) = make_dm(tmp_path).test_dataloader()
    labels = torch.cat([batch[1] for batch in query]).tolist()
    assert labels == [20 + c for c in range(3) for _ in range(4)]  # not shuffled
    query, gallery = make_dm(tmp_path, ReIDFolderDataModule).test_dataloader()
    assert torch.cat([b[2] for b in query]).tolist() == [0] * 6
    assert torch.cat([b[2] for b in gallery]).tolist() == [1] * 6
    images = next(iter(gallery))[0]
    assert images.shape == (5, 3, 16, 16)


def test_validation_classes_are_disjoint_deterministic_and_relabelled(tmp_path: Path) -> None:
    dm = make_dm(tmp_path, val_classes=2, seed=3)
    train, val, _ = dm.splits()
    assert dm.num_classes == 4 and sorted(set(train.labels)) == [0, 1, 2, 3]
    held = set(val.query.labels)
    assert len(held) == 2 and len(val.query) == 12
    kept = {Path(item).parent.name for item in train.items}
    assert kept.isdisjoint({Path(item).parent.name for item in val.query.items})
    again = make_dm(tmp_path, val_classes=2, seed=3).splits()[1]
    assert again.query.items == val.query.items
    others = {
        tuple(make_dm(tmp_path, val_classes=2, seed=s).splits()[1].query.labels) for s in range(8)
    }
    assert len(others) > 1  # the seed chooses the classes
    (loader,) = dm.val_dataloader()
    assert sum(len(b[1]) for b in loader) == 12


def test_query_gallery_validation_takes_one_query_per_identity_and_camera() -> None:
    labels = [1, 1, 1, 1, 2, 2, 2, 3, 3, 4, 4, 4]
    cameras = [0, 0, 1, 1, 0, 0, 0, 0, 1, 2, 2, 3]
    train = Split(list(range(12)), labels, cameras)
    val = carve_validation(train, 3, seed=0, protocol="query_gallery")
    assert sorted(set(val.train.labels)) == [0]  # the remaining class, relabelled
    pairs = list(zip(val.query.labels, val.query.cameras, strict=True))
    assert len(pairs) == len(set(pairs))  # one query per (identity, camera)
    assert 2 not in val.query.labels  # seen by one camera only: gallery
    assert set(val.query.items).isdisjoint(val.gallery.items)
    assert len(val.query) + len(val.gallery) == sum(
        labels.count(c) for c in set(val.query.labels) | set(val.gallery.labels)
    )


def test_train_loader_shards_by_the_attached_trainer(tmp_path: Path) -> None:
    dm = make_dm(tmp_path)
    dm.trainer = SimpleNamespace(world_size=2, global_rank=1, strategy=on(torch.device("cpu")))
    sampler = dm.train_dataloader().batch_sampler
    assert (sampler.num_replicas, sampler.rank, len(sampler)) == (2, 1, 36 // (6 * 2))


def on(device: torch.device) -> SimpleNamespace:
    """A Trainer's strategy running on `device`."""
    return SimpleNamespace(root_device=device)


def test_batches_are_pinned_only_for_a_trainer_on_cuda(tmp_path: Path) -> None:
    """Pinned memory speeds up copies to a GPU; a CPU run where CUDA is visible pins nothing."""
    dm = make_dm(tmp_path)
    assert not dm.train_dataloader().pin_memory  # no Trainer: no device to copy to
    for device, pinned in ((torch.device("cpu"), False), (torch.device("cuda", 0), True)):
        dm.trainer = SimpleNamespace(world_size=1, global_rank=0, strategy=on(device))
        loaders = [dm.train_dataloader(), *dm.test_dataloader()]
        assert [loader.pin_memory for loader in loaders] == [pinned] * len(loaders)


@pytest.mark.parametrize("mode", ["coverage", "independent"])
def test_sampler_mode_reaches_the_sampler(tmp_path: Path, mode: str) -> None:
    dm = make_dm(tmp_path, sampler_mode=mode, k=4)  # 6 classes of 6 images: chunks of 4, 4
    assert dm.hparams["sampler_mode"] == mode
    batches = list(dm.train_dataloader().batch_sampler)
    assert dm.train_dataloader().batch_sampler.mode == mode
    seen = {i for batch in batches for i in batch}
    if mode == "coverage":  # 12 chunks fill 4 batches of 3 classes: every image
        assert len(batches) == 4 and len(seen) == 36
    else:
        assert len(batches) == 36 // 12


def test_sampler_mode_defaults_to_coverage(tmp_path: Path) -> None:
    assert make_dm(tmp_path).train_dataloader().batch_sampler.mode == "coverage"


def test_workers_are_persistent(tmp_path: Path) -> None:
    loader = make_dm(tmp_path, num_workers=1).train_dataloader()
    assert loader.persistent_workers and loader.num_workers == 1


@pytest.mark.parametrize("val_classes", [6, 7, -1])
def test_too_many_validation_classes_raise(tmp_path: Path, val_classes: int) -> None:
    with pytest.raises(ValueError, match=f"val_classes={val_classes} must be between 1 and"):
        make_dm(tmp_path, val_classes=val_classes).setup()


def test_grayscale_images_become_rgb(tmp_path: Path) -> None:
    split = write_images(tmp_path, [0, 0], [-1, -1], gray_every=1)
    assert Image.open(split.items[0]).mode == "L"
    image, label, camera = ImageFileDataset(split, fine_grained_transform(8, train=False))[0]
    assert image.shape == (3, 8, 8) and (label, camera) == (0, -1)
    assert torch.equal(image[0], image[1]) and torch.equal(image[1], image[2])
    assert image.min() >= 0.0 and image.max() <= 1.0


def test_truncated_image_raises_naming_the_file(tmp_path: Path) -> None:
    split = write_images(tmp_path, [0], [-1])
    path = Path(split.items[0])
    path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])
    with pytest.raises(
        OSError, match=f"cannot decode image {re.escape(str(path))}.*corrupt or truncated"
    ):
        ImageFileDataset(split, fine_grained_transform(8, train=False))[0]
    path.write_bytes(b"not an image")
    with pytest.raises(OSError, match=f"cannot decode image {re.escape(str(path))}"):
        ImageFileDataset(split, fine_grained_transform(8, train=False))[0]


def test_missing_image_raises_naming_the_file(tmp_path: Path) -> None:
    split = Split([str(tmp_path / "gone.jpg")], [0], [-1])
    with pytest.raises(FileNotFoundError, match=r"image file missing: .*gone\.jpg"):
        ImageFileDataset(split, fine_grained_transform(8, train=False))[0]


def test_split_lengths_must_agree() -> None:
    with pytest.raises(ValueError, match=r"differ in length \(2, 1, 2\)"):
        Split(["a", "b"], [0], [-1, -1])


@pytest.mark.parametrize("cls", [RetrievalDataModule, CachedFeatureDataModule])
def test_each_setting_has_its_own_help_line(cls: type) -> None:
    """`--help` takes each argument's text from the class docstring (jsonargparse reads it with
    docstring_parser), which does not split a line naming two arguments."""
    import docstring_parser

    documented = {p.arg_name for p in docstring_parser.parse(cls.__doc__ or "").params}
    arguments = set(inspect.signature(cls.__init__).parameters) - {"self", "kwargs"}
    assert arguments <= documented, f"no help line for {sorted(arguments - documented)}"
