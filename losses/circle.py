"""Circle loss (Sun et al., CVPR 2020): Eq. 6 with the weights of Eq. 5 and the margins of Eq. 8.

With O_p = 1 + m, O_n = -m, Δ_p = 1 - m, Δ_n = m, the self-paced weights are
α_p = [1 + m - s_p]₊ and α_n = [s_n + m]₊ (Eq. 5, no gradient through them), and

    L = log(1 + Σ_j exp(γ α_n^j (s_n^j - Δ_n)) · Σ_i exp(-γ α_p^i (s_p^i - Δ_p)))      (Eq. 6)

The backward pass is the closed form of Eq. 9/10, α being constants as in the paper:
∂L/∂s_n = σ(z) softmax_n · γ α_n and ∂L/∂s_p = -σ(z) softmax_p · γ α_p, where z is the argument
of the softplus and each softmax runs over the logits of its group.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from losses.base import PairSimilarityLoss


def _group_exp(logits: Tensor, mask: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """exp(logit - row max) over `mask` (0 elsewhere) [B, N], its row sums [B] and row maxes [B]."""
    masked = torch.where(mask, logits, -torch.inf)
    row_max = masked.amax(dim=1, keepdim=True)
    row_max = torch.where(torch.isfinite(row_max), row_max, 0.0)  # rows with no entry
    exps = masked.sub_(row_max).exp_()
    return exps, exps.sum(dim=1), row_max.squeeze(1)


class _CircleLossFunction(torch.autograd.Function):
    """Per-anchor Circle loss [B] given the weights α [B, N] as constants, closed-form backward.

    The forward pass keeps the exponentials of both logsumexps, so the backward pass is three
    elementwise passes instead of autograd's recomputation through logsumexp and torch.where.
    """

    @staticmethod
    def forward(ctx, sim, alpha, pos_mask, neg_mask, m: float, gamma: float):  # type: ignore[override]
        # -γ α_p (s_p - Δ_p) on positives, γ α_n (s_n - Δ_n) on negatives; [B, N]
        logits = torch.where(pos_mask, (1 - m) - sim, sim - m).mul_(alpha).mul_(gamma)
        exp_p, sum_p, max_p = _group_exp(logits, pos_mask)
        exp_n, sum_n, max_n = _group_exp(logits, neg_mask)
        # z = logsumexp_p + logsumexp_n; -inf (log 0) for rows without a positive or a negative,
        # where softplus(-inf) = 0 and σ(-inf) = 0 give a zero loss and a zero gradient.
        z = sum_p.log() + max_p + sum_n.log() + max_n  # [B]
        ctx.save_for_backward(exp_p, exp_n, sum_p, sum_n, alpha, z)
        ctx.gamma = gamma
        return F.softplus(z)

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        exp_p, exp_n, sum_p, sum_n, alpha, z = ctx.saved_tensors
        coef = grad * torch.sigmoid(z) * ctx.gamma  # [B]
        # Eq. 9/10: softmax within each group times γ α; a non-empty group has sum >= 1.
        grad_sim = exp_n * (coef / sum_n.clamp_min(1))[:, None]
        grad_sim.addcmul_(exp_p, (-coef / sum_p.clamp_min(1))[:, None]).mul_(alpha)
        return grad_sim, None, None, None, None, None


def circle_weights(sim: Tensor, pos_mask: Tensor, *, m: float) -> Tensor:
    """Self-paced weights of Eq. 5 [B, N]: α_p = [1 + m - s]₊ on positives, α_n = [s + m]₊ else."""
    with torch.no_grad():
        return torch.where(pos_mask, (1 + m) - sim, sim + m).clamp_min_(0)


def circle_loss(
    sim: Tensor, pos_mask: Tensor, neg_mask: Tensor, *, m: float, gamma: float
) -> Tensor:
    """Per-anchor Circle loss [B] from sim [B, N] and bool masks [B, N]; 0 if no s_p or no s_n."""
    sim = sim.to(torch.promote_types(sim.dtype, torch.float32))  # fp16 overflows at γ=256
    alpha = circle_weights(sim, pos_mask, m=m)
    return _CircleLossFunction.apply(sim, alpha, pos_mask, neg_mask, m, gamma)


class CircleLoss(PairSimilarityLoss):
    """Circle loss over pair-wise (default) or class-level similarities, chosen by `source`.

    The loss is the mean over anchors that have at least one positive and one negative; a batch
    without any such anchor gives 0 (with a gradient of zeros).
    """

    per_anchor_loss = staticmethod(circle_loss)
