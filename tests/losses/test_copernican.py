"""Copernican loss: Eq. 1 and its l2 baseline by loops, Eq. 3-4 against autograd, the planet rule.

Features are raw (not unit) on purpose: the sun and the planets are means of raw features.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

from losses import CopernicanLoss

# two classes in 2-D, raw norms 3, 1, 1: class 0 has (3, 0) and (0, 1), class 1 has (-1, 0);
# the sun is their mean (2/3, 1/3), in direction (2, 1) / √5 (the unit vectors' mean is (0, 1/3))
X = torch.tensor([[3.0, 0.0], [0.0, 1.0], [-1.0, 0.0]], dtype=torch.float64)
Y = torch.tensor([0, 0, 1])
PLANETS = torch.tensor([[1.0, 1.0], [-1.0, 0.0]], dtype=torch.float64)
PAPER_BETAS = (-1.0, -0.5, -0.1, 0.0, 0.1, 0.5)


def copernican_term(loss: CopernicanLoss, x: Tensor, y: Tensor) -> Tensor:
    """The loss minus its softmax cross-entropy: λ times the Copernican term."""
    return loss(x, y) - F.cross_entropy(loss.softmax.classifier(x), y)


def with_planets(planets: Tensor, **kwargs) -> CopernicanLoss:
    loss = CopernicanLoss(planets.shape[0], planets.shape[1], **kwargs).double()
    loss.planets.copy_(planets)
    return loss


def raw_batch(pk_batch, seed: int = 0) -> tuple[Tensor, Tensor, Tensor]:
    """(x [12, 4] with norms from 0.3 to 3.3, labels of 4 classes, planets [4, 4], one zero)."""
    x, y = pk_batch(p=4, k=3, dim=4, dtype=torch.float64, seed=seed)
    generator = torch.Generator().manual_seed(seed + 1)
    scale = 0.3 + 3 * torch.rand(len(x), 1, generator=generator, dtype=torch.float64)
    x = F.normalize(x, dim=1) * scale
    planets = torch.randn(4, 4, generator=generator, dtype=torch.float64)
    planets[3] = 0  # a class not seen yet: cos(x, 0) is taken as 0
    return x, y, planets


def eq1_by_loops(x, y, planets, *, lambda_: float, beta: float, variant: str) -> float:
    """λ times Eq. 1's Copernican term (cosine) or the l2 baseline's, one sample at a time."""
    rows, m = x.tolist(), len(x)
    sun = [sum(row[d] for row in rows) / m for d in range(len(rows[0]))]

    def cos(a, b):
        norm_a, norm_b = math.sqrt(sum(v * v for v in a)), math.sqrt(sum(v * v for v in b))
        return (
            0.0
            if norm_b == 0
            else sum(u * v for u, v in zip(a, b, strict=True)) / (norm_a * norm_b)
        )

    def half_sq(a, b):
        return 0.5 * sum((u - v) ** 2 for u, v in zip(a, b, strict=True))

    total = 0.0
    for row, label in zip(rows, y.tolist(), strict=True):
        planet = planets[label].tolist()
        if variant == "cosine":
            total += (1 - cos(row, planet)) + max(0.0, cos(row, sun) - beta)
        else:
            total += half_sq(row, planet) + max(0.0, (1 - beta) - half_sq(row, sun))
    return lambda_ * total / m


def eq3_eq4_by_loops(x, y, planets, *, lambda_: float, beta: float, variant: str) -> Tensor:
    """∂(λ · Copernican term)/∂x [B, D] with the sun and planets held constant (Eq. 3-4)."""
    m, sun = len(x), x.mean(0)
    grads = []
    for x_i, label in zip(x, y.tolist(), strict=True):
        p = planets[label]
        if variant == "cosine":
            norm, x_hat = x_i.norm(), x_i / x_i.norm()
            p_hat = p / p.norm() if p.norm() > 0 else torch.zeros_like(p)
            s_hat = sun / sun.norm()
            planet = -(p_hat - (x_hat @ p_hat) * x_hat) / norm
            cos_sun = x_hat @ s_hat
            sun_grad = (s_hat - cos_sun * x_hat) / norm if cos_sun > beta else 0 * x_i
        else:
            planet = x_i - p
            inside = 0.5 * (x_i - sun).square().sum() < 1 - beta
            sun_grad = -(x_i - sun) if inside else 0 * x_i
        grads.append(lambda_ / m * (planet + sun_grad))
    return torch.stack(grads)


@pytest.mark.parametrize("variant", ["cosine", "l2"])
@pytest.mark.parametrize(("lambda_", "beta"), [(1.0, -1.0), (5.0, -0.5), (0.1, 0.0), (1.0, 0.5)])
def test_eq1_equals_loops_on_raw_features(variant, lambda_, beta, pk_batch) -> None:
    x, y, planets = raw_batch(pk_batch)
    loss = with_planets(planets, lambda_=lambda_, beta=beta, variant=variant).eval()
    expected = eq1_by_loops(x, y, planets, lambda_=lambda_, beta=beta, variant=variant)
    assert copernican_term(loss, x, y).item() == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(
    ("variant", "beta", "expected"),
    [
        # planet: 1 - cos = (1 - 1/√2, 1 - 1/√2, 0); sun: cos(x, s) = (2, 1, -2) / √5
        ("cosine", 0.0, (2 - math.sqrt(2)) / 3 + (2 + 1 + 0) / math.sqrt(5) / 3),
        ("cosine", -1.0, (2 - math.sqrt(2)) / 3 + 1 + 1 / (3 * math.sqrt(5))),
        # planet: ½‖x - p‖² = (5/2, 1/2, 0); sun: ½‖x - s‖² = (25, 4, 13) / 9, margin 1 - β
        ("l2", 0.0, 1 + (0 + 5 / 9 + 0) / 3),
        ("l2", -1.0, 1 + (0 + 14 / 9 + 5 / 9) / 3),
    ],
)
def test_hand_sized_case_sun_of_raw_features(variant, beta, expected) -> None:
    loss = with_planets(PLANETS, lambda_=2.0, beta=beta, variant=variant)
    assert copernican_term(loss, X, Y).item() == pytest.approx(2.0 * expected, rel=1e-12)


@pytest.mark.parametrize("variant", ["cosine", "l2"])
@pytest.mark.parametrize("beta", [-1.0, 0.1])
def test_gradient_is_eq3_eq4_with_constant_sun_and_planets(variant, beta, pk_batch) -> None:
    x, y, planets = raw_batch(pk_batch, seed=2)
    loss = with_planets(planets, lambda_=5.0, beta=beta, variant=variant).eval()
    x.requires_grad_()
    copernican_term(loss, x, y).backward()
    expected = eq3_eq4_by_loops(x.detach(), y, planets, lambda_=5.0, beta=beta, variant=variant)
    torch.testing.assert_close(x.grad, expected)


def test_the_gradient_test_sees_open_and_closed_hinges(pk_batch) -> None:
    x, _, _ = raw_batch(pk_batch, seed=2)
    sun = x.mean(0)
    cos_sun = F.normalize(x, dim=1) @ F.normalize(sun, dim=0)
    half_sq = 0.5 * (x - sun).square().sum(1)
    assert (cos_sun > 0.1).any() and (cos_sun <= 0.1).any()
    assert (half_sq < 2).any() and (half_sq >= 2).any()  # l2 at β = -1: margin 1 - β = 2
    assert (half_sq < 0.9).any() and (half_sq >= 0.9).any()  # l2 at β = 0.1


@pytest.mark.parametrize("variant", ["cosine", "l2"])
def test_planet_update_is_the_papers_rule_on_raw_features(variant: str) -> None:
    loss = CopernicanLoss(3, 2, lambda_=1.0, beta=0.0, alpha=0.1, variant=variant).double()
    loss(X, Y)
    # p_0 = 0.1 · mean((3, 0), (0, 1)), p_1 = 0.1 · (-1, 0); class 2 is absent and stays 0
    expected = torch.tensor([[0.15, 0.05], [-0.1, 0.0], [0.0, 0.0]], dtype=torch.float64)
    torch.testing.assert_close(loss.planets, expected)
    loss(X, Y)  # p ← p + α mean(x): the same step again, not a step towards the class mean
    torch.testing.assert_close(loss.planets, 2 * expected)
    loss.eval()
    loss(X, Y)
    torch.testing.assert_close(loss.planets, 2 * expected)


def test_planets_are_checkpointed_but_not_optimised() -> None:
    loss = CopernicanLoss(2, 2, lambda_=1.0, beta=0.0)
    assert "planets" in loss.state_dict()
    assert all(p.data_ptr() != loss.planets.data_ptr() for p in loss.parameters())


@pytest.mark.parametrize("beta", [*PAPER_BETAS, 1.0])
def test_beta_is_a_signed_margin_in_minus_one_one(beta: float) -> None:
    assert CopernicanLoss(2, 2, lambda_=1.0, beta=beta).beta == beta


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"lambda_": -1.0}, r"^CopernicanLoss: lambda_ must be >= 0, got -1.0; the paper uses"),
        ({"beta": 1.5}, r"^CopernicanLoss: beta must be in \[-1, 1\] .*got 1.5; the paper uses"),
        ({"beta": -1.5}, r"got -1.5; the paper uses β ∈ \{-1, -0.5, -0.1, 0, 0.1, 0.5\}"),
        ({"beta": math.nan}, r"beta must be in \[-1, 1\]"),
        ({"alpha": 2.0}, r"alpha must be in \(0, 1\], got 2.0; the paper uses 0.05"),
        ({"variant": "l1"}, "variant must be 'cosine' or 'l2', got 'l1'"),
        ({"embedding_dim": 0}, "^CopernicanLoss: embedding_dim must be >= 1"),
    ],
)
def test_constructor_rejects_bad_hyper_parameters(kwargs, match: str) -> None:
    arguments = {"num_classes": 2, "embedding_dim": 2, "lambda_": 1.0, "beta": 0.0} | kwargs
    with pytest.raises(ValueError, match=match):
        CopernicanLoss(**arguments)
