"""Similarity sources: where the within-class scores s_p and between-class scores s_n come from.

Sun et al. (CVPR 2020, Sec. 3) observe that pair-wise and class-level losses differ only in the
similarities they feed the same formula. A source turns `embeddings [B, D]` and `labels [B]` into
`sim [B, N]` with boolean `pos_mask [B, N]` / `neg_mask [B, N]`; every loss is a function of those.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from typing import ClassVar, Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

_NORM_EPS = 1e-12  # as F.normalize

# Where s_p and s_n come from: the other samples of the batch, or one proxy per class.
Paradigm = Literal["pair-wise", "class-level"]


def compute_dtype(tensor: Tensor) -> torch.dtype:
    """fp32, or fp64 when given fp64: fp16/bf16 overflow in exp(γ·s) at γ=256."""
    return torch.promote_types(tensor.dtype, torch.float32)


def check_class_ids(labels: Tensor, num_classes: int, owner: str) -> None:
    """Raise ValueError unless every label is in [0, num_classes)."""
    if ((labels < 0) | (labels >= num_classes)).any():  # one host sync per batch
        low, top = int(labels.min()), int(labels.max())
        fix = (
            f"set num_classes to at least {top + 1} (the number of training classes)"
            if low >= 0
            else "remap the labels to 0..C-1 (a negative label is not a class id)"
        )
        raise ValueError(
            f"{owner}: labels must lie in [0, {num_classes}), got min {low} and max {top}; {fix}"
        )


def check_class_count(owner: str, num_classes: int, embedding_dim: int) -> None:
    """Raise ValueError unless num_classes >= 2 and embedding_dim >= 1 (proxies, classifiers)."""
    if num_classes < 2:
        raise ValueError(
            f"{owner}: num_classes must be >= 2, got {num_classes}; "
            "pass the number of training classes"
        )
    if embedding_dim < 1:
        raise ValueError(
            f"{owner}: embedding_dim must be >= 1, got {embedding_dim}; "
            "pass the embedder's output size"
        )


class _Gram(torch.autograd.Function):
    """x̂ x̂ᵀ [B, B] for x̂ = x / ‖x‖ (or x itself), with a hand-written backward.

    Autograd would run two matmuls for the product and a chain of ops for the normalisation;
    here the gradient is one matmul, G_x̂ = (G + Gᵀ) x̂, then `_unnormalized_grad`'s projection.
    """

    @staticmethod
    def forward(ctx, x: Tensor, normalize: bool) -> Tensor:  # type: ignore[override]
        norm = x.norm(dim=1, keepdim=True) if normalize else None  # [B, 1]
        x_hat = x / norm.clamp_min(_NORM_EPS) if norm is not None else x
        ctx.save_for_backward(x_hat, norm)
        return x_hat @ x_hat.T

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None]:  # type: ignore[override]
        x_hat, norm = ctx.saved_tensors
        grad_x_hat = (grad + grad.T) @ x_hat  # [B, D]
        if norm is None:
            return grad_x_hat, None
        return _unnormalized_grad(grad_x_hat, x_hat, norm), None


class _Cosine(torch.autograd.Function):
    """x̂ ŵᵀ [B, C] for the rows x̂ = x / ‖x‖ and ŵ = w / ‖w‖, with a hand-written backward.

    The proxies are never normalised as a [C, D] matrix: the product x̂ wᵀ is divided by ‖w_c‖
    column by column, and with S = x̂ ŵᵀ and G the gradient at S, each side's gradient is one
    matmul and one projection onto the sphere's tangent space whose radial part comes from the
    [B, C] product: ∂/∂w_c = (Σ_b G_bc x̂_b - w_c Σ_b G_bc S_bc / ‖w_c‖) / ‖w_c‖, in place
    (F.normalize's eps: no projection below it).
    """

    @staticmethod
    def forward(ctx, x: Tensor, w: Tensor) -> Tensor:  # type: ignore[override]
        x_norm, w_norm = x.norm(dim=1, keepdim=True), w.norm(dim=1, keepdim=True)  # [B|C, 1]
        x_hat = x / x_norm.clamp_min(_NORM_EPS)
        sim = (x_hat @ w.T) / w_norm.T.clamp_min(_NORM_EPS)
        ctx.save_for_backward(x_hat, x_norm, w, w_norm, sim)
        return sim

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor | None, Tensor | None]:  # type: ignore[override]
        x_hat, x_norm, w, w_norm, sim = ctx.saved_tensors
        w_scale = w_norm.clamp_min(_NORM_EPS)  # [C, 1]
        scaled = grad / w_scale.T  # [B, C]: G_bc / ‖w_c‖
        grad_x = grad_w = None
        if ctx.needs_input_grad[0]:
            grad_x = _unnormalized_grad(scaled @ w, x_hat, x_norm)  # [B, D]
        if ctx.needs_input_grad[1]:
            radial = (scaled * sim).sum(0).unsqueeze(1) / w_scale  # [C, 1]
            radial = torch.where(w_norm > _NORM_EPS, radial, 0.0)
            grad_w = (scaled.T @ x_hat).addcmul_(w, radial, value=-1.0)  # [C, D]
        return grad_x, grad_w


def _unnormalized_grad(grad_hat: Tensor, hat: Tensor, norm: Tensor) -> Tensor:
    """The gradient at x of a function of x̂ = x / ‖x‖ from its gradient G at x̂: (G - x̂ ⟨G, x̂⟩)
    / ‖x‖, without the projection below F.normalize's eps (where the norm is a constant)."""
    radial = torch.where(norm > _NORM_EPS, (grad_hat * hat).sum(1, keepdim=True), 0.0)
    return (grad_hat - hat * radial) / norm.clamp_min(_NORM_EPS)


class SimilaritySource(nn.Module, ABC):
    """Base class: `forward(embeddings [B, D], labels [B]) -> (sim [B, N], pos_mask, neg_mask)`."""

    paradigm: ClassVar[Paradigm]

    @abstractmethod
    def forward(self, embeddings: Tensor, labels: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Similarities [B, N] and boolean positive / negative masks [B, N]."""

    @staticmethod
    def _check_batch(embeddings: Tensor, labels: Tensor) -> None:
        if embeddings.ndim != 2 or labels.shape != embeddings.shape[:1]:
            raise ValueError(
                f"expected embeddings [B, D] and labels [B], got {tuple(embeddings.shape)} and "
                f"{tuple(labels.shape)}; flatten the embedder output and pass one label per row"
            )


class BatchPairs(SimilaritySource):
    """Pair-wise labels: similarities between the samples of a batch, self-pairs excluded.

    Args:
        normalize: cosine similarity of L2-normalised embeddings (True) or raw inner products
            (False, for N-pair loss which regularises the norms instead).
    """

    paradigm: ClassVar[Paradigm] = "pair-wise"

    def __init__(self, normalize: bool = True) -> None:
        super().__init__()
        self.normalize = normalize

    def forward(self, embeddings: Tensor, labels: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        self._check_batch(embeddings, labels)
        with torch.autocast(embeddings.device.type, enabled=False):
            sim = _Gram.apply(embeddings.to(compute_dtype(embeddings)), self.normalize)  # [B, B]
        pos_mask = (labels[:, None] == labels[None, :]).fill_diagonal_(False)  # [B, B]
        neg_mask = labels[:, None] != labels[None, :]
        return sim, pos_mask, neg_mask

    def extra_repr(self) -> str:
        return f"normalize={self.normalize}"


class ClassProxies(SimilaritySource):
    """Class-level labels: cosine similarity to learnable proxies w_c, one positive per anchor."""

    paradigm: ClassVar[Paradigm] = "class-level"

    def __init__(self, num_classes: int, embedding_dim: int) -> None:
        super().__init__()
        check_class_count(type(self).__name__, num_classes, embedding_dim)
        self.num_classes, self.embedding_dim = num_classes, embedding_dim
        self.proxies = nn.Parameter(torch.randn(num_classes, embedding_dim) / embedding_dim**0.5)

    def forward(self, embeddings: Tensor, labels: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        self._check_batch(embeddings, labels)
        check_class_ids(labels, self.num_classes, type(self).__name__)
        with torch.autocast(embeddings.device.type, enabled=False):
            dtype = compute_dtype(embeddings)
            sim = _Cosine.apply(embeddings.to(dtype), self.proxies.to(dtype))  # [B, C]
        pos_mask = F.one_hot(labels, self.num_classes).bool()  # [B, C]
        return sim, pos_mask, ~pos_mask

    def extra_repr(self) -> str:
        return f"num_classes={self.num_classes}, embedding_dim={self.embedding_dim}"


def masked_logsumexp(x: Tensor, mask: Tensor, dim: int = 1) -> Tensor:
    """logsumexp over the entries where `mask` holds; -inf with zero gradient for empty rows
    (torch.logsumexp of an all -inf row has a NaN gradient, so they are reduced as zeros)."""
    has_any = mask.any(dim, keepdim=True)
    x = torch.where(mask, x, torch.where(has_any, -torch.inf, 0.0))
    return torch.where(has_any.squeeze(dim), torch.logsumexp(x, dim), -torch.inf)


class LazyStats(Mapping[str, Tensor]):
    """`last_stats` computed at their first read, for statistics that cost a product of their own
    (softmax's cosines to the classifier), logged on few steps. `compute` must capture its
    tensors as they are at the forward (a clone of a parameter the optimiser changes in place)."""

    def __init__(self, compute: Callable[[], dict[str, Tensor]]) -> None:
        self._compute: Callable[[], dict[str, Tensor]] | None = compute
        self._values: dict[str, Tensor] = {}

    def _resolved(self) -> dict[str, Tensor]:
        if self._compute is not None:
            self._values, self._compute = self._compute(), None
        return self._values

    def __getitem__(self, key: str) -> Tensor:
        return self._resolved()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._resolved())

    def __len__(self) -> int:
        return len(self._resolved())


@torch.no_grad()
def pair_stats(
    sim: Tensor, pos_mask: Tensor, neg_mask: Tensor, active: Tensor
) -> dict[str, Tensor]:
    """`last_stats` of a loss: mean s_p, mean s_n and the fraction of `active` anchors or pairs."""
    zero = sim.new_zeros(())
    return {
        "sp_mean": torch.where(pos_mask, sim, zero).sum() / pos_mask.sum().clamp_min(1),
        "sn_mean": torch.where(neg_mask, sim, zero).sum() / neg_mask.sum().clamp_min(1),
        "active_fraction": active.to(sim.dtype).mean() if active.numel() else zero,
    }
