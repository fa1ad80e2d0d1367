"""Circle loss (Sun et al., CVPR 2020): Eq. 6 with the weights of Eq. 5 and the margins of Eq. 8.

With O_p = 1 + m, O_n = -m, Δ_p = 1 - m, Δ_n = m, the self-paced weights are
α_p = [1 + m - s_p]₊ and α_n = [s_n + m]₊ (Eq. 5, no gradient through them), and

    L = log(1 + Σ_j exp(γ α_n^j (s_n^j - Δ_n)) · Σ_i exp(-γ α_p^i (s_p^i - Δ_p)))      (Eq. 6)

`circle_loss` is that equation with autograd's gradient: the reference. `CircleLoss` trains with
`fast_circle_loss`, the same values with the closed-form backward of Eq. 9/10 (α constant):
∂L/∂s_n = σ(z) softmax_n · γ α_n and ∂L/∂s_p = -σ(z) softmax_p · γ α_p, z the softplus'
argument, each softmax over its group's logits; on CPU float tensors a compiled pass per row
(`losses._circle_cpu`) computes it. `tests/losses/test_circle.py` holds the two to each other.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from losses.base import PairSimilarityLoss
from losses.similarity import compute_dtype, masked_logsumexp


def circle_loss(
    sim: Tensor, pos_mask: Tensor, neg_mask: Tensor, *, m: float, gamma: float
) -> Tensor:
    """Eq. 6 per anchor [B] from sim [B, N] and bool masks [B, N]; 0 if no s_p or no s_n."""
    sim = sim.to(compute_dtype(sim))  # fp16 overflows at γ=256
    alpha_p = (1 + m - sim).clamp_min(0).detach()  # Eq. 5
    alpha_n = (sim + m).clamp_min(0).detach()
    logit_p = -gamma * alpha_p * (sim - (1 - m))  # Δ_p = 1 - m
    logit_n = gamma * alpha_n * (sim - m)  # Δ_n = m
    # log(1 + Σ_n Σ_p) = softplus(logsumexp_n + logsumexp_p); an empty group gives -inf, so 0
    return F.softplus(masked_logsumexp(logit_n, neg_mask) + masked_logsumexp(logit_p, pos_mask))


def _run_compiled(kernel: str, sim: Tensor, *args: Tensor | float) -> bool | None:
    """`losses._circle_cpu.<kernel>` (imported at the first call, not at import) on numpy views
    of the tensors, which it writes in place, with numba's threads matched to torch's. The
    floats come as numpy scalars of `sim`'s dtype, so the passes' arithmetic stays in it (a
    Python float would promote float32 to float64 in numba)."""
    from core.threads import like_torch
    from losses import _circle_cpu

    dtype = np.float32 if sim.dtype == torch.float32 else np.float64
    arrays = [a.detach().numpy() if isinstance(a, Tensor) else dtype(a) for a in (sim, *args)]
    with like_torch():
        return getattr(_circle_cpu, kernel)(*arrays)


def _group_exp(logits: Tensor, mask: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """exp(logit - row max) over `mask` (0 elsewhere) [B, N], its row sums [B] and row maxes [B]."""
    masked = torch.where(mask, logits, -torch.inf)
    row_max = masked.amax(dim=1, keepdim=True)
    row_max = torch.where(torch.isfinite(row_max), row_max, 0.0)  # rows with no entry
    exps = masked.sub_(row_max).exp_()
    return exps, exps.sum(dim=1), row_max.squeeze(1)


class _CircleLossFunction(torch.autograd.Function):
    """Per-anchor Circle loss [B] given the weights α [B, N] as constants, closed-form backward.

    The forward keeps both groups' exponentials, so the backward is three elementwise passes.
    `alpha=None` computes Eq. 5's weights here, or in the compiled passes where they apply.
    """

    @staticmethod
    def forward(ctx, sim, alpha, pos_mask, neg_mask, m: float, gamma: float):  # type: ignore[override]
        ctx.gamma, ctx.m = gamma, m
        if alpha is None and _CircleLossFunction.compiles(sim, pos_mask, neg_mask):
            exps = torch.empty_like(sim)  # [B, N]
            sums_p, sums_n, z = (sim.new_empty(sim.shape[0]) for _ in range(3))
            disjoint = _run_compiled(
                "forward", sim, pos_mask, neg_mask, 1 - m, 1 + m, m, gamma, exps, sums_p, sums_n, z
            )
            if disjoint:
                ctx.compiled = True
                ctx.save_for_backward(sim, pos_mask, neg_mask, exps, sums_p, sums_n, z)
                return F.softplus(z)
        if alpha is None:
            alpha = circle_weights(sim, pos_mask, m=m)
        ctx.compiled = False
        # -γ α_p (s_p - Δ_p) on positives, γ α_n (s_n - Δ_n) on negatives; [B, N]
        logits = torch.where(pos_mask, (1 - m) - sim, sim - m).mul_(alpha).mul_(gamma)
        exp_p, sum_p, max_p = _group_exp(logits, pos_mask)
        exp_n, sum_n, max_n = _group_exp(logits, neg_mask)
        # z = logsumexp_p + logsumexp_n; -inf (log 0) for rows without a positive or a negative,
        # where softplus(-inf) = 0 and σ(-inf) = 0 give a zero loss and a zero gradient.
        z = sum_p.log() + max_p + sum_n.log() + max_n  # [B]
        ctx.save_for_backward(exp_p, exp_n, alpha, sum_p, sum_n, z)
        return F.softplus(z)

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        *saved, sum_p, sum_n, z = ctx.saved_tensors
        coef = grad * torch.sigmoid(z) * ctx.gamma  # [B]
        # Eq. 9/10: softmax within each group times γ α; a non-empty group has sum >= 1.
        coef_p, coef_n = -coef / sum_p.clamp_min(1), coef / sum_n.clamp_min(1)
        if ctx.compiled:
            sim, pos_mask, neg_mask, exps = saved
            grad_sim = torch.empty_like(sim)
            _run_compiled(
                "backward", sim, pos_mask, neg_mask, 1 + ctx.m, ctx.m, exps, coef_p.contiguous(),
                coef_n.contiguous(), grad_sim,
            )  # fmt: skip
        else:
            exp_p, exp_n, alpha = saved
            grad_sim = exp_n * coef_n[:, None]
            grad_sim.addcmul_(exp_p, coef_p[:, None]).mul_(alpha)
        return grad_sim, None, None, None, None, None

    @staticmethod
    def compiles(sim: Tensor, pos_mask: Tensor, neg_mask: Tensor) -> bool:
        """Whether the compiled CPU passes apply: CPU float32/float64 [B, N], contiguous, and
        bool masks of the same shape."""
        return (
            sim.device.type == "cpu"
            and sim.dtype in (torch.float32, torch.float64)
            and sim.ndim == 2
            and pos_mask.shape == neg_mask.shape == sim.shape
            and pos_mask.dtype == neg_mask.dtype == torch.bool
            and all(t.is_contiguous() for t in (sim, pos_mask, neg_mask))
        )


def circle_weights(sim: Tensor, pos_mask: Tensor, *, m: float) -> Tensor:
    """Self-paced weights of Eq. 5 [B, N]: α_p = [1 + m - s]₊ on positives, α_n = [s + m]₊ else."""
    with torch.no_grad():
        return torch.where(pos_mask, (1 + m) - sim, sim + m).clamp_min_(0)


def fast_circle_loss(
    sim: Tensor, pos_mask: Tensor, neg_mask: Tensor, *, m: float, gamma: float
) -> Tensor:
    """`circle_loss`'s values [B], with the closed-form backward (and the compiled CPU pass)."""
    sim = sim.to(compute_dtype(sim))  # fp16 overflows at γ=256
    return _CircleLossFunction.apply(sim, None, pos_mask, neg_mask, m, gamma)


class CircleLoss(PairSimilarityLoss):
    """Circle loss over pair-wise (default) or class-level similarities, chosen by `source`;
    the mean over anchors with a positive and a negative (0 without any)."""

    per_anchor_loss = staticmethod(fast_circle_loss)
