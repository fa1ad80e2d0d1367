"""Unified loss (Sun et al., CVPR 2020, Eq. 1) and its two neighbours.

    L_uni = log(1 + Σ_i Σ_j exp(γ (s_n^j - s_p^i + m)))
          = softplus(logsumexp_j γ (s_n^j + m) + logsumexp_i (-γ s_p^i))

With class proxies (one s_p) it is AM-Softmax / CosFace with scale γ (Eq. 2), NormFace when m = 0;
with pair-wise labels L_uni / γ tends to the batch-hard triplet loss [max s_n - min s_p + m]₊ as
γ → ∞ (Eq. 3).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from losses.circle import check_margin_and_scale
from losses.similarity import BatchPairs, SimilaritySource, masked_logsumexp, pair_stats


def unified_loss(
    sim: Tensor, pos_mask: Tensor, neg_mask: Tensor, *, m: float, gamma: float
) -> Tensor:
    """Per-anchor unified loss [B] (Eq. 1); 0 for anchors without a positive or a negative."""
    sim = sim.to(torch.promote_types(sim.dtype, torch.float32))
    lse_n = masked_logsumexp(gamma * (sim + m), neg_mask)  # [B]
    lse_p = masked_logsumexp(-gamma * sim, pos_mask)
    return F.softplus(lse_n + lse_p)


class UnifiedLoss(nn.Module):
    """Eq. 1 over pair-wise (default) or class-level similarities; mean over active anchors."""

    def __init__(
        self, m: float = 0.25, gamma: float = 256.0, source: SimilaritySource | None = None
    ) -> None:
        super().__init__()
        check_margin_and_scale(type(self).__name__, m, gamma)
        self.m, self.gamma = m, gamma
        self.source = source if source is not None else BatchPairs()
        self.last_stats: dict[str, Tensor] = {}

    @property
    def labels(self) -> str:
        """ "pair-wise" or "class-level", from the similarity source."""
        return self.source.labels

    def forward(self, embeddings: Tensor, labels: Tensor) -> Tensor:
        sim, pos_mask, neg_mask = self.source(embeddings, labels)
        per_anchor = unified_loss(sim, pos_mask, neg_mask, m=self.m, gamma=self.gamma)
        active = pos_mask.any(1) & neg_mask.any(1)
        self.last_stats = pair_stats(sim, pos_mask, neg_mask, active)
        return per_anchor.sum() / active.sum().clamp_min(1)

    def extra_repr(self) -> str:
        return f"m={self.m}, gamma={self.gamma}"
