"""Transforms: float [0, 1] RGB [3, H, W] from RGB, grayscale and tensor inputs."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from datamodules.transforms import IMAGENET_MEAN, as_hw, fine_grained_transform, reid_transform


def inputs() -> list:
    rng = np.random.default_rng(0)
    rgb = Image.fromarray(rng.integers(0, 256, (60, 90, 3), dtype=np.uint8))
    gray = Image.fromarray(rng.integers(0, 256, (70, 50), dtype=np.uint8))
    tensor = torch.from_numpy(rng.integers(0, 256, (3, 40, 30), dtype=np.uint8))
    return [rgb, gray, tensor]


TRANSFORMS = {
    "fine_grained_train": lambda size: fine_grained_transform(size, train=True),
    "fine_grained_eval": lambda size: fine_grained_transform(size, train=False),
    "reid_train": lambda size: reid_transform(size, train=True, erasing_p=1.0),
    "reid_eval": lambda size: reid_transform(size, train=False),
}


@pytest.mark.parametrize("name", TRANSFORMS)
@pytest.mark.parametrize(("size", "hw"), [(32, (32, 32)), ((48, 24), (48, 24))])
def test_output_is_float_rgb_in_unit_range(name: str, size, hw: tuple[int, int]) -> None:
    transform = TRANSFORMS[name](size)
    for image in inputs():
        out = transform(image)
        assert type(out) is torch.Tensor and out.dtype == torch.float32
        assert out.shape == (3, *hw)
        assert out.min() >= 0.0 and out.max() <= 1.0


def test_eval_transforms_are_deterministic_and_centre_crop() -> None:
    image = inputs()[0]
    for transform in (fine_grained_transform(32, train=False), reid_transform(train=False)):
        assert torch.equal(transform(image), transform(image))
    flat = Image.new("RGB", (100, 50), (255, 0, 0))
    out = fine_grained_transform((16, 32), train=False)(flat)
    torch.testing.assert_close(out[:, 0, 0], torch.tensor([1.0, 0.0, 0.0]))


def test_reid_random_erasing_fills_with_the_imagenet_mean() -> None:
    torch.manual_seed(0)
    white = Image.new("RGB", (64, 128), (255, 255, 255))
    out = reid_transform((64, 32), train=True, pad=0, erasing_p=1.0)(white)
    erased = (out < 1).all(0)
    assert erased.any()
    torch.testing.assert_close(out[:, erased][:, 0], torch.tensor(IMAGENET_MEAN))


def test_grayscale_becomes_three_equal_channels() -> None:
    out = fine_grained_transform(16, train=False)(inputs()[1])
    assert torch.equal(out[0], out[1]) and torch.equal(out[1], out[2])


@pytest.mark.parametrize("size", [0, (10,), (10, 0), (4, 5, 6), 2.5])
def test_bad_image_size_raises(size) -> None:
    with pytest.raises(ValueError, match="image_size must be a positive int or"):
        as_hw(size)
