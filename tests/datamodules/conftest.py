"""Tiny datasets in each official layout, written fresh into the test's tmp_path."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.datamodules import _layouts


@pytest.fixture
def tiny_cub_root(tmp_path: Path) -> Path:
    """CUB_200_2011/ with classes 1–4 (2, 3, 4, 5 images); image 3 is grayscale."""
    return _layouts.write_cub(tmp_path, grayscale=(3,))


@pytest.fixture
def tiny_cars_annos_root(tmp_path: Path) -> Path:
    """cars_annos.mat + car_ims/ with classes 1–4 (2, 3, 4, 5 images)."""
    return _layouts.write_cars_annos(tmp_path / "annos")


@pytest.fixture
def tiny_cars_devkit_root(tmp_path: Path) -> Path:
    """The same images as `tiny_cars_annos_root`, in the devkit layout with test labels."""
    return _layouts.write_cars_devkit(tmp_path / "devkit_layout")


@pytest.fixture
def tiny_sop_root(tmp_path: Path) -> Path:
    """Stanford_Online_Products/ with products 1–3 train, 4–6 test; image 2 is grayscale."""
    return _layouts.write_sop(tmp_path)


@pytest.fixture
def tiny_market_root(tmp_path: Path) -> Path:
    """Market-1501-v15.09.15/ with junk (-1) and distractors (0000) in the gallery."""
    return _layouts.write_market(tmp_path)


@pytest.fixture(params=["V1", "V2"])
def tiny_msmt17_root(tmp_path: Path, request: pytest.FixtureRequest) -> Path:
    """MSMT17_V1/ or MSMT17_V2/ with images and the four list files."""
    return _layouts.write_msmt17(tmp_path, request.param)
