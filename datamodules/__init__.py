"""LightningDataModules for the retrieval benchmarks and the synthetic default."""

from datamodules.base import ImageFileDataset, RetrievalDataModule, Split, Splits
from datamodules.synthetic import SyntheticDataModule
from datamodules.transforms import fine_grained_transform, reid_transform

__all__ = [
    "ImageFileDataset",
    "RetrievalDataModule",
    "Split",
    "Splits",
    "SyntheticDataModule",
    "fine_grained_transform",
    "reid_transform",
]
