"""Token backbones (timm's ViT family): which names they are, how they are built, pooled, decayed.

A token backbone (a timm model of `TOKEN_MODULES`: ViT, DINO, DINOv2, CLIP, DeiT, EVA-02) returns
from `forward_features` tokens [B, N, C] after its final norm: its `num_prefix_tokens` prefix
tokens (CLS, then DeiT's distillation token or DINOv2's registers), then the patch tokens. Built
with `dynamic_img_size=True, dynamic_img_pad=True`, it takes any image size: the positional
embeddings are resampled to the patch grid, and a side that is not a multiple of the patch size
is zero-padded at the right and bottom after normalisation.
"""

from __future__ import annotations

import re
from typing import Any, Literal, get_args

import torch
from timm.models import is_model_in_modules
from torch import Tensor, nn

TOKEN_MODULES = ("vision_transformer", "deit", "eva")
TokenPooling = Literal["cls", "patch_mean", "cls_patch_mean"]
_BLOCK = re.compile(r"blocks\.(\d+)\.")


def is_token_backbone(name: str) -> bool:
    """Whether timm model `name` (with or without a `.tag`) returns tokens [B, N, C]."""
    return name != "bninception" and is_model_in_modules(name, TOKEN_MODULES)


def token_backbone_kwargs(name: str) -> dict[str, Any]:
    """`timm.create_model` arguments for `name`: any image size for a token backbone, else none."""
    return {"dynamic_img_size": True, "dynamic_img_pad": True} if is_token_backbone(name) else {}


class TokenPool(nn.Module):
    """Tokens [B, N, C] -> [B, C] (`cls`, `patch_mean`) or [B, 2C] (`cls_patch_mean`).

    `cls` is token 0; `patch_mean` the mean of the patch tokens (after the `num_prefix_tokens`);
    `cls_patch_mean` both, CLS first. `norm`, given to `forward`, is applied to each part: the
    backbone's `fc_norm`, for the timm models (EVA-02, `*_gap`) that normalise after pooling.
    """

    def __init__(self, kind: TokenPooling = "cls", num_prefix_tokens: int = 1) -> None:
        super().__init__()
        if kind not in get_args(TokenPooling):
            raise ValueError(
                f"unknown token pooling {kind!r}; choose one of {list(get_args(TokenPooling))}"
            )
        if kind != "patch_mean" and num_prefix_tokens < 1:
            raise ValueError(
                f"pooling {kind!r} needs a CLS token, and this backbone has none "
                "(num_prefix_tokens=0); use pooling='patch_mean'"
            )
        self.kind, self.num_prefix_tokens = kind, num_prefix_tokens

    @property
    def parts(self) -> int:
        """How many C-sized parts the pooled feature holds: 2 for `cls_patch_mean`, else 1."""
        return 2 if self.kind == "cls_patch_mean" else 1

    def forward(self, tokens: Tensor, norm: nn.Module | None = None) -> Tensor:
        if tokens.ndim != 3 or tokens.shape[1] <= self.num_prefix_tokens:
            raise ValueError(
                f"TokenPool expects tokens [B, N, C] with N > {self.num_prefix_tokens} prefix "
                f"tokens, got shape {tuple(tokens.shape)}"
            )
        parts = []
        if self.kind != "patch_mean":
            parts.append(tokens[:, 0])  # [B, C]
        if self.kind != "cls":
            parts.append(tokens[:, self.num_prefix_tokens :].mean(dim=1))  # [B, C]
        if norm is not None:
            parts = [norm(part) for part in parts]
        return torch.cat(parts, dim=1)  # [B, C] or [B, 2C]

    def extra_repr(self) -> str:
        return f"kind={self.kind!r}, num_prefix_tokens={self.num_prefix_tokens}"


def layer_decay_groups(backbone: nn.Module, decay: float) -> list[tuple[list[nn.Parameter], float]]:
    """Trainable parameters of a token backbone by depth, with learning-rate scales decay^(L - l).

    Layer l is 0 for the embeddings (patch, positional, CLS and register tokens, `norm_pre`),
    i + 1 for `blocks.i`, and L = depth + 1 for what follows the blocks (the final norms), as in
    BEiT (Bao et al., ICLR 2022) and timm's `param_groups_layer_decay`: the last block learns
    at `decay` times the backbone rate, the embeddings at decay^L times. Groups come deepest first.
    """
    blocks = getattr(backbone, "blocks", None)
    if not isinstance(blocks, (nn.Sequential, nn.ModuleList)):
        raise ValueError(
            f"layer decay needs a backbone of transformer `blocks`; {type(backbone).__name__} "
            "has none: pass layer_decay=None"
        )
    top = len(blocks) + 1
    by_layer: dict[int, list[nn.Parameter]] = {}
    for name, parameter in backbone.named_parameters():
        if not parameter.requires_grad:
            continue
        if block := _BLOCK.match(name):
            layer = int(block[1]) + 1
        else:
            layer = top if name.startswith(("norm.", "fc_norm.", "head")) else 0
        by_layer.setdefault(layer, []).append(parameter)
    return [(by_layer[layer], decay ** (top - layer)) for layer in sorted(by_layer, reverse=True)]
