"""Batch-hard triplet loss (Hermans et al., 2017) on cosine similarities.

Per anchor, the hardest positive (lowest s_p) and hardest negative (highest s_n) give
[max s_n - min s_p + margin]₊, the γ → ∞ limit of the unified loss (Sun et al., Eq. 3). The
soft-margin variant replaces the hinge by log(1 + exp(·)).
"""

from __future__ import annotations

from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor

from losses.base import MetricLoss
from losses.similarity import BatchPairs, Paradigm, compute_dtype, pair_stats


def triplet_loss(
    sim: Tensor, pos_mask: Tensor, neg_mask: Tensor, *, margin: float, soft_margin: bool = False
) -> Tensor:
    """Per-anchor batch-hard triplet loss [B]; 0 for anchors without a positive or a negative."""
    sim = sim.to(compute_dtype(sim))
    hardest_pos = torch.where(pos_mask, sim, torch.inf).amin(dim=1)  # [B]
    hardest_neg = torch.where(neg_mask, sim, -torch.inf).amax(dim=1)
    active = pos_mask.any(1) & neg_mask.any(1)
    # inf - inf would poison softplus' gradient, so inactive anchors see 0 before the hinge
    violation = torch.where(active, hardest_neg - hardest_pos + margin, 0.0)
    loss = F.softplus(violation) if soft_margin else F.relu(violation)
    return torch.where(active, loss, 0.0)


class TripletLoss(MetricLoss):
    """Batch-hard triplet loss; mean over anchors that have a positive and a negative.

    Args:
        margin: margin in cosine similarity between the hardest negative and hardest positive.
        soft_margin: use log(1 + exp(s_n - s_p + margin)) instead of the hinge (Hermans et al.
            use it with margin = 0).
    """

    paradigm: ClassVar[Paradigm] = "pair-wise"

    def __init__(self, margin: float = 0.2, soft_margin: bool = False) -> None:
        super().__init__()
        if not 0.0 <= margin <= 2.0:
            raise ValueError(
                f"TripletLoss: margin must be in [0, 2] (a cosine-similarity gap), got {margin}; "
                "typical values are 0.1-0.3, or 0 with soft_margin=True"
            )
        self.margin, self.soft_margin = margin, soft_margin
        self.source = BatchPairs()

    def forward(self, embeddings: Tensor, labels: Tensor) -> Tensor:
        self.check_batch(embeddings, labels)
        sim, pos_mask, neg_mask = self.source(embeddings, labels)
        per_anchor = triplet_loss(
            sim, pos_mask, neg_mask, margin=self.margin, soft_margin=self.soft_margin
        )
        active = pos_mask.any(1) & neg_mask.any(1)
        self.last_stats = pair_stats(sim, pos_mask, neg_mask, per_anchor.detach() > 0)
        return per_anchor.sum() / active.sum().clamp_min(1)

    def extra_repr(self) -> str:
        return f"margin={self.margin}, soft_margin={self.soft_margin}"
