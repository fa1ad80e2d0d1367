"""LightningDataModules for the retrieval benchmarks and the synthetic default."""

from datamodules.base import ImageFileDataset, RetrievalDataModule, Split, Splits
from datamodules.transforms import fine_grained_transform, reid_transform

__all__ = [
    "ImageFileDataset",
    "RetrievalDataModule",
    "Split",
    "Splits",
    "fine_grained_transform",
    "reid_transform",
]
