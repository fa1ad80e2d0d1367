"""LightningDataModules for the retrieval benchmarks and the synthetic default."""

from datamodules.base import ImageFileDataset, RetrievalDataModule, Split, Splits
from datamodules.cars196 import Cars196DataModule
from datamodules.cub200 import CUB200DataModule
from datamodules.features import CachedFeatureDataModule
from datamodules.market1501 import Market1501DataModule
from datamodules.msmt17 import MSMT17DataModule
from datamodules.sop import SOPDataModule
from datamodules.synthetic import SyntheticDataModule
from datamodules.transforms import fine_grained_transform, reid_transform

__all__ = [
    "CUB200DataModule",
    "CachedFeatureDataModule",
    "Cars196DataModule",
    "ImageFileDataset",
    "MSMT17DataModule",
    "Market1501DataModule",
    "RetrievalDataModule",
    "SOPDataModule",
    "Split",
    "Splits",
    "SyntheticDataModule",
    "fine_grained_transform",
    "reid_transform",
]
