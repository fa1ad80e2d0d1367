"""Pretrained weights of the backbones: where they come from, how they load, what input they want.

Sources: the offline EfficientNet-Lite0 package, Cadene's BN-Inception URL, the timm hub, or a
local `.safetensors` or torch state-dict file (fitted by `benchmark.training.state_dicts`);
nothing downloads unless `pretrained=True` names an online source.
"""

from __future__ import annotations

import pickle
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import timm
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file
from timm.data import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD
from torch import Tensor, nn

from benchmark.training import lite0
from benchmark.training.bninception import CHECKPOINT_URL, BNInception
from benchmark.training.state_dicts import headless_state
from benchmark.training.tokens import token_backbone_kwargs

LITE0 = ("efficientnet_lite0", "tf_efficientnet_lite0")  # same tensors; the package fits both


@dataclass(frozen=True)
class InputConvention:
    """What input a backbone's weights expect: channel order and mean/std in [0, 1] units."""

    bgr: bool
    mean: tuple[float, ...]
    std: tuple[float, ...]


# Caffe's convention: BGR, 0-255, minus (104, 117, 128), i.e. (x - mean / 255) / (1 / 255).
BNINCEPTION_INPUT = InputConvention(True, (104 / 255, 117 / 255, 128 / 255), (1 / 255,) * 3)
TF_LITE_INPUT = InputConvention(False, lite0.MEAN, lite0.STD)


def pretrained_backbone(
    name: str, pretrained: bool | str
) -> tuple[nn.Module, InputConvention, str]:
    """A headless backbone (`forward_features`, `num_features`), the input convention of its
    weights, and the source string recorded in results rows."""
    if name != "bninception" and not timm.is_model(name):
        raise ValueError(
            f"unknown backbone {name!r}: use 'bninception' or a timm model name "
            f"(see timm.list_models(), e.g. 'resnet50', 'efficientnet_lite0')"
        )
    state, source = _pretrained_state(name, pretrained)
    hub = pretrained is True and source == "timm-hub"  # timm's create_model downloads them
    # TF-trained Lite0 weights come in EfficientNet-PyTorch's names (the package's file)
    tf_lite0 = name in LITE0 and state is not None and "_conv_stem.weight" in state
    model: nn.Module
    classifier: str | tuple[str, ...] | None
    if name == "bninception":
        model, convention, classifier = BNInception(num_classes=0), BNINCEPTION_INPUT, "last_linear"
    else:
        # The TF-trained lite0 weights go with TF's BatchNorm epsilon (timm's default is 1e-5).
        kwargs: dict[str, Any] = {"bn_eps": lite0.BN_EPS} if tf_lite0 else {}
        kwargs |= token_backbone_kwargs(name)
        try:
            model = timm.create_model(name, pretrained=hub, num_classes=0, **kwargs)
        except OSError as err:  # no network: huggingface_hub / urllib raise OSError subclasses
            if not hub:
                raise
            raise RuntimeError(
                f"could not download pretrained weights for {name!r} from the timm hub ({err}); "
                "offline, pass pretrained=<path to a .safetensors or state-dict .pth file> or "
                "pretrained=False (docs: Modern backbones)"
            ) from err
        cfg = cast(dict[str, Any], model.pretrained_cfg)  # timm's: mean, std, classifier, ...
        mean, std = cfg.get("mean", IMAGENET_DEFAULT_MEAN), cfg.get("std", IMAGENET_DEFAULT_STD)
        convention = InputConvention(False, tuple(mean), tuple(std))
        classifier = cfg.get("classifier")
    if tf_lite0 and state is not None:
        state, convention = lite0.timm_lite0_state_dict(state, model), TF_LITE_INPUT
    if state is not None:  # fitted and checked first: a mismatch is an error, not a warning
        model.load_state_dict(headless_state(model, state, name, source, classifier), strict=True)
    return model, convention, source


def _pretrained_state(name: str, pretrained: bool | str) -> tuple[dict[str, Tensor] | None, str]:
    """The state dict `pretrained` names (None for none, and for timm-hub weights, which
    `create_model` loads) and its source string."""
    if pretrained is False:
        return None, "none"
    if pretrained is True and name == "bninception":
        return _downloaded_state(CHECKPOINT_URL), CHECKPOINT_URL
    if pretrained is True and name in LITE0:
        return _read_state(lite0.lite0_weights_path()), lite0.PACKAGE
    if pretrained is True:
        return None, "timm-hub"
    return _read_state(Path(pretrained)), str(pretrained)


def _downloaded_state(url: str) -> dict[str, Tensor]:
    try:
        return torch.hub.load_state_dict_from_url(url, map_location="cpu", weights_only=True)
    except OSError as err:
        raise RuntimeError(
            f"could not download {url} ({err}); offline, download it elsewhere and pass "
            "pretrained=<path to bn_inception-52deb4733.pth>, or pass pretrained=False"
        ) from err


def _read_state(path: Path) -> dict[str, Tensor]:
    """State dict in `path` (a `.safetensors` file, or a torch file unwrapping a
    {'state_dict': ...} checkpoint), on the CPU."""
    if not path.is_file():
        raise FileNotFoundError(
            f"pretrained weights file {str(path)!r} not found; pass an existing .safetensors or "
            ".pth state dict, pretrained=True for the built-in source, or pretrained=False"
        )
    if path.suffix == ".safetensors":
        try:
            return load_file(path, device="cpu")
        except SafetensorError as err:
            raise ValueError(f"{path} is not a safetensors file: {err}") from err
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError) as err:
        raise ValueError(f"{path} is not a PyTorch state-dict file: {err}") from err
    if isinstance(state, Mapping) and isinstance(state.get("state_dict"), Mapping):
        state = state["state_dict"]
    return dict(state)
