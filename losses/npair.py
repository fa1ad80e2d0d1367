"""Multi-class N-pair loss after Sohn (NeurIPS 2016, Eq. 7) on inner products, with his L2 penalty.

For every ordered positive pair (i, j) of a P-K batch: log(1 + Σ_{k ∈ N_i} exp(f_i·f_k - f_i·f_j)),
where N_i is every sample of another class, averaged over the positive pairs. Sohn regularises
the embedding norms instead of normalising them, so the source uses raw inner products and the
loss adds l2_reg · mean ||f_i||².

Not Sohn's batch construction, (1/N) Σ_i log(1 + Σ_{j≠i} exp(f_i·f_j⁺ - f_i·f_i⁺)) over N pairs of
N classes: here all K(K - 1) ordered pairs of a class are anchors and all (P - 1)·K other-class
samples are negatives, so the same P-K batches feed every pair loss.
"""

from __future__ import annotations

from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor

from losses.base import MetricLoss
from losses.similarity import BatchPairs, Paradigm, compute_dtype, masked_logsumexp, pair_stats


def npair_pair_loss(sim: Tensor, pos_mask: Tensor, neg_mask: Tensor) -> Tensor:
    """log(1 + Σ_N exp(s_in - s_ij)) for every pair [B, N], 0 off the positive pairs."""
    sim = sim.to(compute_dtype(sim))
    lse_neg = masked_logsumexp(sim, neg_mask)  # [B]; -inf without negatives
    return torch.where(pos_mask, F.softplus(lse_neg[:, None] - sim), 0.0)


class NPairLoss(MetricLoss):
    """N-pair loss over every ordered positive pair of a P-K batch, plus Sohn's L2 penalty."""

    paradigm: ClassVar[Paradigm] = "pair-wise"
    repr_fields = ("l2_reg",)

    def __init__(self, l2_reg: float = 0.002) -> None:
        super().__init__()
        self.check_arg("l2_reg", l2_reg, l2_reg >= 0, ">= 0", "Sohn uses 0.002 (0 disables it)")
        self.l2_reg = l2_reg
        self.source = BatchPairs(normalize=False)

    def forward(self, embeddings: Tensor, labels: Tensor) -> Tensor:
        self.check_batch(embeddings, labels)
        sim, pos_mask, neg_mask = self.source(embeddings, labels)
        pair_loss = npair_pair_loss(sim, pos_mask, neg_mask)
        active = pos_mask & neg_mask.any(1, keepdim=True)
        self.last_stats = pair_stats(sim, pos_mask, neg_mask, active[pos_mask])
        norms = embeddings.to(compute_dtype(embeddings)).square().sum(1)  # [B]
        return pair_loss.sum() / active.sum().clamp_min(1) + self.l2_reg * norms.mean()
