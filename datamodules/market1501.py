"""Market-1501 (Zheng et al., ICCV 2015): 751 training identities, 750 test identities, 6 cameras.

File names are `PPPP_cCsS_FFFFFF_BB.jpg`: person id (`-1` junk, `0000` distractor), camera,
sequence, frame, box. Junk boxes are dropped everywhere; distractors stay in the gallery
(19,732 boxes - 3,819 junk = 15,913), as in the official evaluation code.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, ClassVar

from datamodules._files import DatasetInfo, resolve_root
from datamodules.base import ImageSize, RetrievalDataModule, RetrievalProtocol, Split, Splits

INFO = DatasetInfo(
    name="market1501",
    title="Market-1501",
    homepage="https://zheng-lab-anu.github.io/Project/project_reid.html",
    licence="research only; do not distribute or use commercially (official readme.txt); "
    "cite Zheng et al., ICCV 2015",
    layout="  Market-1501-v15.09.15/bounding_box_train/, query/, bounding_box_test/ holding "
    "PPPP_cCsS_FFFFFF_BB.jpg",
    obtain="Download Market-1501-v15.09.15.zip from the project page (or a mirror keeping the "
    "official archive) and extract it.",
    counts={"train": (12936, 751), "query": (3368, 750), "gallery": (15913, 751)},
)

NAME = re.compile(r"^(-1|\d{4})_c(\d)s\d_\d{6}_\d{2}\.jpg$")
FOLDERS = {"train": "bounding_box_train", "query": "query", "gallery": "bounding_box_test"}


def _read_folder(folder: Path) -> Split:
    """The non-junk boxes of one folder, with person ids and 0-based cameras."""
    if not folder.is_dir():
        raise INFO.missing(folder.parent, f"the folder {folder.name}/")
    items, ids, cameras = [], [], []
    for path in sorted(folder.glob("*.jpg")):  # the official folders also hold Thumbs.db
        match = NAME.match(path.name)
        if match is None:
            raise ValueError(
                f"{INFO.title}: {path} does not follow the official name pattern "
                "PPPP_cCsS_FFFFFF_BB.jpg; remove it or restore the original file"
            )
        if match[1] == "-1":
            continue
        items.append(str(path))
        ids.append(int(match[1]))
        cameras.append(int(match[2]) - 1)
    return Split(items, ids, cameras)


def market1501_splits(root: str | Path, *, test: bool = True) -> Splits:
    """Train, query, and gallery with distractors (id 0) kept; labels are the person ids. `test`
    False reads `bounding_box_train/` alone (the query and gallery are empty)."""
    root = resolve_root(root, FOLDERS["train"], ["Market-1501-v15.09.15", "Market-1501"])
    if test and not all((root / folder).is_dir() for folder in FOLDERS.values()):
        raise INFO.missing(root, "bounding_box_train/, query/ and bounding_box_test/")
    query, gallery = (
        _read_folder(root / FOLDERS[name]) if test else Split([], [], [])
        for name in ("query", "gallery")
    )
    return Splits(_read_folder(root / FOLDERS["train"]), query, gallery)


class Market1501DataModule(RetrievalDataModule):
    """Market-1501, `query_gallery`: re-ID ranks 1, 5, 10 and mAP; images 256×128 by default."""

    dataset_name: ClassVar[str] = "market1501"
    protocol: ClassVar[RetrievalProtocol] = "query_gallery"
    default_recall_ks: ClassVar[tuple[int, ...]] = (1, 5, 10)
    info: ClassVar[DatasetInfo] = INFO

    def __init__(self, root: str | Path, image_size: ImageSize = (256, 128), **kwargs: Any) -> None:
        super().__init__(root, image_size=image_size, **kwargs)

    def load_splits(self) -> Splits:
        return market1501_splits(self.root_dir)

    def load_train(self) -> Split:
        return market1501_splits(self.root_dir, test=False).train
