"""Unified loss (Sun et al., CVPR 2020, Eq. 1) and its two neighbours.

    L_uni = log(1 + Σ_i Σ_j exp(γ (s_n^j - s_p^i + m)))
          = softplus(logsumexp_j γ (s_n^j + m) + logsumexp_i (-γ s_p^i))

With class proxies (one s_p) it is AM-Softmax / CosFace with scale γ (Eq. 2), NormFace when m = 0;
with pair-wise labels L_uni / γ tends to the batch-hard triplet loss [max s_n - min s_p + m]₊ as
γ → ∞ (Eq. 3).
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from losses.base import PairSimilarityLoss
from losses.similarity import compute_dtype, masked_logsumexp


def unified_loss(
    sim: Tensor, pos_mask: Tensor, neg_mask: Tensor, *, m: float, gamma: float
) -> Tensor:
    """Per-anchor unified loss [B] (Eq. 1); 0 for anchors without a positive or a negative."""
    sim = sim.to(compute_dtype(sim))
    lse_n = masked_logsumexp(gamma * (sim + m), neg_mask)  # [B]
    lse_p = masked_logsumexp(-gamma * sim, pos_mask)
    return F.softplus(lse_n + lse_p)


class UnifiedLoss(PairSimilarityLoss):
    """Eq. 1 over pair-wise (default) or class-level similarities; mean over active anchors."""

    per_anchor_loss = staticmethod(unified_loss)
