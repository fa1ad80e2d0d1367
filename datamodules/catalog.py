"""The real datasets by the names people type (`circlebench data info cub200`).

The synthetic default has no files to list, verify or download, so it is not here.
"""

from __future__ import annotations

from datamodules.base import RetrievalDataModule
from datamodules.cars196 import Cars196DataModule
from datamodules.cub200 import CUB200DataModule
from datamodules.market1501 import Market1501DataModule
from datamodules.msmt17 import MSMT17DataModule
from datamodules.sop import SOPDataModule

DATASETS: dict[str, type[RetrievalDataModule]] = {
    cls.dataset_name: cls
    for cls in (
        CUB200DataModule,
        Cars196DataModule,
        SOPDataModule,
        Market1501DataModule,
        MSMT17DataModule,
    )
}


def datamodule_class(name: str) -> type[RetrievalDataModule]:
    """The DataModule class of dataset `name`; KeyError listing the choices if unknown."""
    if name not in DATASETS:
        raise KeyError(f"unknown dataset {name!r}; choose one of {sorted(DATASETS)}")
    return DATASETS[name]
