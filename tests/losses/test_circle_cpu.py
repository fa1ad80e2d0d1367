"""The compiled CPU passes of the Circle loss against its torch formulation."""

from __future__ import annotations

import pytest
import torch

from losses.circle import _CircleLossFunction, circle_weights
from losses.similarity import BatchPairs


def both_paths(sim: torch.Tensor, pos: torch.Tensor, neg: torch.Tensor, m: float, gamma: float):
    """(loss, d loss.sum() / d sim) by the compiled passes (alpha=None) and by torch."""
    out = []
    for compiled in (True, False):
        s = sim.detach().clone().requires_grad_()
        alpha = None if compiled else circle_weights(s, pos, m=m)
        loss = _CircleLossFunction.apply(s, alpha, pos, neg, m, gamma)
        (loss * torch.linspace(0.5, 1.5, len(loss), dtype=loss.dtype)).sum().backward()
        out.append((loss.detach(), s.grad))
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(("m", "gamma"), [(0.25, 256.0), (0.4, 80.0), (0.0, 2.0)])
def test_compiled_passes_equal_the_torch_formulation(dtype, m: float, gamma: float, pk_batch):
    embeddings, labels = pk_batch(p=6, k=4, singletons=3, dtype=dtype)
    sim, pos, neg = BatchPairs()(embeddings, labels)
    (loss, grad), (loss_t, grad_t) = both_paths(sim, pos, neg, m, gamma)
    assert loss.dtype == dtype and grad.dtype == dtype
    torch.testing.assert_close(loss, loss_t)
    torch.testing.assert_close(grad, grad_t)
    assert (loss[~(pos.any(1) & neg.any(1))] == 0).all()  # anchors without a positive


def test_compiled_passes_apply_to_the_pair_wise_source(pk_batch) -> None:
    sim, pos, neg = BatchPairs()(*pk_batch(p=3, k=3, singletons=2))
    assert _CircleLossFunction.compiles(sim, pos, neg)
    assert not _CircleLossFunction.compiles(sim.half(), pos, neg)  # promoted by circle_loss


def test_overlapping_or_strided_masks_take_the_torch_path(pk_batch) -> None:
    """A pair in both groups, or masks that are views, still give the torch formulation."""
    sim, pos, neg = BatchPairs()(*pk_batch(p=4, k=3, dtype=torch.float64))
    both = neg.clone()
    both[0, 1] = True  # (0, 1) are positives of each other: now in both groups
    for p, n in ((pos, both), (pos.T.contiguous().T, neg)):
        (loss, grad), (loss_t, grad_t) = both_paths(sim, p, n, 0.25, 16.0)
        torch.testing.assert_close(loss, loss_t)
        torch.testing.assert_close(grad, grad_t)
