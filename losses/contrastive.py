"""Contrastive loss (Hadsell et al., CVPR 2006) in cosine-similarity form with two margins.

Positive pairs pay [pos_margin - s_p]₊ and negative pairs [s_n - neg_margin]₊; each side is
averaged over its own pairs so that the many negatives of a P-K batch do not drown the positives.
"""

from __future__ import annotations

from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor

from losses.base import MetricLoss
from losses.similarity import BatchPairs, Paradigm, compute_dtype, pair_stats


def contrastive_pair_loss(
    sim: Tensor, pos_mask: Tensor, neg_mask: Tensor, *, pos_margin: float, neg_margin: float
) -> Tensor:
    """Hinge per pair [B, N]: [pos_margin - s]₊ on positives, [s - neg_margin]₊ on negatives."""
    sim = sim.to(compute_dtype(sim))
    pos = torch.where(pos_mask, F.relu(pos_margin - sim), 0.0)
    return torch.where(neg_mask, F.relu(sim - neg_margin), pos)


class ContrastiveLoss(MetricLoss):
    """Contrastive loss: mean positive hinge + mean negative hinge (cosine similarities)."""

    paradigm: ClassVar[Paradigm] = "pair-wise"
    repr_fields = ("pos_margin", "neg_margin")

    def __init__(self, pos_margin: float = 1.0, neg_margin: float = 0.5) -> None:
        super().__init__()
        if not -1.0 <= neg_margin < pos_margin <= 1.0:
            raise ValueError(
                "ContrastiveLoss: need -1 <= neg_margin < pos_margin <= 1 (cosine similarities), "
                f"got pos_margin={pos_margin}, neg_margin={neg_margin}; e.g. 1.0 and 0.5"
            )
        self.pos_margin, self.neg_margin = pos_margin, neg_margin
        self.source = BatchPairs()

    def forward(self, embeddings: Tensor, labels: Tensor) -> Tensor:
        self.check_batch(embeddings, labels)
        sim, pos_mask, neg_mask = self.source(embeddings, labels)
        pair_loss = contrastive_pair_loss(
            sim, pos_mask, neg_mask, pos_margin=self.pos_margin, neg_margin=self.neg_margin
        )
        pairs = pos_mask | neg_mask
        self.last_stats = pair_stats(sim, pos_mask, neg_mask, (pair_loss.detach() > 0)[pairs])
        pos_sum = torch.where(pos_mask, pair_loss, 0.0).sum()
        neg_sum = torch.where(neg_mask, pair_loss, 0.0).sum()
        return pos_sum / pos_mask.sum().clamp_min(1) + neg_sum / neg_mask.sum().clamp_min(1)
