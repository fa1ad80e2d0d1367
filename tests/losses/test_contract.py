"""Every exported loss against the contract stated in `losses/base.py`."""

from __future__ import annotations

import copy
import inspect
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

import losses
from experiments.examples.proxy_nca import ProxyNCALoss
from losses import (
    ArcFaceLoss,
    BatchPairs,
    CenterLoss,
    CircleLoss,
    ClassProxies,
    ContrastiveLoss,
    CopernicanLoss,
    CosFaceLoss,
    ExternalLoss,
    LiftedStructureLoss,
    MetricLoss,
    MultiSimilarityLoss,
    NormFaceLoss,
    NPairLoss,
    SimilaritySource,
    SoftmaxLoss,
    TripletLoss,
    UnifiedLoss,
)

C, D = 4, 16
FACTORIES = {
    "CircleLoss": lambda: CircleLoss(),
    "CircleLoss-ClassProxies": lambda: CircleLoss(m=0.25, gamma=64, source=ClassProxies(C, D)),
    "UnifiedLoss": lambda: UnifiedLoss(),
    "UnifiedLoss-ClassProxies": lambda: UnifiedLoss(source=ClassProxies(C, D)),
    "TripletLoss": lambda: TripletLoss(),
    "MultiSimilarityLoss": lambda: MultiSimilarityLoss(),
    "LiftedStructureLoss": lambda: LiftedStructureLoss(),
    "NPairLoss": lambda: NPairLoss(),
    "ContrastiveLoss": lambda: ContrastiveLoss(),
    "SoftmaxLoss": lambda: SoftmaxLoss(C, D),
    "NormFaceLoss": lambda: NormFaceLoss(C, D),
    "CosFaceLoss": lambda: CosFaceLoss(C, D),
    "ArcFaceLoss": lambda: ArcFaceLoss(C, D),
    "CenterLoss": lambda: CenterLoss(C, D, lambda_=0.1),
    "CopernicanLoss": lambda: CopernicanLoss(C, D, lambda_=1.0, beta=-1.0),
    "CopernicanLoss-l2": lambda: CopernicanLoss(C, D, lambda_=1.0, beta=-1.0, variant="l2"),
    "ExternalLoss-ProxyNCA": lambda: ExternalLoss(ProxyNCALoss(C, D)),  # a user's module
}
PAIR_WISE = {
    "CircleLoss",
    "UnifiedLoss",
    "TripletLoss",
    "MultiSimilarityLoss",
    "LiftedStructureLoss",
    "NPairLoss",
    "ContrastiveLoss",
}
BASES = {"MetricLoss", "PairSimilarityLoss"}  # the contract and a shell, not losses to train


def exported_modules() -> dict[str, type]:
    """The nn.Module classes of `losses.__all__` that are not similarity sources."""
    classes = {name: getattr(losses, name) for name in losses.__all__}
    return {
        name: cls
        for name, cls in classes.items()
        if inspect.isclass(cls) and issubclass(cls, nn.Module)
        if not issubclass(cls, SimilaritySource)
    }


def test_every_exported_loss_is_a_metric_loss_and_is_covered() -> None:
    exported = exported_modules()
    assert all(issubclass(cls, MetricLoss) for cls in exported.values())
    assert set(exported) - BASES - {"AMSoftmaxLoss"} == {n.split("-")[0] for n in FACTORIES}


def test_sources_declare_their_paradigm() -> None:
    assert (BatchPairs.paradigm, ClassProxies.paradigm) == ("pair-wise", "class-level")


@pytest.mark.parametrize("name", list(FACTORIES))
def test_loss_contract(name: str, pk_batch) -> None:
    torch.manual_seed(0)
    loss_fn = FACTORIES[name]()
    assert isinstance(loss_fn, MetricLoss)
    paradigm = "pair-wise" if name in PAIR_WISE else "class-level"
    assert loss_fn.paradigm == paradigm
    assert loss_fn.last_stats == {}
    embeddings, labels = pk_batch(p=C, k=3, dim=D)
    embeddings.requires_grad_()
    before = copy.deepcopy(loss_fn.state_dict())
    loss = loss_fn(embeddings, labels)
    assert loss.shape == () and torch.isfinite(loss)
    assert set(loss_fn.last_stats) == {"sp_mean", "sn_mean", "active_fraction"}
    for value in loss_fn.last_stats.values():
        assert value.shape == () and not value.requires_grad and torch.isfinite(value)
    assert 0 <= loss_fn.last_stats["active_fraction"] <= 1

    params = list(loss_fn.parameters())
    optimizer = torch.optim.SGD([embeddings, *params], lr=0.1)
    loss.backward()
    assert torch.isfinite(embeddings.grad).all() and embeddings.grad.abs().sum() > 0
    if loss_fn.paradigm == "class-level":
        assert params, "class-level losses own proxies or a classifier the optimiser must see"
        assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in params)
        optimizer.step()
        assert any(not torch.equal(p, before[k]) for k, p in loss_fn.named_parameters())

    clone = FACTORIES[name]()
    clone.load_state_dict(loss_fn.state_dict())
    loss_fn.eval(), clone.eval()
    torch.testing.assert_close(clone(embeddings, labels), loss_fn(embeddings, labels))


@pytest.mark.parametrize("name", list(FACTORIES))
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_inputs_give_fp32_finite_loss(name: str, dtype, pk_batch) -> None:
    loss_fn = FACTORIES[name]()
    embeddings, labels = pk_batch(p=C, k=3, dim=D)
    embeddings = embeddings.to(dtype).requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = loss_fn(embeddings, labels)
    loss.backward()
    assert loss.dtype == torch.float32 and torch.isfinite(loss)
    assert torch.isfinite(embeddings.grad.float()).all()


def owner(name: str) -> str:
    """The class name a loss's errors start with ("CircleLoss" for "CircleLoss-ClassProxies")."""
    return name.split("-")[0]


@pytest.mark.parametrize("name", list(FACTORIES))
def test_non_finite_embeddings_are_an_error_that_counts_them(name: str, pk_batch) -> None:
    loss_fn = FACTORIES[name]()
    embeddings, labels = pk_batch(p=C, k=3, dim=D)
    embeddings[1, 2], embeddings[5, 0] = torch.nan, -torch.inf
    before = copy.deepcopy(loss_fn.state_dict())
    match = f"^{owner(name)}: 2 of {12 * D} embedding values are not finite"
    with pytest.raises(ValueError, match=match):
        loss_fn(embeddings, labels)
    for key, value in loss_fn.state_dict().items():  # no NaN reached the centres
        torch.testing.assert_close(value, before[key], rtol=0, atol=0)


@pytest.mark.parametrize("name", list(FACTORIES))
def test_finite_embeddings_whose_sum_overflows_pass_the_check(name: str, pk_batch) -> None:
    # The check sums the batch first; an overflowing sum must fall to the exact test, not raise.
    embeddings, labels = pk_batch(p=C, k=3, dim=D)
    embeddings[0, 0] = embeddings[1, 0] = 3e38
    assert not torch.isfinite(embeddings.sum())
    FACTORIES[name]().check_batch(embeddings, labels)


def test_the_check_of_a_training_batch_warns_nothing() -> None:
    # Embeddings that require grad, as in training: reading their sum as a Python float must not
    # warn. torch warns once per process, so a fresh process tells whether this check does.
    code = (
        "import torch, warnings; warnings.simplefilter('error'); from losses import CircleLoss; "
        "CircleLoss().check_batch(torch.randn(4, 3, requires_grad=True), "
        "torch.tensor([0, 0, 1, 1]))"
    )
    subprocess.run(
        [sys.executable, "-c", code], check=True, cwd=Path(__file__).parents[2], capture_output=True
    )


@pytest.mark.parametrize("name", list(FACTORIES))
def test_empty_batch_is_an_error(name: str) -> None:
    with pytest.raises(ValueError, match=f"^{owner(name)}: empty batch"):
        FACTORIES[name]()(torch.empty(0, D), torch.empty(0, dtype=torch.long))


@pytest.mark.parametrize("name", list(FACTORIES))
def test_embeddings_and_labels_of_different_lengths_are_an_error(name: str, pk_batch) -> None:
    embeddings, labels = pk_batch(p=C, k=3, dim=D)
    with pytest.raises(ValueError, match=f"^{owner(name)}: got 12 embeddings but 11 labels"):
        FACTORIES[name]()(embeddings, labels[:11])


@pytest.mark.parametrize("name", list(FACTORIES))
@pytest.mark.parametrize(
    ("embeddings_shape", "labels_shape", "match"),
    [
        ((12, D, 1), (12,), r"embeddings must be 2-D \[B, D\], got shape \(12, 16, 1\)"),
        ((D,), (1,), r"embeddings must be 2-D \[B, D\], got shape \(16,\)"),
        ((12, D), (12, 1), r"labels must be 1-D \[B\], got shape \(12, 1\)"),
    ],
    ids=["embeddings-3d", "embeddings-1d", "labels-2d"],
)
def test_wrong_ndim_is_an_error(name: str, embeddings_shape, labels_shape, match: str) -> None:
    embeddings = torch.randn(embeddings_shape)
    labels = torch.zeros(labels_shape, dtype=torch.long)
    with pytest.raises(ValueError, match=f"^{owner(name)}: {match}"):
        FACTORIES[name]()(embeddings, labels)


@pytest.mark.parametrize("name", list(FACTORIES))
def test_labels_other_than_int64_are_an_error(name: str, pk_batch) -> None:
    """int32 labels (from numpy, say) crashed the class-level losses inside one_hot or
    cross_entropy and passed the pair-wise ones: every loss names the fix instead."""
    embeddings, labels = pk_batch(p=C, k=3, dim=D)
    match = rf"^{owner(name)}: labels must be int64 class ids, got torch.int32; pass labels.long"
    with pytest.raises(ValueError, match=match):
        FACTORIES[name]()(embeddings, labels.int())


@pytest.mark.parametrize("name", ["SoftmaxLoss", "CenterLoss", "CopernicanLoss"])
def test_label_error_names_the_loss_the_user_built(name: str, pk_batch) -> None:
    embeddings, labels = pk_batch(p=C, k=3, dim=D)
    labels[0] = C + 2
    match = rf"^{name}: labels must lie in \[0, {C}\), got min 0 and max {C + 2}"
    with pytest.raises(ValueError, match=match):
        FACTORIES[name]()(embeddings, labels)


@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_the_repr_shows_constructor_arguments(name: str) -> None:
    """`extra_repr` names the `repr_fields` in order, which the constructor takes by those names
    (ArcFace writes its own, to give m's unit)."""
    loss = FACTORIES[name]()
    assert set(loss.repr_fields) <= set(inspect.signature(type(loss)).parameters)
    shown = loss.extra_repr()
    assert [part.split("=")[0] for part in shown.split(", ") if shown] == list(loss.repr_fields)


def test_the_repr_lists_the_hyper_parameters() -> None:
    triplet = TripletLoss(margin=0.3, soft_margin=True, mining="all")
    assert triplet.extra_repr() == "margin=0.3, soft_margin=True, mining='all'"
    copernican = CopernicanLoss(C, D, lambda_=1.0, beta=-0.5)
    assert copernican.extra_repr() == "lambda_=1.0, beta=-0.5, alpha=0.05, variant='cosine'"
    assert ArcFaceLoss(C, D).extra_repr() == "m=0.5 rad, s=64.0"
