"""Unified loss: Eq. 1, its AM-Softmax / NormFace form (Eq. 2) and its triplet limit (Eq. 3)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from losses import BatchPairs, ClassProxies, CosFaceLoss, NormFaceLoss, UnifiedLoss
from losses.triplet import triplet_loss
from losses.unified import unified_loss


def test_unified_loss_equals_eq1_written_as_loops(pk_batch) -> None:
    sim, pos, neg = BatchPairs()(*pk_batch(p=3, k=3, singletons=1, dtype=torch.float64))
    m, gamma = 0.25, 4.0
    expected = []
    for s, p, n in zip(sim.tolist(), pos.tolist(), neg.tolist(), strict=True):
        s_p = [v for v, is_pos in zip(s, p, strict=True) if is_pos]
        s_n = [v for v, is_neg in zip(s, n, strict=True) if is_neg]
        total = sum(math.exp(gamma * (sn - sp + m)) for sp in s_p for sn in s_n)
        expected.append(math.log(1 + total))
    actual = unified_loss(sim, pos, neg, m=m, gamma=gamma)
    torch.testing.assert_close(actual, torch.tensor(expected, dtype=torch.float64))


@pytest.mark.parametrize("m", [0.0, 0.35])
def test_unified_loss_with_class_proxies_is_am_softmax_eq2(m: float, pk_batch) -> None:
    embeddings, labels = pk_batch(p=6, k=2, dtype=torch.float64)
    gamma = 16.0
    unified = UnifiedLoss(m=m, gamma=gamma, source=ClassProxies(6, 8)).double()
    cosine = F.normalize(embeddings, dim=1) @ F.normalize(unified.source.proxies, dim=1).T
    am_softmax = F.cross_entropy(gamma * (cosine - m * F.one_hot(labels, 6)), labels)
    torch.testing.assert_close(unified(embeddings, labels), am_softmax)
    cosface = CosFaceLoss(6, 8, m=m, s=gamma).double()
    cosface.source.load_state_dict(unified.source.state_dict())
    torch.testing.assert_close(cosface(embeddings, labels), am_softmax)
    if m == 0.0:
        normface = NormFaceLoss(6, 8, scale=gamma).double()
        normface.source.load_state_dict(unified.source.state_dict())
        torch.testing.assert_close(normface(embeddings, labels), am_softmax)


def test_unified_loss_over_gamma_tends_to_batch_hard_triplet_eq3(pk_batch) -> None:
    sim, pos, neg = BatchPairs()(*pk_batch(p=4, k=3, dtype=torch.float64, seed=3))
    m = 0.3
    triplet = triplet_loss(sim, pos, neg, margin=m)[0]  # batch-hard: one term per anchor
    gaps = [
        (unified_loss(sim, pos, neg, m=m, gamma=gamma) / gamma - triplet).abs().max().item()
        for gamma in (10.0, 100.0, 1000.0, 10000.0)
    ]
    assert gaps == sorted(gaps, reverse=True) and gaps[-1] < 1e-3
    assert triplet.gt(0).any()  # the limit is not trivially 0


def test_anchor_without_negative_contributes_nothing() -> None:
    embeddings = torch.eye(3, dtype=torch.float64)
    loss = UnifiedLoss(m=0.25, gamma=8.0)(embeddings.requires_grad_(), torch.zeros(3, dtype=int))
    loss.backward()
    assert loss.item() == 0.0 and torch.isfinite(embeddings.grad).all()


@pytest.mark.parametrize(
    ("kwargs", "match"), [({"m": 1.5}, "m must be in"), ({"gamma": -1}, "gamma")]
)
def test_constructor_rejects_bad_hyper_parameters(kwargs, match) -> None:
    with pytest.raises(ValueError, match=match):
        UnifiedLoss(**kwargs)
