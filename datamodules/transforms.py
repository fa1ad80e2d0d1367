"""Image transforms per protocol: PIL image or uint8 tensor in, float [0, 1] RGB [3, H, W] out.

Normalisation is left to the embedder (BN-Inception's BGR 0–255 mean subtraction, timm's
mean/std), so these transforms only resize, crop and augment.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torchvision.transforms import v2

ImageSize = int | Sequence[int]

# ImageNet mean in [0, 1]: an erased patch becomes 0 after the embedder normalises, which is
# what random erasing does in the re-ID literature (applied there after normalisation).
IMAGENET_MEAN = (0.485, 0.456, 0.406)
# grayscale inputs become 3 equal channels, so every batch stacks to [B, 3, H, W]
TO_RGB = [v2.ToImage(), v2.RGB()]
TO_FLOAT = [v2.ToDtype(torch.float32, scale=True), v2.ToPureTensor()]


def as_hw(image_size: ImageSize) -> tuple[int, int]:
    """`(H, W)` from an int (square) or a pair; raises ValueError on anything else."""
    hw = (image_size, image_size) if isinstance(image_size, int) else image_size
    pair = isinstance(hw, Sequence) and len(hw) == 2
    if not pair or not all(isinstance(s, int) and s > 0 for s in hw):
        raise ValueError(f"image_size must be a positive int or (H, W), got {image_size!r}")
    return hw[0], hw[1]


def fine_grained_transform(image_size: ImageSize = 224, *, train: bool) -> v2.Compose:
    """CUB/Cars/SOP: train RandomResizedCrop + flip; eval resizes the shorter side to
    `max(H, W)·256/224` (aspect ratio kept) and cuts out the centre `H × W`."""
    hw = as_hw(image_size)
    if train:
        ops = [v2.RandomResizedCrop(hw, antialias=True), v2.RandomHorizontalFlip()]
    else:
        ops = [v2.Resize(round(max(hw) * 256 / 224), antialias=True), v2.CenterCrop(hw)]
    return v2.Compose([*TO_RGB, *ops, *TO_FLOAT])


def reid_transform(
    image_size: ImageSize = (256, 128),
    *,
    train: bool,
    pad: int = 10,
    erasing_p: float = 0.5,
) -> v2.Compose:
    """Market/MSMT17: Resize to `(H, W)`; train adds flip, pad + random crop, random erasing."""
    hw = as_hw(image_size)
    ops: list[v2.Transform] = [*TO_RGB, v2.Resize(hw, antialias=True)]
    if train:
        ops += [v2.RandomHorizontalFlip(), v2.Pad(pad), v2.RandomCrop(hw)]
    ops += TO_FLOAT
    if train and erasing_p > 0:
        ops.append(v2.RandomErasing(p=erasing_p, value=list(IMAGENET_MEAN)))
    return v2.Compose(ops)
