from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

from datamodules.sop import sop_splits


def test_lists_give_train_and_test(tiny_sop_root: Path) -> None:
    splits = sop_splits(tiny_sop_root.parent)
    assert (len(splits.train), len(splits.query), splits.gallery) == (2 + 3 + 4, 5 + 6 + 7, None)
    assert list(splits.train.labels) == [1, 1, 2, 2, 2, 3, 3, 3, 3]
    assert sorted(set(splits.query.labels)) == [4, 5, 6]  # official class ids
    assert set(splits.query.cameras) == {-1}
    assert Image.open(splits.train.items[1]).mode == "L"  # SOP has grayscale images


def test_wrong_header_is_reported(tiny_sop_root: Path) -> None:
    path = tiny_sop_root / "Ebay_test.txt"
    path.write_text(path.read_text().split("\n", 1)[1])
    with pytest.raises(ValueError, match=r"Ebay_test.txt starts with .*expected the header"):
        sop_splits(tiny_sop_root)


def test_missing_list_file_is_named(tiny_sop_root: Path) -> None:
    (tiny_sop_root / "Ebay_test.txt").unlink()
    with pytest.raises(
        FileNotFoundError, match=r"Stanford Online Products not found in .*: expected Ebay_test.txt"
    ):
        sop_splits(tiny_sop_root)
