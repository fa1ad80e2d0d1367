"""Circle loss: Eq. 6 by loops, Eq. 8's circle, the closed-form gradient and its numerics."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

from losses import BatchPairs, CircleLoss, ClassProxies
from losses.circle import _CircleLossFunction, circle_loss, circle_weights, fast_circle_loss
from losses.similarity import _Cosine, _Gram


def eq6_by_loops(sim: Tensor, pos: Tensor, neg: Tensor, m: float, gamma: float) -> Tensor:
    """Eq. 6 for one anchor with Eq. 5's weights and Eq. 8's O_p, O_n, Δ_p, Δ_n."""
    s_p = [float(s) for s, is_pos in zip(sim, pos, strict=True) if is_pos]
    s_n = [float(s) for s, is_neg in zip(sim, neg, strict=True) if is_neg]
    if not s_p or not s_n:
        return torch.tensor(0.0, dtype=torch.float64)
    sum_n = sum(math.exp(gamma * max(s + m, 0.0) * (s - m)) for s in s_n)
    sum_p = sum(math.exp(-gamma * max(1 + m - s, 0.0) * (s - (1 - m))) for s in s_p)
    return torch.tensor(math.log(1 + sum_n * sum_p), dtype=torch.float64)


@pytest.mark.parametrize(("m", "gamma"), [(0.25, 2.0), (0.4, 8.0)])
def test_circle_loss_equals_eq6_written_as_loops_pair_wise(m, gamma, pk_batch) -> None:
    sim, pos, neg = BatchPairs()(*pk_batch(p=4, k=3, singletons=2, dtype=torch.float64))
    expected = torch.stack(
        [eq6_by_loops(*row, m, gamma) for row in zip(sim, pos, neg, strict=True)]
    )
    torch.testing.assert_close(circle_loss(sim, pos, neg, m=m, gamma=gamma), expected)


@pytest.mark.parametrize(("m", "gamma"), [(0.25, 2.0), (0.4, 8.0)])
def test_circle_loss_equals_eq6_written_as_loops_class_level(m, gamma, pk_batch) -> None:
    embeddings, labels = pk_batch(p=5, k=2, dtype=torch.float64)
    sim, pos, neg = ClassProxies(5, 8).double()(embeddings, labels)
    sim = sim.detach()
    expected = torch.stack(
        [eq6_by_loops(*row, m, gamma) for row in zip(sim, pos, neg, strict=True)]
    )
    torch.testing.assert_close(circle_loss(sim, pos, neg, m=m, gamma=gamma), expected)


def test_closed_form_backward_passes_gradcheck(pk_batch) -> None:
    sim, pos, neg = BatchPairs()(*pk_batch(p=3, k=3, singletons=2, dtype=torch.float64))
    sim = sim.detach().requires_grad_()
    alpha = circle_weights(sim, pos, m=0.25)
    torch.autograd.gradcheck(
        lambda s: _CircleLossFunction.apply(s, alpha, pos, neg, 0.25, 4.0), (sim,)
    )


@pytest.mark.parametrize("normalize", [True, False])
def test_gram_backward_passes_gradcheck(normalize: bool, pk_batch) -> None:
    x = pk_batch(p=2, k=2, dim=3, dtype=torch.float64)[0].requires_grad_()
    torch.autograd.gradcheck(lambda x: _Gram.apply(x, normalize), (x,))


def test_gram_of_a_zero_embedding_matches_f_normalize() -> None:
    x = torch.tensor([[0.0, 0.0], [3.0, 4.0]], dtype=torch.float64, requires_grad=True)
    ref = x.detach().clone().requires_grad_()
    weights = torch.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=torch.float64)
    (_Gram.apply(x, True) * weights).sum().backward()
    x_hat = torch.nn.functional.normalize(ref, dim=1)
    ((x_hat @ x_hat.T) * weights).sum().backward()
    torch.testing.assert_close(x.grad, ref.grad)


def test_cosine_to_proxies_passes_gradcheck(pk_batch) -> None:
    x = pk_batch(p=2, k=2, dim=3, dtype=torch.float64)[0].requires_grad_()
    w = torch.randn(5, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    torch.autograd.gradcheck(_Cosine.apply, (x, w.requires_grad_()))


def test_cosine_to_proxies_matches_f_normalize_in_values_and_gradients_at_zero_rows() -> None:
    x = torch.tensor([[0.0, 0.0], [3.0, 4.0], [1.0, -2.0]], requires_grad=True)
    w = torch.tensor([[1.0, 2.0], [0.0, 0.0], [-3.0, 0.5], [2.0, 2.0]], requires_grad=True)
    ref_x, ref_w = (t.detach().clone().requires_grad_() for t in (x, w))
    weights = torch.arange(12.0).reshape(3, 4)
    sim = _Cosine.apply(x, w)
    ref = F.normalize(ref_x, dim=1) @ F.normalize(ref_w, dim=1).T
    torch.testing.assert_close(sim, ref)
    (sim * weights).sum().backward()
    (ref * weights).sum().backward()
    torch.testing.assert_close(x.grad, ref_x.grad)
    torch.testing.assert_close(w.grad, ref_w.grad)


def test_closed_form_gradient_equals_autograd_with_detached_weights(pk_batch) -> None:
    sim, pos, neg = BatchPairs()(*pk_batch(p=4, k=3, singletons=1, dtype=torch.float64))
    m, gamma = 0.25, 16.0
    mine = sim.detach().requires_grad_()
    circle_loss(mine, pos, neg, m=m, gamma=gamma).sum().backward()
    ref = sim.detach().requires_grad_()
    alpha_p = (1 + m - ref).clamp_min(0).detach()
    alpha_n = (ref + m).clamp_min(0).detach()
    logit_p = torch.where(pos, -gamma * alpha_p * (ref - (1 - m)), -torch.inf)
    logit_n = torch.where(neg, gamma * alpha_n * (ref - m), -torch.inf)
    active = pos.any(1) & neg.any(1)
    z = torch.where(active, torch.logsumexp(logit_p, 1) + torch.logsumexp(logit_n, 1), -torch.inf)
    torch.nn.functional.softplus(z).sum().backward()
    torch.testing.assert_close(mine.grad, ref.grad)


@pytest.mark.parametrize("m", [0.25, 0.4])
def test_decision_boundary_is_the_circle_of_eq8(m: float) -> None:
    # one s_p and one s_n on s_n² + (s_p - 1)² = 2m², inside the region where α_p, α_n >= 0
    theta = torch.linspace(-math.pi / 2 - 0.7, -0.05, 9, dtype=torch.float64)
    radius = math.sqrt(2) * m
    s_n, s_p = radius * torch.cos(theta), 1 + radius * torch.sin(theta)
    pos = torch.tensor([[True, False]]).expand(9, 2)
    neg = ~pos

    def loss(scale: float) -> Tensor:  # scale < 1 moves towards (s_n, s_p) = (0, 1)
        sim = torch.stack([1 + scale * (s_p - 1), scale * s_n], dim=1)
        return circle_loss(sim, pos, neg, m=m, gamma=32.0)

    # the softplus argument is 0 on the circle, so the loss is log 2 there
    torch.testing.assert_close(loss(1.0), torch.full((9,), math.log(2), dtype=torch.float64))
    assert (loss(0.8) < math.log(2)).all() and (loss(1.2) > math.log(2)).all()


def test_gradients_are_nonpositive_on_positives_and_nonnegative_on_negatives(pk_batch) -> None:
    sim, pos, neg = BatchPairs()(*pk_batch(p=4, k=3, singletons=1))
    sim = sim.detach().requires_grad_()
    circle_loss(sim, pos, neg, m=0.25, gamma=64.0).sum().backward()
    assert (sim.grad[pos] <= 0).all() and (sim.grad[neg] >= 0).all()
    assert sim.grad[pos].lt(0).any() and sim.grad[neg].gt(0).any()
    assert (sim.grad[~(pos | neg)] == 0).all()


def test_loss_is_invariant_to_batch_permutation(pk_batch) -> None:
    embeddings, labels = pk_batch(p=4, k=3, singletons=2, dtype=torch.float64)
    perm = torch.randperm(len(labels), generator=torch.Generator().manual_seed(1))
    loss = CircleLoss(m=0.25, gamma=32.0)
    torch.testing.assert_close(loss(embeddings[perm], labels[perm]), loss(embeddings, labels))


def test_anchors_without_positive_contribute_nothing(pk_batch) -> None:
    embeddings, labels = pk_batch(p=3, k=2, singletons=3, dtype=torch.float64)
    sim, pos, neg = BatchPairs()(embeddings, labels)
    sim = sim.detach().requires_grad_()
    per_anchor = circle_loss(sim, pos, neg, m=0.25, gamma=32.0)
    per_anchor.sum().backward()
    assert (per_anchor[6:] == 0).all() and (per_anchor[:6] > 0).all()
    assert (sim.grad[6:] == 0).all()
    # the mean runs over the 6 anchors with a positive only
    loss = CircleLoss(m=0.25, gamma=32.0)(embeddings, labels)
    torch.testing.assert_close(loss, per_anchor[:6].mean().detach())


def test_batch_without_any_positive_gives_zero_with_a_gradient(pk_batch) -> None:
    embeddings = pk_batch(p=0, k=2, singletons=5)[0].requires_grad_()
    loss = CircleLoss()(embeddings, torch.arange(5))
    loss.backward()
    assert loss.item() == 0.0 and torch.equal(embeddings.grad, torch.zeros_like(embeddings))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("paradigm", ["pair-wise", "class-level"])
def test_gamma_256_is_finite_in_half_precision(dtype, paradigm, pk_batch) -> None:
    embeddings, labels = pk_batch(p=8, k=4, dim=32)
    embeddings = (embeddings * 100).to(dtype).requires_grad_()
    source = ClassProxies(8, 32) if paradigm == "class-level" else None
    loss_fn = CircleLoss(m=0.25, gamma=256.0, source=source)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = loss_fn(embeddings, labels)
    loss.backward()
    assert loss.dtype == torch.float32 and torch.isfinite(loss) and loss > 0
    assert torch.isfinite(embeddings.grad.float()).all() and embeddings.grad.abs().sum() > 0


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"m": -0.1}, "m must be in"), ({"m": 1.0}, "m must be in"), ({"gamma": 0.0}, "gamma")],
)
def test_constructor_rejects_bad_hyper_parameters(kwargs, match) -> None:
    with pytest.raises(ValueError, match=match):
        CircleLoss(**kwargs)


def test_paradigm_follows_the_source() -> None:
    assert CircleLoss().paradigm == "pair-wise"
    assert CircleLoss(source=ClassProxies(3, 4)).paradigm == "class-level"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(("m", "gamma"), [(0.25, 32.0), (0.4, 256.0)])
@pytest.mark.parametrize("source", ["pair-wise", "class-level"])
def test_the_training_path_equals_the_equation_in_values_and_gradients(
    source: str, m: float, gamma: float, dtype: torch.dtype, pk_batch
) -> None:
    """`fast_circle_loss` (closed-form backward; the compiled pass on CPU floats) against
    `circle_loss`, Eq. 6 with autograd's gradient."""
    embeddings, labels = pk_batch(p=5, k=3, singletons=2, dtype=dtype)
    pairs = BatchPairs() if source == "pair-wise" else ClassProxies(7, embeddings.shape[1])
    sim, pos, neg = pairs.to(dtype)(embeddings, labels)
    sims = [sim.detach().clone().requires_grad_() for _ in range(2)]
    values = [
        f(s, pos, neg, m=m, gamma=gamma)
        for f, s in zip((fast_circle_loss, circle_loss), sims, strict=True)
    ]
    assert _CircleLossFunction.compiles(sims[0], pos, neg)  # the compiled pass was compared
    torch.testing.assert_close(values[0], values[1])
    for value in values:
        value.sum().backward()
    torch.testing.assert_close(sims[0].grad, sims[1].grad)
