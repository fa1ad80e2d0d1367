from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from datamodules.msmt17 import msmt17_splits
from tests.datamodules import _layouts


def test_lists_give_train_query_gallery(tiny_msmt17_root: Path) -> None:
    splits = msmt17_splits(tiny_msmt17_root.parent)
    assert splits.gallery is not None
    assert list(splits.train.labels) == [0, 0, 1, 2]
    assert list(splits.train.cameras) == [0, 11, 2, 14]  # camera field of the name, 0-based
    assert (list(splits.query.labels), list(splits.gallery.labels)) == ([0, 1], [0, 1, 1])
    assert list(splits.gallery.cameras) == [1, 13, 8]
    train_dir = "train" if tiny_msmt17_root.name.endswith("V1") else "mask_train_v2"
    assert all(f"/{train_dir}/" in p and Path(p).is_file() for p in splits.train.items)
    assert all(Path(p).is_file() for p in [*splits.query.items, *splits.gallery.items])


def test_include_val_adds_the_val_list(tiny_msmt17_root: Path) -> None:
    splits = msmt17_splits(tiny_msmt17_root, include_val=True)
    assert list(splits.train.labels) == [0, 0, 1, 2, 1, 3]
    assert list(splits.train.cameras)[-2:] == [3, 1]
    assert all(Path(p).is_file() for p in splits.train.items)


def test_lists_parse_without_images(tmp_path: Path) -> None:
    root = _layouts.write_msmt17(tmp_path, "V2", images=False)
    splits = msmt17_splits(root, include_val=True)
    assert "/mask_test_v2/" in splits.query.items[0]
    assert len(splits.train) == 6


def test_missing_val_list_matters_only_with_include_val(tiny_msmt17_root: Path) -> None:
    (tiny_msmt17_root / "list_val.txt").unlink()
    assert len(msmt17_splits(tiny_msmt17_root).train) == 4
    with pytest.raises(FileNotFoundError, match=r"MSMT17 not found in .*: expected list_val.txt"):
        msmt17_splits(tiny_msmt17_root, include_val=True)


def test_unknown_version_is_reported(tmp_path: Path) -> None:
    root = _layouts.write_msmt17(tmp_path, "V1", images=False)
    renamed = root.rename(tmp_path / "msmt")
    with pytest.raises(FileNotFoundError, match=r"mask_train_v2/ and mask_test_v2/ \(V2\)"):
        msmt17_splits(renamed)
    shutil.rmtree(renamed)
    with pytest.raises(FileNotFoundError, match=r"MSMT17 not found in .*list_train.txt"):
        msmt17_splits(tmp_path)


def test_name_without_camera_is_reported(tiny_msmt17_root: Path) -> None:
    (tiny_msmt17_root / "list_query.txt").write_text("0000/person.jpg 0\n")
    with pytest.raises(ValueError, match=r"lists '0000/person.jpg'.*camera in its third field"):
        msmt17_splits(tiny_msmt17_root)
