"""Triplet loss (Schroff et al., CVPR 2015) on cosine similarities, with three minings.

Each triplet (anchor a, positive p, negative n) gives [s_an - s_ap + margin]₊, or with the soft
margin log(1 + exp(·)). Which triplets count is the mining:

- `batch_hard` (Hermans et al., 2017): per anchor, its hardest positive (lowest s_ap) and
  hardest negative (highest s_an), the γ → ∞ limit of the unified loss (Sun et al., Eq. 3);
  the mean over anchors.
- `semi_hard` (Schroff et al.; TensorFlow Addons' `TripletSemiHardLoss`): per (anchor,
  positive) pair, the most similar negative that is still less similar than the positive, or
  the least similar negative when none is; the mean over positive pairs.
- `all`: every triplet of the batch, the mean over those with a non-zero loss (the triplet
  loss of Musgrave et al.'s "Metric Learning Reality Check", pytorch-metric-learning's
  `TripletMarginLoss` with its default reducer).

Batch-hard mining can collapse every embedding onto one point when most hardest negatives start
above their hardest positives (Xuan et al., ECCV 2020), as frozen ImageNet features do.
"""

from __future__ import annotations

from typing import ClassVar, Literal, get_args

import torch
import torch.nn.functional as F
from torch import Tensor

from losses.base import MetricLoss
from losses.similarity import BatchPairs, Paradigm, compute_dtype, pair_stats

Mining = Literal["batch_hard", "semi_hard", "all"]


def triplet_loss(
    sim: Tensor,
    pos_mask: Tensor,
    neg_mask: Tensor,
    *,
    margin: float,
    soft_margin: bool = False,
    mining: Mining = "batch_hard",
) -> tuple[Tensor, Tensor]:
    """Per anchor, (the sum of its triplets' losses [B], how many the mean counts [B]): the loss
    sum(sums) / sum(counts) is the mean of the module docstring (`all` with the soft margin:
    over every valid triplet, whose loss is never 0)."""
    sim = sim.to(compute_dtype(sim))
    has_neg = neg_mask.any(1, keepdim=True)
    if mining == "batch_hard":
        hardest_pos = torch.where(pos_mask, sim, torch.inf).amin(dim=1, keepdim=True)
        hardest_neg = torch.where(neg_mask, sim, -torch.inf).amax(dim=1, keepdim=True)
        valid = pos_mask.any(1, keepdim=True) & has_neg  # [B, 1]
        # inf - inf would poison softplus' gradient, so invalid terms see 0 before the hinge
        violation = torch.where(valid, hardest_neg - hardest_pos + margin, 0.0)
    elif mining == "semi_hard":
        s_n = sim[:, None, :]  # [B, 1, B]: negatives along the last axis
        below = neg_mask[:, None, :] & (s_n < sim[:, :, None])  # [B, B(p), B(n)]
        easier = torch.where(below, s_n, -torch.inf).amax(dim=2)  # most similar below s_ap
        easiest = torch.where(neg_mask, sim, torch.inf).amin(dim=1, keepdim=True)
        chosen = torch.where(below.any(2), easier, easiest)  # [B, B(p)]
        valid = pos_mask & has_neg
        violation = torch.where(valid, chosen - sim + margin, 0.0)
    elif mining == "all":
        valid = pos_mask[:, :, None] & neg_mask[:, None, :]  # [B, B(p), B(n)]
        violation = torch.where(valid, sim[:, None, :] - sim[:, :, None] + margin, 0.0)
    else:
        raise ValueError(f"mining {mining!r}: choose from {list(get_args(Mining))}")
    loss = torch.where(valid, F.softplus(violation) if soft_margin else F.relu(violation), 0.0)
    counted = valid if soft_margin or mining != "all" else loss > 0
    dims = tuple(range(1, loss.dim()))
    return loss.sum(dims), counted.sum(dims).to(loss.dtype)


class TripletLoss(MetricLoss):
    """Triplet loss on cosine similarities: batch-hard, semi-hard or all triplets.

    Args:
        margin: margin in cosine similarity between a negative and a positive.
        soft_margin: use log(1 + exp(s_an - s_ap + margin)) instead of the hinge (Hermans et al.
            use it with margin = 0).
        mining: which triplets count (module docstring): `batch_hard` (the default), `semi_hard`
            or `all`.
    """

    paradigm: ClassVar[Paradigm] = "pair-wise"
    repr_fields = ("margin", "soft_margin", "mining")

    def __init__(
        self, margin: float = 0.2, soft_margin: bool = False, mining: Mining = "batch_hard"
    ) -> None:
        super().__init__()
        gap = "in [0, 2] (a cosine-similarity gap)"
        typical = "typical values are 0.1-0.3, or 0 with soft_margin=True"
        self.check_arg("margin", margin, 0.0 <= margin <= 2.0, gap, typical)
        if mining not in get_args(Mining):
            raise ValueError(
                f"TripletLoss: mining {mining!r} is not one of {list(get_args(Mining))}"
            )
        self.margin, self.soft_margin, self.mining = margin, soft_margin, mining
        self.source = BatchPairs()

    def forward(self, embeddings: Tensor, labels: Tensor) -> Tensor:
        self.check_batch(embeddings, labels)
        sim, pos_mask, neg_mask = self.source(embeddings, labels)
        sums, counts = triplet_loss(
            sim, pos_mask, neg_mask, margin=self.margin, soft_margin=self.soft_margin,
            mining=self.mining,
        )  # fmt: skip
        self.last_stats = pair_stats(sim, pos_mask, neg_mask, sums.detach() > 0)
        return sums.sum() / counts.sum().clamp_min(1)
