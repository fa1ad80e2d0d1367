"""Center and Copernican losses: their terms and centre updates on hand-sized cases."""

from __future__ import annotations

import pytest
import torch

from losses import CenterLoss, CopernicanLoss

# two classes in 2-D: class 0 has (1, 0) and (0, 1), class 1 has (-1, 0)
X = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]], dtype=torch.float64)
Y = torch.tensor([0, 0, 1])


def without_softmax(loss, x=X, y=Y) -> torch.Tensor:
    """The loss minus its softmax term, which the tests do not care about."""
    return loss(x, y) - loss.softmax(x, y)


def test_center_term_and_wen_update_rule() -> None:
    loss = CenterLoss(2, 2, lambda_=2.0, alpha=0.5).double()
    loss.centers.copy_(torch.tensor([[1.0, 1.0], [0.0, 0.0]]))
    # ½ ||x - c||² = ½ (1, 1, 1); mean ½; times λ = 2 -> 1
    assert without_softmax(loss).item() == pytest.approx(1.0)
    # the call above updated once: c_0 += 0.5 * ((0,-1) + (-1,0)) / 3, c_1 += 0.5 * (-1,0) / 2
    expected = torch.tensor([[1 - 1 / 6, 1 - 1 / 6], [-0.25, 0.0]], dtype=torch.float64)
    torch.testing.assert_close(loss.centers, expected)


def test_copernican_planet_update_rule_and_eval_mode() -> None:
    loss = CopernicanLoss(3, 2, lambda_=1.0, beta=1.0, alpha=0.1).double()
    loss(X, Y)
    # p_0 = 0.1 * mean((1,0), (0,1)), p_1 = 0.1 * (-1, 0); class 2 is absent and stays 0
    expected = torch.tensor([[0.05, 0.05], [-0.1, 0.0], [0.0, 0.0]], dtype=torch.float64)
    torch.testing.assert_close(loss.planets, expected)
    loss(X, Y)
    torch.testing.assert_close(loss.planets, 2 * expected)
    loss.eval()
    loss(X, Y)
    torch.testing.assert_close(loss.planets, 2 * expected)


def test_copernican_cosine_terms_by_hand() -> None:
    loss = CopernicanLoss(2, 2, lambda_=1.0, beta=0.5).double()
    loss.planets.copy_(torch.tensor([[1.0, 1.0], [-1.0, 0.0]]))
    # planet: 1 - cos = (1 - 1/√2, 1 - 1/√2, 0); sun μ = (0, 1/3), cos(x, μ) = (0, 1, 0)
    planet = (2 - 2**0.5) / 3
    sun = -(1 + 0 + 1) / 3
    assert without_softmax(loss).item() == pytest.approx(planet + 0.5 * sun)


def test_copernican_l2_variant_by_hand() -> None:
    loss = CopernicanLoss(2, 2, lambda_=2.0, beta=0.5, alpha=0.5, variant="l2").double()
    loss.planets.copy_(torch.tensor([[1.0, 1.0], [-1.0, 0.0]]))
    # planet: ½ ||x - p||² = (½, ½, 0), mean 1/3; sun μ = (0, 1/3):
    # ½ ||x - μ||² = ½ (10/9, 4/9, 10/9) -> mean 4/9
    expected = 2.0 * (1 / 3 + 0.5 * -(4 / 9))
    assert without_softmax(loss).item() == pytest.approx(expected)
    # l2 moves the centre towards the class mean: p_0 = (1, 1) + ½ ((½, ½) - (1, 1))
    torch.testing.assert_close(loss.planets[0], torch.tensor([0.75, 0.75], dtype=torch.float64))


def test_centres_are_checkpointed_but_not_optimised() -> None:
    for loss in (CenterLoss(2, 2), CopernicanLoss(2, 2, lambda_=1.0, beta=1.0)):
        buffers = dict(loss.named_buffers())
        assert set(buffers) <= set(loss.state_dict()) and buffers
        parameters = {p.data_ptr() for p in loss.parameters()}
        assert all(b.data_ptr() not in parameters for b in buffers.values())


@pytest.mark.parametrize(
    ("factory", "match"),
    [
        (lambda: CenterLoss(2, 2, lambda_=-1.0), "lambda_ must be >= 0"),
        (lambda: CenterLoss(2, 2, alpha=0.0), "alpha must be in"),
        (lambda: CenterLoss(1, 2), "^CenterLoss: num_classes must be >= 2, got 1"),
        (lambda: CopernicanLoss(2, 0, 1.0, 1.0), "^CopernicanLoss: embedding_dim must be >= 1"),
        (lambda: CopernicanLoss(2, 2, lambda_=-1.0, beta=1.0), "lambda_ must be >= 0"),
        (lambda: CopernicanLoss(2, 2, lambda_=1.0, beta=-1.0), "beta must be >= 0"),
        (lambda: CopernicanLoss(2, 2, lambda_=1.0, beta=1.0, alpha=2.0), "alpha must be in"),
        (lambda: CopernicanLoss(2, 2, 1.0, 1.0, variant="l1"), "variant must be"),
    ],
)
def test_constructor_rejects_bad_hyper_parameters(factory, match) -> None:
    with pytest.raises(ValueError, match=match):
        factory()
