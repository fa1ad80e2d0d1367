from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from datamodules.market1501 import market1501_splits


def test_folders_give_train_query_gallery(tiny_market_root: Path) -> None:
    splits = market1501_splits(tiny_market_root.parent)
    assert splits.gallery is not None
    assert list(splits.train.labels) == [2, 2, 7, 7, 7, 10]  # person ids; splits() relabels
    assert list(splits.train.cameras) == [0, 1, 0, 2, 4, 5]  # c1..c6 -> 0..5, by name order
    assert list(splits.query.labels) == [1, 3, 3]
    assert list(splits.query.cameras) == [0, 1, 3]


def test_gallery_drops_junk_and_keeps_distractors(tiny_market_root: Path) -> None:
    gallery = market1501_splits(tiny_market_root).gallery
    assert gallery is not None
    assert len(gallery) == 6  # 8 boxes - 2 junk
    assert sorted(gallery.labels) == [0, 0, 1, 1, 3, 3]
    assert not any(Path(p).name.startswith("-1") for p in gallery.items)


def test_unexpected_file_name_is_reported(tiny_market_root: Path) -> None:
    (tiny_market_root / "query" / "person.jpg").write_bytes(b"")
    with pytest.raises(ValueError, match=r"query/person.jpg does not follow .*PPPP_cCsS"):
        market1501_splits(tiny_market_root)


def test_missing_folder_is_named(tiny_market_root: Path) -> None:
    shutil.rmtree(tiny_market_root / "query")
    with pytest.raises(
        FileNotFoundError, match=r"Market-1501 not found in .*bounding_box_train/, query/"
    ):
        market1501_splits(tiny_market_root)
