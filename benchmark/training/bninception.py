"""BN-Inception (Ioffe & Szegedy, ICML 2015) with the parameter names of Cadene's port.

The module's state dict has exactly the keys and shapes of the ImageNet checkpoint
`bn_inception-52deb4733.pth` of Cadene's `pretrainedmodels` (`conv1_7x7_s2.weight`,
`inception_3a_3x3_reduce_bn.running_mean`, ..., `last_linear.weight` [1000, 1024]), so that file
loads with `strict=True`. The weights were trained in Caffe: they expect BGR input in 0-255 minus
the per-channel mean (B, G, R) = (104, 117, 128), and no division by a standard deviation.

Every convolution is followed by BatchNorm and ReLU. BatchNorm uses PyTorch's momentum 0.1: the
0.9 in Cadene's file is Caffe's convention copied across, which in PyTorch would make the running
statistics follow the last batch almost entirely.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

CHECKPOINT_URL = "http://data.lip6.fr/cadene/pretrainedmodels/bn_inception-52deb4733.pth"
NUM_FEATURES = 1024


@dataclass(frozen=True)
class InceptionSpec:
    """Channel numbers of one inception block (Table 1 of the paper, as ported by Cadene).

    A grid-reduction block (3c, 4e) has no 1x1 branch (`c1x1=0`), strides its last 3x3 layers
    and passes its max-pooled input through unprojected (`pool_proj=0`).
    """

    name: str
    in_channels: int
    c1x1: int
    c3x3_reduce: int
    c3x3: int
    double_reduce: int
    double: int
    pool: Literal["avg", "max"]
    pool_proj: int
    stride: int = 1


BLOCKS = (
    InceptionSpec("3a", 192, 64, 64, 64, 64, 96, "avg", 32),
    InceptionSpec("3b", 256, 64, 64, 96, 64, 96, "avg", 64),
    InceptionSpec("3c", 320, 0, 128, 160, 64, 96, "max", 0, stride=2),
    InceptionSpec("4a", 576, 224, 64, 96, 96, 128, "avg", 128),
    InceptionSpec("4b", 576, 192, 96, 128, 96, 128, "avg", 128),
    InceptionSpec("4c", 576, 160, 128, 160, 128, 160, "avg", 128),
    InceptionSpec("4d", 608, 96, 128, 192, 160, 192, "avg", 128),
    InceptionSpec("4e", 608, 0, 128, 192, 192, 256, "max", 0, stride=2),
    InceptionSpec("5a", 1056, 352, 192, 320, 160, 224, "avg", 128),
    InceptionSpec("5b", 1024, 352, 192, 320, 192, 224, "max", 128),
)


class BNInception(nn.Module):
    """BN-Inception: images [B, 3, H, W] (BGR, 0-255 minus mean) -> logits [B, num_classes].

    `num_classes=0` drops `last_linear`; `forward_features` gives the map [B, 1024, H/32, W/32].
    Image sides must make the two stride-2 blocks see even sizes (multiples of 32 always do).
    """

    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        self.num_features = NUM_FEATURES
        self._add_conv("conv1_7x7_s2", 3, 64, 7, stride=2)
        self._add_conv("conv2_3x3_reduce", 64, 64, 1)
        self._add_conv("conv2_3x3", 64, 192, 3)
        # Per block: its branches as chains of conv names, then the pooling branch's projection.
        self._branches = [(spec, *self._add_block(spec)) for spec in BLOCKS]
        self.last_linear = nn.Linear(NUM_FEATURES, num_classes) if num_classes else None

    def _add_conv(self, name: str, cin: int, cout: int, k: int, stride: int = 1) -> str:
        self.add_module(name, nn.Conv2d(cin, cout, k, stride=stride, padding=k // 2))
        self.add_module(f"{name}_bn", nn.BatchNorm2d(cout))
        return name

    def _add_block(self, s: InceptionSpec) -> tuple[list[list[str]], str | None]:
        p = f"inception_{s.name}"
        branches = []
        if s.c1x1:
            branches.append([self._add_conv(f"{p}_1x1", s.in_channels, s.c1x1, 1)])
        branches.append(
            [
                self._add_conv(f"{p}_3x3_reduce", s.in_channels, s.c3x3_reduce, 1),
                self._add_conv(f"{p}_3x3", s.c3x3_reduce, s.c3x3, 3, stride=s.stride),
            ]
        )
        branches.append(
            [
                self._add_conv(f"{p}_double_3x3_reduce", s.in_channels, s.double_reduce, 1),
                self._add_conv(f"{p}_double_3x3_1", s.double_reduce, s.double, 3),
                self._add_conv(f"{p}_double_3x3_2", s.double, s.double, 3, stride=s.stride),
            ]
        )
        proj = (
            self._add_conv(f"{p}_pool_proj", s.in_channels, s.pool_proj, 1) if s.pool_proj else None
        )
        return branches, proj

    def _conv_bn_relu(self, name: str, x: Tensor) -> Tensor:
        return F.relu(self.get_submodule(f"{name}_bn")(self.get_submodule(name)(x)))

    def _block(
        self, spec: InceptionSpec, branches: list[list[str]], proj: str | None, x: Tensor
    ) -> Tensor:
        outputs = []
        for chain in branches:
            y = x
            for name in chain:
                y = self._conv_bn_relu(name, y)
            outputs.append(y)
        if spec.pool == "avg":
            pooled = F.avg_pool2d(x, 3, stride=1, padding=1, ceil_mode=True)
        else:  # padded at stride 1 (5b), keeping the grid; 3c and 4e halve it
            pooled = F.max_pool2d(x, 3, spec.stride, padding=int(spec.stride == 1), ceil_mode=True)
        outputs.append(self._conv_bn_relu(proj, pooled) if proj else pooled)
        sizes = {tuple(y.shape[2:]) for y in outputs}
        if len(sizes) > 1:
            raise ValueError(
                f"BN-Inception block {spec.name} got a {tuple(x.shape[2:])} grid, so its "
                f"branches disagree ({sorted(sizes)}); use image sides that are multiples of 32"
            )
        return torch.cat(outputs, dim=1)

    def forward_features(self, x: Tensor) -> Tensor:
        """Feature map [B, 1024, h, w] of images [B, 3, H, W] (h = H/32 for multiples of 32)."""
        x = self._conv_bn_relu("conv1_7x7_s2", x)
        x = F.max_pool2d(x, 3, stride=2, ceil_mode=True)
        x = self._conv_bn_relu("conv2_3x3", self._conv_bn_relu("conv2_3x3_reduce", x))
        x = F.max_pool2d(x, 3, stride=2, ceil_mode=True)
        for spec, branches, proj in self._branches:
            x = self._block(spec, branches, proj, x)
        return x

    def forward(self, x: Tensor) -> Tensor:
        features = self.forward_features(x).mean(dim=(2, 3))  # [B, 1024]
        return self.last_linear(features) if self.last_linear is not None else features
