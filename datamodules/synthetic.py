"""Synthetic retrieval dataset, the default for runs without data: rendered, never read from disk.

Classes are procedurally drawn looks (shape × colours × texture, see `datamodules._render`);
training and test classes are disjoint. Image `g` of the dataset shows class
`g // images_per_class` in a pose drawn from `g`, so every pixel is a pure function of
`(render_seed, class, g)` (and the camera in re-ID mode) and needs no storage.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import torch
from torch import Tensor
from torch.utils.data import Dataset

from datamodules._render import camera_look, class_look, render_image
from datamodules.base import ImageSize, RetrievalDataModule, RetrievalProtocol
from datamodules.splits import Split, Splits, query_gallery_split
from datamodules.transforms import as_hw

Mode = Literal["fine_grained", "reid"]


class SyntheticDataset(Dataset):
    """Items `(image [3, H, W] float in [0, 1], label, camera)` rendered on access.

    `split.items` are global image numbers `g`; the rendered class is `g // images_per_class`
    (the split's labels may be relabelled, the look stays that of the original class).
    """

    def __init__(
        self, split: Split, *, images_per_class: int, image_size: ImageSize, render_seed: int
    ) -> None:
        self.split, self.images_per_class = split, images_per_class
        self.size, self.render_seed = as_hw(image_size), render_seed

    def __len__(self) -> int:
        return len(self.split)

    def __repr__(self) -> str:
        """What turns an item into pixels (the feature cache keys its entries with it)."""
        return (
            f"SyntheticDataset(images_per_class={self.images_per_class}, "
            f"image_size={self.size}, render_seed={self.render_seed})"
        )

    def __getitem__(self, i: int) -> tuple[Tensor, int, int]:
        g, cam = int(self.split.items[i]), self.split.cameras[i]
        look = class_look(self.render_seed, g // self.images_per_class)
        camera = camera_look(self.render_seed, cam) if cam >= 0 else None
        image = render_image(look, g, self.size, render_seed=self.render_seed, camera=camera)
        return torch.from_numpy(image).permute(2, 0, 1).contiguous(), self.split.labels[i], cam


class SyntheticDataModule(RetrievalDataModule):
    """Rendered classes for CPU runs without data, in a fine-grained or a re-ID mode.

    `mode="fine_grained"`: `same_set`, Recall@{1, 2, 4, 8}, no cameras. `mode="reid"`:
    `query_gallery`, ranks 1, 5, 10; image `j` of an identity is seen by camera
    `(identity + j) % num_cameras` (each with its own colour cast, brightness and blur), and one
    test image per identity and camera is a query. A re-ID instance overrides `dataset_name`,
    `protocol` and `default_recall_ks`: read them from the instance.

    Args:
        num_train_classes: training classes (ids 0..num_train_classes-1).
        num_test_classes: test classes, after the training ones.
        images_per_class: rendered images per class.
        num_cameras: cameras in re-ID mode (ignored in fine-grained mode).
        render_seed: seed of the rendered world (looks, poses, cameras); fixed by default so
            runs with different `seed`s train on the same data.
        image_size: rendered size, an int or `(H, W)`; 64 px keeps CPU runs fast.
    """

    dataset_name: ClassVar[str] = "synthetic"
    protocol: ClassVar[RetrievalProtocol] = "same_set"
    default_recall_ks: ClassVar[tuple[int, ...]] = (1, 2, 4, 8)

    def __init__(
        self,
        mode: Mode = "fine_grained",
        num_train_classes: int = 100,
        num_test_classes: int = 100,
        images_per_class: int = 20,
        num_cameras: int = 4,
        render_seed: int = 0,
        image_size: ImageSize = 64,
        num_workers: int = 2,
        eval_batch_size: int = 256,
        **kwargs: Any,
    ) -> None:
        if mode not in ("fine_grained", "reid"):
            raise ValueError(
                f"SyntheticDataModule: mode must be 'fine_grained' or 'reid', got {mode!r}"
            )
        if min(num_train_classes, num_test_classes, images_per_class, num_cameras) < 1:
            raise ValueError(
                "SyntheticDataModule: num_train_classes, num_test_classes, images_per_class and "
                f"num_cameras must be >= 1, got {num_train_classes}, {num_test_classes}, "
                f"{images_per_class}, {num_cameras}"
            )
        if mode == "reid" and min(num_cameras, images_per_class) < 2:
            raise ValueError(
                "SyntheticDataModule: re-ID mode needs num_cameras >= 2 and images_per_class >= 2 "
                f"so that queries have matches in other cameras, got {num_cameras}, "
                f"{images_per_class}"
            )
        super().__init__(
            None,
            image_size=image_size,
            num_workers=num_workers,
            eval_batch_size=eval_batch_size,
            **kwargs,
        )
        self.mode = mode
        self.num_train_classes, self.num_test_classes = num_train_classes, num_test_classes
        self.images_per_class, self.num_cameras = images_per_class, num_cameras
        self.render_seed = render_seed
        if mode == "reid":  # per-instance protocol: see the class docstring
            self.dataset_name = "synthetic_reid"  # type: ignore[misc]
            self.protocol = "query_gallery"  # type: ignore[misc]
            self.default_recall_ks = (1, 5, 10)  # type: ignore[misc]

    def _classes(self, first: int, count: int) -> Split:
        n, reid = self.images_per_class, self.mode == "reid"
        items = list(range(first * n, (first + count) * n))
        cameras = [(g // n + g % n) % self.num_cameras if reid else -1 for g in items]
        return Split(items, [g // n for g in items], cameras)

    def load_train(self) -> Split:
        return self._classes(0, self.num_train_classes)

    def load_splits(self) -> Splits:
        train = self.load_train()
        test = self._classes(self.num_train_classes, self.num_test_classes)
        if self.mode == "fine_grained":
            return Splits(train, test, None)
        return Splits(train, *query_gallery_split(test, seed=self.render_seed))

    def make_dataset(self, split: Split, *, train: bool) -> Dataset:
        return SyntheticDataset(
            split,
            images_per_class=self.images_per_class,
            image_size=self.image_size,
            render_seed=self.render_seed,
        )
