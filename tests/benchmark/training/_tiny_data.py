"""A tiny in-memory RetrievalDataModule for the training tests: class-coloured noise images."""

from __future__ import annotations

import torch
from torch.utils.data import Dataset

from datamodules.base import RetrievalDataModule, Split, Splits


class TinyImages(Dataset):
    """Item i: a [3, S, S] image whose mean colour depends on its label, plus seeded noise."""

    def __init__(self, split: Split, size: int) -> None:
        self.split, self.size = split, size

    def __len__(self) -> int:
        return len(self.split)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int, int]:
        label = self.split.labels[i]
        gen = torch.Generator().manual_seed(int(self.split.items[i]))
        colour = torch.tensor([label % 3, (label // 3) % 3, label % 2], dtype=torch.float32) / 3
        noise = torch.rand(3, self.size, self.size, generator=gen)
        return (0.6 * colour[:, None, None] + 0.4 * noise), label, self.split.cameras[i]


class TinyDataModule(RetrievalDataModule):
    """`classes` train classes then `classes` test classes, `per_class` images each."""

    dataset_name = "tiny"
    protocol = "same_set"
    default_recall_ks = (1, 2)

    def __init__(self, classes: int = 4, per_class: int = 4, **kwargs) -> None:
        kwargs.setdefault("num_workers", 0)
        kwargs.setdefault("image_size", 16)
        super().__init__(root=None, **kwargs)
        self.classes, self.per_class = classes, per_class

    def verify(self) -> None:
        """Nothing on disk."""

    def _split(self, first_class: int, first_item: int) -> Split:
        labels = [first_class + i // self.per_class for i in range(self.classes * self.per_class)]
        items = [first_item + i for i in range(len(labels))]
        return Split(items, labels, [i % 2 for i in range(len(labels))])

    def load_splits(self) -> Splits:
        train = self._split(0, 0)
        test = self._split(self.classes, 10_000)
        if self.protocol == "same_set":
            return Splits(train, test, None)
        return Splits(
            train, test.subset(range(0, len(test), 2)), test.subset(range(1, len(test), 2))
        )

    def make_dataset(self, split: Split, *, train: bool) -> Dataset:
        return TinyImages(split, self.image_size)


class TinyReIDDataModule(TinyDataModule):
    """The same images under the query/gallery protocol (cameras alternate 0, 1)."""

    dataset_name = "tiny-reid"
    protocol = "query_gallery"
    default_recall_ks = (1, 5)
