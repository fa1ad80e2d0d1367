"""Multi-similarity loss with its pair mining (Wang et al., CVPR 2019, Eq. 4 and Eq. 6-7).

Mining keeps a negative if s_n + ε > min s_p and a positive if s_p - ε < max s_n (both over the
anchor's pairs); the loss of an anchor with kept pairs on both sides is

    1/α log(1 + Σ_P exp(-α (s_p - λ))) + 1/β log(1 + Σ_N exp(β (s_n - λ)))

and the batch loss is the sum over anchors divided by the batch size, as in the paper's code.
"""

from __future__ import annotations

from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor

from losses.base import MetricLoss
from losses.similarity import BatchPairs, Paradigm, compute_dtype, masked_logsumexp, pair_stats


def mined_pairs(
    sim: Tensor, pos_mask: Tensor, neg_mask: Tensor, *, epsilon: float
) -> tuple[Tensor, Tensor]:
    """Boolean masks [B, N] of the positives and negatives kept by MS mining (Eq. 6-7)."""
    sim = sim.detach()
    min_pos = torch.where(pos_mask, sim, torch.inf).amin(dim=1, keepdim=True)  # [B, 1]
    max_neg = torch.where(neg_mask, sim, -torch.inf).amax(dim=1, keepdim=True)
    return pos_mask & (sim - epsilon < max_neg), neg_mask & (sim + epsilon > min_pos)


def multi_similarity_loss(
    sim: Tensor,
    pos_mask: Tensor,
    neg_mask: Tensor,
    *,
    alpha: float,
    beta: float,
    base: float,
    epsilon: float,
) -> Tensor:
    """Per-anchor MS loss [B]; 0 for anchors left without a mined positive or negative."""
    sim = sim.to(compute_dtype(sim))
    pos_kept, neg_kept = mined_pairs(sim, pos_mask, neg_mask, epsilon=epsilon)
    pos_term = F.softplus(masked_logsumexp(-alpha * (sim - base), pos_kept)) / alpha
    neg_term = F.softplus(masked_logsumexp(beta * (sim - base), neg_kept)) / beta
    return torch.where(pos_kept.any(1) & neg_kept.any(1), pos_term + neg_term, 0.0)


class MultiSimilarityLoss(MetricLoss):
    """Multi-similarity loss; defaults are the paper's (α=2, β=50, λ=`base`=0.5, ε=0.1)."""

    paradigm: ClassVar[Paradigm] = "pair-wise"
    repr_fields = ("alpha", "beta", "base", "epsilon")

    def __init__(
        self, alpha: float = 2.0, beta: float = 50.0, base: float = 0.5, epsilon: float = 0.1
    ) -> None:
        super().__init__()
        for name, value in (("alpha", alpha), ("beta", beta)):
            self.check_arg(name, value, value > 0, "> 0", "the paper uses alpha=2, beta=50")
        rule = "a cosine similarity in [-1, 1]"
        self.check_arg("base (λ)", base, -1.0 <= base <= 1.0, rule, "the paper uses 0.5")
        self.check_arg("epsilon", epsilon, epsilon >= 0, ">= 0", "the paper uses 0.1")
        self.alpha, self.beta, self.base, self.epsilon = alpha, beta, base, epsilon
        self.source = BatchPairs()

    def forward(self, embeddings: Tensor, labels: Tensor) -> Tensor:
        self.check_batch(embeddings, labels)
        sim, pos_mask, neg_mask = self.source(embeddings, labels)
        per_anchor = multi_similarity_loss(
            sim, pos_mask, neg_mask, alpha=self.alpha, beta=self.beta, base=self.base,
            epsilon=self.epsilon,
        )  # fmt: skip
        self.last_stats = pair_stats(sim, pos_mask, neg_mask, per_anchor.detach() > 0)
        return per_anchor.mean()
