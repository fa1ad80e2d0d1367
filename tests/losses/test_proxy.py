"""Classification losses against their textbook cross-entropy forms."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from losses import AMSoftmaxLoss, ArcFaceLoss, ClassProxies, CosFaceLoss, NormFaceLoss, SoftmaxLoss
from losses.similarity import LazyStats


def test_softmax_loss_is_linear_classifier_cross_entropy(pk_batch) -> None:
    embeddings, labels = pk_batch(p=5, k=2, dtype=torch.float64)
    loss = SoftmaxLoss(5, 8).double()
    expected = F.cross_entropy(loss.classifier(embeddings), labels)
    torch.testing.assert_close(loss(embeddings, labels), expected)


def test_arcface_adds_the_angle_margin_to_the_target(pk_batch) -> None:
    embeddings, labels = pk_batch(p=5, k=2, dtype=torch.float64)
    m, s = 0.3, 8.0
    loss = ArcFaceLoss(5, 8, m=m, s=s).double()
    cosine = F.normalize(embeddings, dim=1) @ F.normalize(loss.source.proxies, dim=1).T
    theta = torch.acos(cosine)
    assert (theta + m < math.pi).all()  # the plain formula applies to every entry here
    logits = s * torch.where(F.one_hot(labels, 5).bool(), torch.cos(theta + m), cosine)
    torch.testing.assert_close(loss(embeddings, labels), F.cross_entropy(logits, labels))


def test_arcface_target_stays_finite_and_monotone_past_pi() -> None:
    sim = torch.linspace(-1, 1, 201, dtype=torch.float64, requires_grad=True)
    loss = ArcFaceLoss(2, 2, m=0.5)
    target = loss.margin_sim(sim[:, None].expand(-1, 2), torch.tensor([[True, False]]))[:, 0]
    target.sum().backward()
    assert torch.isfinite(sim.grad).all() and (target.diff() > 0).all()


def test_softmax_loss_draws_only_its_classifier_from_the_rng() -> None:
    # Checking the arguments builds nothing: the classifier is what nn.Linear gives on that seed.
    torch.manual_seed(0)
    loss = SoftmaxLoss(4, 8)
    torch.manual_seed(0)
    reference = torch.nn.Linear(8, 4)
    torch.testing.assert_close(loss.classifier.weight, reference.weight)


def test_softmax_stats_are_the_cosines_to_the_classifier_at_the_forward() -> None:
    # They are computed at their first read (LazyStats), here after an optimiser step that
    # changes the classifier in place: they must still describe the forward's weights.
    torch.manual_seed(0)
    loss = SoftmaxLoss(4, 8)
    x, labels = torch.randn(6, 8, requires_grad=True), torch.tensor([0, 1, 2, 3, 0, 1])
    weight = loss.classifier.weight.detach().clone()
    loss(x, labels).backward()
    torch.optim.SGD(loss.parameters(), lr=1.0).step()
    assert not torch.equal(weight, loss.classifier.weight)
    sim = F.normalize(x.detach(), dim=1) @ F.normalize(weight, dim=1).T
    pos = F.one_hot(labels, 4).bool()
    torch.testing.assert_close(loss.last_stats["sp_mean"], sim[pos].mean())
    torch.testing.assert_close(loss.last_stats["sn_mean"], sim[~pos].mean())
    assert loss.last_stats["active_fraction"] == 1


def test_lazy_stats_compute_once_and_only_when_read() -> None:
    calls = []

    def compute() -> dict[str, torch.Tensor]:
        calls.append(1)
        return {"sp_mean": torch.tensor(0.5)}

    stats = LazyStats(compute)
    assert calls == []
    assert dict(stats) == {"sp_mean": torch.tensor(0.5)} and len(stats) == 1
    assert stats["sp_mean"] == 0.5 and calls == [1]


def test_cosface_subtracts_m_in_the_dtype_of_the_similarities() -> None:
    sim = torch.linspace(-1, 1, 12, dtype=torch.float64).reshape(4, 3)
    pos = F.one_hot(torch.tensor([0, 2, 1, 0]), 3).bool()
    target = CosFaceLoss(3, 2, m=0.35).margin_sim(sim, pos)
    assert target.dtype == torch.float64
    assert torch.equal(target[pos], sim[pos] - 0.35)  # not 0.3499999940, m rounded to float32
    assert torch.equal(target[~pos], sim[~pos])


def test_am_softmax_is_cosface() -> None:
    assert AMSoftmaxLoss is CosFaceLoss


@pytest.mark.parametrize(
    "factory",
    [
        lambda: SoftmaxLoss(4, 8),
        lambda: NormFaceLoss(4, 8),
        lambda: CosFaceLoss(4, 8),
        lambda: ArcFaceLoss(4, 8),
        lambda: ClassProxies(4, 8),
    ],
)
def test_label_outside_num_classes_is_an_error(factory) -> None:
    with pytest.raises(ValueError, match="set num_classes to at least 6"):
        factory()(torch.randn(3, 8), torch.tensor([0, 5, 1]))
    with pytest.raises(ValueError, match=r"got min -1 and max 1; remap the labels to 0\.\.C-1"):
        factory()(torch.randn(3, 8), torch.tensor([0, -1, 1]))


@pytest.mark.parametrize(
    ("factory", "match"),
    [
        (lambda: SoftmaxLoss(1, 8), "^SoftmaxLoss: num_classes must be >= 2, got 1"),
        (lambda: SoftmaxLoss(4, 0), "^SoftmaxLoss: embedding_dim must be >= 1, got 0"),
        (lambda: ClassProxies(1, 8), "^ClassProxies: num_classes must be >= 2, got 1"),
        (lambda: NormFaceLoss(4, 8, scale=0), "s \\(scale\\) must be > 0"),
        (lambda: CosFaceLoss(4, 8, m=1.2), "m must be in"),
        (lambda: CosFaceLoss(4, 8, s=-1), "must be > 0"),
        (lambda: ArcFaceLoss(4, 8, m=2.0), "m must be in \\[0, 1.5708\\)"),
        (lambda: ArcFaceLoss(4, 8, s=0), "must be > 0"),
    ],
)
def test_constructor_rejects_bad_hyper_parameters(factory, match) -> None:
    with pytest.raises(ValueError, match=match):
        factory()
