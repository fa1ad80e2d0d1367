"""Base LightningDataModule: P-K training batches, (image, label, camera) evaluation sets.

Every DataModule yields images as float tensors in [0, 1], RGB, [3, H, W]. The embedder owns
its input normalisation (BN-Inception's BGR 0–255 mean subtraction, timm's mean/std), so one
DataModule serves every backbone and the backbone is named once, in the model config.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Literal

import pytorch_lightning as pl
from torch.utils.data import DataLoader, Dataset

Protocol = Literal["same_set", "query_gallery"]
ImageSize = int | tuple[int, int]


@dataclass(frozen=True)
class Split:
    """One set of images: `items[i]` is the image, `labels[i]` its class, `cameras[i]` its camera.

    `items` are file paths for datasets on disk and integer seeds for the synthetic one. Cameras
    are -1 where a dataset has none. Training labels are contiguous 0..C-1.
    """

    items: Sequence[str | int]
    labels: Sequence[int]
    cameras: Sequence[int]

    def __post_init__(self) -> None:
        if not len(self.items) == len(self.labels) == len(self.cameras):
            raise ValueError(
                f"Split: items, labels and cameras differ in length "
                f"({len(self.items)}, {len(self.labels)}, {len(self.cameras)})"
            )

    def __len__(self) -> int:
        return len(self.items)


@dataclass(frozen=True)
class Splits:
    """Training set and test sets; `gallery` is None under the `same_set` protocol."""

    train: Split
    query: Split
    gallery: Split | None


class RetrievalDataModule(pl.LightningDataModule):
    """Common behaviour; subclasses declare their protocol and parse their files.

    Subclasses set `dataset_name`, `protocol` and `default_recall_ks`, and implement
    `verify()` (cheap file checks with actionable errors), `load_splits()` and `make_dataset()`.
    """

    dataset_name: ClassVar[str]
    protocol: ClassVar[Protocol]
    default_recall_ks: ClassVar[tuple[int, ...]]

    @abstractmethod
    def verify(self) -> None:
        """Raise FileNotFoundError/ValueError naming the dataset, path, layout and source."""

    @abstractmethod
    def load_splits(self) -> Splits:
        """Parse the metadata into the protocol's train / query / gallery splits."""

    @abstractmethod
    def make_dataset(self, split: Split, *, train: bool) -> Dataset:
        """A dataset whose items are `(image [3, H, W] float in [0, 1], label, camera)`."""

    def prepare_data(self) -> None:
        self.verify()

    def train_dataloader(self) -> DataLoader: ...  # P-K batches (samplers.PKSampler)

    def val_dataloader(self) -> list[DataLoader]: ...  # [] without a validation split

    def test_dataloader(self) -> list[DataLoader]: ...  # [query] or [query, gallery]
