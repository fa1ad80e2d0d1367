"""Center loss: its term and Wen et al.'s centre update on hand-sized cases."""

from __future__ import annotations

import pytest
import torch

from losses import CenterLoss

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


def test_centres_are_checkpointed_but_not_optimised() -> None:
    loss = CenterLoss(2, 2)
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
    ],
)
def test_constructor_rejects_bad_hyper_parameters(factory, match) -> None:
    with pytest.raises(ValueError, match=match):
        factory()
