"""Lifted structured loss (Song et al., CVPR 2016, Eq. 4) on cosine similarities.

Distances D are replaced by negated similarities -s, so for every positive pair (i, j)

    J_ij = log(Σ_{k ∈ N_i} exp(margin + s_ik) + Σ_{l ∈ N_j} exp(margin + s_jl)) - s_ij

and L = 1 / (2|P|) Σ_{(i,j) ∈ P} [J_ij]₊², the sum running over ordered positive pairs. Each
anchor's negative logsumexp is computed once, so the pair term is a [B, B] broadcast.
"""

from __future__ import annotations

from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor

from losses.base import MetricLoss
from losses.similarity import BatchPairs, Paradigm, compute_dtype, masked_logsumexp, pair_stats


def lifted_structure_pair_loss(
    sim: Tensor, pos_mask: Tensor, neg_mask: Tensor, *, margin: float
) -> Tensor:
    """[J_ij]₊² for every pair [B, B] (0 off the positive pairs); `sim` must be square."""
    sim = sim.to(compute_dtype(sim))
    lse_neg = masked_logsumexp(margin + sim, neg_mask)  # [B]; -inf without negatives
    # log(e^a_i + e^a_j); a pair where both anchors lack negatives would give -inf - -inf
    pair_lse = torch.logaddexp(lse_neg[:, None], lse_neg[None, :])  # [B, B]
    valid = pos_mask & torch.isfinite(pair_lse)
    j = torch.where(valid, pair_lse - sim, 0.0)
    return F.relu(j).square()


class LiftedStructureLoss(MetricLoss):
    """Lifted structured loss over the positive pairs of a batch (pair-wise labels)."""

    paradigm: ClassVar[Paradigm] = "pair-wise"
    repr_fields = ("margin",)

    def __init__(self, margin: float = 1.0) -> None:
        super().__init__()
        self.check_arg("margin", margin, margin >= 0, ">= 0", "Song et al. use 1.0")
        self.margin = margin
        self.source = BatchPairs()

    def forward(self, embeddings: Tensor, labels: Tensor) -> Tensor:
        self.check_batch(embeddings, labels)
        sim, pos_mask, neg_mask = self.source(embeddings, labels)
        pair_loss = lifted_structure_pair_loss(sim, pos_mask, neg_mask, margin=self.margin)
        num_pos = pos_mask.sum()
        self.last_stats = pair_stats(sim, pos_mask, neg_mask, (pair_loss.detach() > 0)[pos_mask])
        # pos_mask holds each unordered pair twice, so Σ_P / (2|P|) = Σ_ordered / (2 · #ordered)
        return pair_loss.sum() / (2 * num_pos.clamp_min(1))
