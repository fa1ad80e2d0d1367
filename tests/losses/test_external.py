"""ExternalLoss: pytorch-metric-learning's losses and a user's module through one adapter."""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
import torch
from torch import Tensor, nn

from experiments.examples.proxy_nca import ProxyNCALoss
from losses import CircleLoss, ExternalLoss


def pml_losses():
    """pytorch_metric_learning.losses; the test is skipped where the optional extra is absent."""
    return pytest.importorskip(
        "pytorch_metric_learning.losses",
        reason='pytorch-metric-learning not installed (pip install -e ".[pml]")',
    )


PML_CASES: dict[str, Callable[..., nn.Module]] = {
    "ProxyAnchorLoss": lambda pml: pml.ProxyAnchorLoss(num_classes=5, embedding_size=8),
    "SupConLoss": lambda pml: pml.SupConLoss(temperature=0.1),
}


@pytest.mark.parametrize("name", list(PML_CASES))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_value_and_gradients_equal_pml_own(name: str, dtype: torch.dtype, pk_batch) -> None:
    torch.manual_seed(0)
    theirs = PML_CASES[name](pml_losses())
    ours = ExternalLoss(copy.deepcopy(theirs))
    embeddings, labels = pk_batch(p=4, k=3, singletons=1, dim=8, dtype=dtype)
    x_theirs = embeddings.clone().requires_grad_()
    x_ours = embeddings.clone().requires_grad_()
    expected, value = theirs(x_theirs, labels), ours(x_ours, labels)
    expected.backward(), value.backward()
    torch.testing.assert_close(value, expected, rtol=0, atol=0)
    torch.testing.assert_close(x_ours.grad, x_theirs.grad, rtol=0, atol=0)
    for (key, mine), their in zip(ours.loss.named_parameters(), theirs.parameters(), strict=True):
        torch.testing.assert_close(mine.grad, their.grad, rtol=0, atol=0, msg=key)


def test_half_inputs_are_computed_in_fp32(pk_batch) -> None:
    theirs = pml_losses().ProxyAnchorLoss(num_classes=4, embedding_size=8)
    ours = ExternalLoss(copy.deepcopy(theirs))
    embeddings, labels = pk_batch(p=4, k=3, dim=8, dtype=torch.bfloat16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        value = ours(embeddings, labels)
    assert value.dtype == torch.float32
    torch.testing.assert_close(value, theirs(embeddings.float(), labels))


def test_paradigm_is_inferred_from_learnable_parameters_or_given() -> None:
    assert ExternalLoss(ProxyNCALoss(4, 8)).paradigm == "class-level"
    pml = pml_losses()
    assert ExternalLoss(pml.ProxyAnchorLoss(4, 8)).paradigm == "class-level"
    assert ExternalLoss(pml.SupConLoss()).paradigm == "pair-wise"
    assert ExternalLoss(pml.SupConLoss(), paradigm="class-level").paradigm == "class-level"


def test_the_name_is_the_wrapped_class_and_never_one_of_ours() -> None:
    assert ExternalLoss(ProxyNCALoss(4, 8)).name == "ProxyNCALoss"
    pml = pml_losses()
    assert ExternalLoss(pml.ProxyAnchorLoss(4, 8)).name == "ProxyAnchorLoss"
    assert ExternalLoss(pml.CircleLoss()).name == "pytorch_metric_learning.CircleLoss"
    assert CircleLoss().name == "CircleLoss"


def test_statistics_are_the_batch_pair_similarities(pk_batch) -> None:
    embeddings, labels = pk_batch(p=4, k=3, singletons=2, dim=8)
    adapter = ExternalLoss(ProxyNCALoss(6, 8))
    adapter(embeddings, labels)
    circle = CircleLoss()
    circle(embeddings, labels)  # pair-wise: the same s_p, s_n and anchors with both
    assert adapter.last_stats.keys() == circle.last_stats.keys()
    for key, value in adapter.last_stats.items():
        torch.testing.assert_close(value, circle.last_stats[key])
    assert adapter.last_stats["active_fraction"] == pytest.approx(12 / 14)


def proxy_nca_by_loops(x: Tensor, labels: Tensor, proxies: Tensor, scale: float) -> Tensor:
    """Movshovitz-Attias et al., Eq. 4, one anchor at a time, on unit vectors."""
    x, proxies = x / x.norm(dim=1, keepdim=True), proxies / proxies.norm(dim=1, keepdim=True)
    total = x.new_zeros(())
    for xi, y in zip(x, labels.tolist(), strict=True):
        d = [((xi - p) ** 2).sum() for p in proxies]
        below = sum(torch.exp(-scale * d[z]) for z in range(len(proxies)) if z != y)
        total = total - torch.log(torch.exp(-scale * d[y]) / below)
    return total / len(x)


def test_the_example_user_loss_is_proxy_nca_eq4(pk_batch) -> None:
    torch.manual_seed(0)
    loss = ProxyNCALoss(num_classes=5, embedding_dim=8, scale=3.0).double()
    embeddings, labels = pk_batch(p=5, k=2, dim=8, dtype=torch.float64)
    expected = proxy_nca_by_loops(embeddings, labels, loss.proxies, 3.0)
    torch.testing.assert_close(ExternalLoss(loss)(embeddings, labels), expected)


class Returns(nn.Module):
    """A broken user loss: returns what it is given, whatever the batch."""

    def __init__(self, make: Callable[[Tensor], object]) -> None:
        super().__init__()
        self.make = make

    def forward(self, embeddings: Tensor, labels: Tensor) -> object:
        return self.make(embeddings)


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda x: x.norm(dim=1), r"returned a torch.float32 tensor of shape \(12,\), not a float"),
        (lambda x: x.sum().long(), r"returned a torch.int64 tensor of shape \(\), not a float"),
        (lambda x: 0.5, r"returned a float, not a tensor"),
        (lambda x: x.sum() * torch.nan, r"returned nan for finite embeddings of shape \(12, 8\)"),
        (lambda x: x.sum().detach(), r"returned a loss with no gradient"),
    ],
    ids=["per-sample", "integer", "python-float", "nan", "detached"],
)
def test_a_broken_wrapped_loss_is_an_error_that_names_it(make, match: str, pk_batch) -> None:
    embeddings, labels = pk_batch(p=4, k=3, dim=8)
    with pytest.raises(ValueError, match=rf"^ExternalLoss: Returns {match}"):
        ExternalLoss(Returns(make))(embeddings.requires_grad_(), labels)


def test_wrapping_one_of_ours_or_a_non_module_is_an_error() -> None:
    with pytest.raises(ValueError, match="CircleLoss is already a circlebench loss"):
        ExternalLoss(CircleLoss())
    with pytest.raises(ValueError, match=r"loss must be a torch\.nn\.Module .* got function"):
        ExternalLoss(lambda x, y: x.sum())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="paradigm must be 'pair-wise', 'class-level' or None"):
        ExternalLoss(ProxyNCALoss(4, 8), paradigm="proxy")  # type: ignore[arg-type]
