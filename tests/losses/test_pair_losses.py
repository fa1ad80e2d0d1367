"""Pair-wise baselines against their papers' formulas written as loops, plus shared properties."""

from __future__ import annotations

import math

import pytest
import torch

from losses import (
    BatchPairs,
    ClassProxies,
    ContrastiveLoss,
    LiftedStructureLoss,
    MultiSimilarityLoss,
    NPairLoss,
    TripletLoss,
)
from losses.circle import circle_loss
from losses.contrastive import contrastive_pair_loss
from losses.lifted import lifted_structure_pair_loss
from losses.multi_similarity import multi_similarity_loss
from losses.npair import npair_pair_loss
from losses.triplet import triplet_loss
from losses.unified import unified_loss


def rows(sim, pos, neg):
    """Per anchor: (its s_p list, its s_n list, its similarity row)."""
    for s, p, n in zip(sim.tolist(), pos.tolist(), neg.tolist(), strict=True):
        s_p = [v for v, f in zip(s, p, strict=True) if f]
        yield s_p, [v for v, f in zip(s, n, strict=True) if f], s


@pytest.fixture
def pairs(pk_batch):
    sim, pos, neg = BatchPairs()(*pk_batch(p=3, k=3, singletons=1, dtype=torch.float64))
    return sim.detach(), pos, neg


def triplets_as_loops(sim, pos, neg, mining: str, soft_margin: bool) -> float:
    """The mean triplet loss written from its papers' definitions, one triplet at a time."""
    terms = []  # (loss, counted) of each triplet the mining keeps
    for s_p, s_n, _ in rows(sim, pos, neg):
        if not s_p or not s_n:
            continue
        if mining == "batch_hard":
            chosen = [(min(s_p), max(s_n))]
        elif mining == "semi_hard":  # per positive: the nearest negative below it, or the farthest
            chosen = [(p, max((n for n in s_n if n < p), default=min(s_n))) for p in s_p]
        else:
            chosen = [(p, n) for p in s_p for n in s_n]
        for p, n in chosen:
            x = n - p + 0.2
            loss = math.log1p(math.exp(x)) if soft_margin else max(x, 0.0)
            terms.append((loss, soft_margin or mining != "all" or loss > 0))
    return sum(t for t, _ in terms) / max(1, sum(c for _, c in terms))


@pytest.mark.parametrize("soft_margin", [False, True])
@pytest.mark.parametrize("mining", ["batch_hard", "semi_hard", "all"])
def test_triplet_equals_its_minings_as_loops(pairs, pk_batch, mining, soft_margin) -> None:
    embeddings, labels = pk_batch(p=3, k=3, singletons=1, dtype=torch.float64)
    loss = TripletLoss(margin=0.2, soft_margin=soft_margin, mining=mining)
    expected = triplets_as_loops(*pairs, mining, soft_margin)
    torch.testing.assert_close(loss(embeddings, labels).item(), expected)
    sums, counts = triplet_loss(*pairs, margin=0.2, soft_margin=soft_margin, mining=mining)
    assert counts.sum() > 0 and sums.sum() > 0  # the batch holds triplets of every kind


def test_semi_hard_takes_the_closest_negative_below_the_positive() -> None:
    # anchor 0: positive at 0.5; negatives at 0.9 (harder), 0.4 (semi-hard), 0.1 (easy)
    sim = torch.tensor([[1.0, 0.5, 0.9, 0.4, 0.1]], dtype=torch.float64)
    pos = torch.tensor([[False, True, False, False, False]])
    neg = torch.tensor([[False, False, True, True, True]])
    sums, counts = triplet_loss(sim, pos, neg, margin=0.2, mining="semi_hard")
    torch.testing.assert_close(sums, torch.tensor([0.4 - 0.5 + 0.2], dtype=torch.float64))
    torch.testing.assert_close(counts, torch.tensor([1.0], dtype=torch.float64))


def test_multi_similarity_equals_paper_with_mining_as_loops(pairs) -> None:
    alpha, beta, base, eps = 2.0, 10.0, 0.1, 0.1
    expected = []
    for s_p, s_n, _ in rows(*pairs):
        kept_p = [s for s in s_p if s_n and s - eps < max(s_n)]
        kept_n = [s for s in s_n if s_p and s + eps > min(s_p)]
        if not kept_p or not kept_n:
            expected.append(0.0)
            continue
        pos_term = math.log(1 + sum(math.exp(-alpha * (s - base)) for s in kept_p)) / alpha
        neg_term = math.log(1 + sum(math.exp(beta * (s - base)) for s in kept_n)) / beta
        expected.append(pos_term + neg_term)
    actual = multi_similarity_loss(*pairs, alpha=alpha, beta=beta, base=base, epsilon=eps)
    torch.testing.assert_close(actual, torch.tensor(expected, dtype=torch.float64))
    assert 0 < actual.count_nonzero() < len(actual)  # mining drops some anchors, keeps others


def test_lifted_structure_equals_song_et_al_as_loops(pairs) -> None:
    sim, pos, neg = pairs
    margin = 0.5
    negatives = [s_n for _, s_n, _ in rows(sim, pos, neg)]
    total, count = 0.0, 0
    for i, j in pos.nonzero().tolist():
        lse = math.log(sum(math.exp(margin + v) for v in negatives[i] + negatives[j]))
        total += max(lse - sim[i, j].item(), 0.0) ** 2
        count += 1
    loss = lifted_structure_pair_loss(sim, pos, neg, margin=margin).sum() / (2 * count)
    assert loss.item() == pytest.approx(total / (2 * count))


def test_npair_equals_sohn_as_loops(pairs) -> None:
    sim, pos, neg = pairs
    expected = torch.zeros_like(sim)
    for i, (_, s_n, _) in enumerate(rows(sim, pos, neg)):
        for j in pos[i].nonzero().flatten().tolist():
            expected[i, j] = math.log(1 + sum(math.exp(v - sim[i, j].item()) for v in s_n))
    torch.testing.assert_close(npair_pair_loss(sim, pos, neg), expected)


def test_contrastive_hinges_by_hand() -> None:
    sim = torch.tensor([[0.9, 0.7, 0.2, 0.6]], dtype=torch.float64)
    pos = torch.tensor([[True, True, False, False]])
    loss = contrastive_pair_loss(sim, pos, ~pos, pos_margin=0.8, neg_margin=0.5)
    torch.testing.assert_close(loss, torch.tensor([[0.0, 0.1, 0.0, 0.1]], dtype=torch.float64))


PAIR_FUNCTIONS = {
    "circle": lambda s, p, n: circle_loss(s, p, n, m=0.25, gamma=32.0),
    "unified": lambda s, p, n: unified_loss(s, p, n, m=0.25, gamma=32.0),
    **{
        f"triplet_{mining}": lambda s, p, n, mining=mining: triplet_loss(
            s, p, n, margin=0.5, mining=mining
        )[0]
        for mining in ("batch_hard", "semi_hard", "all")
    },
    "multi_similarity": lambda s, p, n: multi_similarity_loss(
        s, p, n, alpha=2.0, beta=50.0, base=0.0, epsilon=0.5
    ),
    "lifted": lambda s, p, n: lifted_structure_pair_loss(s, p, n, margin=1.0),
    "npair": npair_pair_loss,
    "contrastive": lambda s, p, n: contrastive_pair_loss(s, p, n, pos_margin=1.0, neg_margin=-0.5),
}


@pytest.mark.parametrize("name", sorted(PAIR_FUNCTIONS))
def test_gradient_signs(name: str, pairs) -> None:
    sim, pos, neg = pairs
    sim = sim.clone().requires_grad_()
    PAIR_FUNCTIONS[name](sim, pos, neg).sum().backward()
    assert (sim.grad[pos] <= 0).all() and (sim.grad[neg] >= 0).all()
    assert sim.grad.abs().sum() > 0


LOSS_MODULES = [
    TripletLoss(),
    TripletLoss(mining="semi_hard"),
    TripletLoss(mining="all", soft_margin=True),
    MultiSimilarityLoss(),
    LiftedStructureLoss(),
    NPairLoss(),
    ContrastiveLoss(),
]


@pytest.mark.parametrize("loss", LOSS_MODULES, ids=lambda loss: type(loss).__name__)
def test_permutation_invariance_and_singletons(loss, pk_batch) -> None:
    embeddings, labels = pk_batch(p=4, k=3, singletons=2, dtype=torch.float64)
    perm = torch.randperm(len(labels), generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(loss(embeddings[perm], labels[perm]), loss(embeddings, labels))
    singles = pk_batch(p=0, singletons=4)[0].requires_grad_()
    value = loss(singles, torch.arange(4))
    value.backward()
    assert torch.isfinite(value) and torch.isfinite(singles.grad).all()


@pytest.mark.parametrize(
    ("factory", "match"),
    [
        (lambda: TripletLoss(margin=-0.1), "margin must be in"),
        (lambda: TripletLoss(mining="hardest"), "mining 'hardest' is not one of"),
        (lambda: MultiSimilarityLoss(alpha=0), "alpha must be > 0"),
        (lambda: MultiSimilarityLoss(beta=-1), "beta must be > 0"),
        (lambda: MultiSimilarityLoss(base=2), "base"),
        (lambda: MultiSimilarityLoss(epsilon=-0.1), "epsilon"),
        (lambda: LiftedStructureLoss(margin=-1), "margin must be >= 0"),
        (lambda: NPairLoss(l2_reg=-1), "l2_reg"),
        (lambda: ContrastiveLoss(pos_margin=0.2, neg_margin=0.5), "neg_margin < pos_margin"),
    ],
)
def test_constructor_rejects_bad_hyper_parameters(factory, match) -> None:
    with pytest.raises(ValueError, match=match):
        factory()


@pytest.mark.parametrize("source", [BatchPairs(), ClassProxies(4, 3)], ids=type)
def test_source_rejects_mismatched_shapes(source) -> None:
    # losses check their batch first (test_contract.py); a source used alone checks shapes too
    with pytest.raises(ValueError, match="expected embeddings"):
        source(torch.randn(4, 3), torch.arange(3))
