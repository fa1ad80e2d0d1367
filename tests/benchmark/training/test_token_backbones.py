"""Token backbones (timm's ViT family): pooling, input size, layer decay, CNNs unchanged."""

from __future__ import annotations

import pytest
import torch

from benchmark.training.embedders import BackboneFeatures, Embedder, GlobalPool
from benchmark.training.module import MetricLearningModule
from benchmark.training.tokens import TokenPool, is_token_backbone, layer_decay_groups
from losses import CircleLoss

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")
TINY_VIT = "test_vit"  # timm's test ViT: patch 16, 64-d tokens, 1 CLS token, 6 blocks


def tokens_of(embedder: Embedder, images: torch.Tensor) -> torch.Tensor:
    return embedder.backbone.forward_features(embedder.normalize_input(images))  # [B, N, C]


def test_timm_vit_family_names_are_token_backbones_and_cnns_are_not() -> None:
    for name in (
        "vit_small_patch14_dinov2.lvd142m",
        "vit_small_patch14_reg4_dinov2",
        "vit_base_patch16_clip_224.openai",
        "deit_small_distilled_patch16_224",
        "eva02_small_patch14_224",
    ):
        assert is_token_backbone(name), name
    for name in ("resnet50", "efficientnet_lite0", "bninception", "convnext_tiny"):
        assert not is_token_backbone(name), name


def test_token_poolings_against_the_tokens_by_hand() -> None:
    torch.manual_seed(0)
    images = torch.rand(2, 3, 48, 48)  # a 3 x 3 grid: 1 CLS + 9 patch tokens
    cls = Embedder(TINY_VIT, embedding_dim=4, pooling="cls").eval()
    tokens = tokens_of(cls, images)
    assert tokens.shape == (2, 10, 64)
    torch.testing.assert_close(cls.pooled_features(images), tokens[:, 0])
    mean = Embedder(TINY_VIT, embedding_dim=4, pooling="patch_mean").eval()
    mean.backbone.load_state_dict(cls.backbone.state_dict())
    torch.testing.assert_close(mean.pooled_features(images), tokens[:, 1:].mean(dim=1))
    both = Embedder(TINY_VIT, embedding_dim=4, pooling="cls_patch_mean").eval()
    both.backbone.load_state_dict(cls.backbone.state_dict())
    assert (cls.num_features, mean.num_features, both.num_features) == (64, 64, 128)
    expected = torch.cat([tokens[:, 0], tokens[:, 1:].mean(dim=1)], dim=1)  # [B, 2C]
    torch.testing.assert_close(both.pooled_features(images), expected)
    assert both(images).shape == (2, 4) and both.projection.in_features == 128


def test_registers_and_distillation_tokens_stay_out_of_the_patch_mean() -> None:
    tokens = torch.arange(2 * 7 * 3, dtype=torch.float64).view(2, 7, 3)  # 5 prefix, 2 patches
    pooled = TokenPool("cls_patch_mean", num_prefix_tokens=5)(tokens)
    torch.testing.assert_close(pooled, torch.cat([tokens[:, 0], tokens[:, 5:].mean(1)], dim=1))
    norm = torch.nn.LayerNorm(3, elementwise_affine=False).double()
    normed = TokenPool("cls_patch_mean", num_prefix_tokens=5)(tokens, norm)  # EVA's fc_norm
    torch.testing.assert_close(normed, torch.cat([norm(pooled[:, :3]), norm(pooled[:, 3:])], 1))
    reg = BackboneFeatures("vit_small_patch14_reg4_dinov2", pretrained=False, pooling="patch_mean")
    assert reg.pool.num_prefix_tokens == 5  # CLS + 4 registers


def test_any_image_size_pads_to_the_patch_grid() -> None:
    embedder = Embedder(TINY_VIT, embedding_dim=4, pooling="patch_mean").eval()
    assert tokens_of(embedder, torch.rand(1, 3, 64, 64)).shape[1] == 1 + 16  # 4 x 4 patches
    assert tokens_of(embedder, torch.rand(1, 3, 40, 56)).shape[1] == 1 + 3 * 4  # padded to 48 x 64


def test_cnn_features_are_the_global_pool_of_the_feature_map_bit_for_bit() -> None:
    torch.manual_seed(0)
    images = torch.rand(2, 3, 32, 32)
    for kind in ("avg", "gem"):
        embedder = Embedder("test_efficientnet", embedding_dim=4, pooling=kind).eval()
        assert isinstance(embedder.pool, GlobalPool)
        feature_map = embedder.backbone.forward_features(embedder.normalize_input(images))
        assert torch.equal(embedder.pooled_features(images), embedder.pool(feature_map))
        if kind == "avg":
            assert torch.equal(embedder.pooled_features(images), feature_map.mean(dim=(2, 3)))


@pytest.mark.parametrize(
    ("backbone", "pooling", "match"),
    [
        (TINY_VIT, "avg", r"pooling 'avg' does not pool 'test_vit', a token backbone.*'cls'"),
        ("test_efficientnet", "cls", r"pooling 'cls' does not pool .*a CNN.*'avg'"),
        (TINY_VIT, "median", "unknown pooling 'median'"),
        ("vit_medium_patch16_gap_256", "cls", "needs a CLS token.*patch_mean"),
    ],
)
def test_pooling_of_the_other_kind_of_backbone_is_an_error(backbone, pooling, match) -> None:
    with pytest.raises(ValueError, match=match):
        Embedder(backbone, embedding_dim=4, pooling=pooling)


def test_a_vit_embedder_has_no_batch_norm_and_trains() -> None:
    embedder = Embedder(TINY_VIT, embedding_dim=8, pooling="cls")
    norms = (torch.nn.BatchNorm1d, torch.nn.BatchNorm2d)
    assert not any(isinstance(m, norms) for m in embedder.modules())
    embedder(torch.rand(4, 3, 32, 32)).sum().backward()
    assert embedder.backbone.patch_embed.proj.weight.grad is not None


def test_layer_decay_scales_each_block_and_the_optimiser_uses_them() -> None:
    embedder = Embedder(TINY_VIT, embedding_dim=8, pooling="cls", layer_decay=0.5)
    groups = embedder.backbone_parameter_groups()
    depth = len(embedder.backbone.blocks)  # 6: layers 0 (embeddings) .. 7 (final norm)
    assert [scale for _, scale in groups] == [0.5**i for i in range(depth + 2)]
    names = {id(p): n for n, p in embedder.backbone.named_parameters()}
    assert {names[id(p)] for p in groups[0][0]} == {"norm.weight", "norm.bias"}
    assert all(names[id(p)].startswith("blocks.5.") for p in groups[1][0])
    assert {names[id(p)] for p in groups[-1][0]} >= {"cls_token", "pos_embed"}
    assert sum(len(p) for p, _ in groups) == len(list(embedder.backbone_parameters()))
    module = MetricLearningModule(embedder, CircleLoss(), backbone_lr=1e-3)
    optimiser = module.configure_optimizers()
    rates = {g["name"]: g["lr"] for g in optimiser.param_groups}
    assert rates["backbone.0"] == 1e-3 and rates["backbone.1"] == 5e-4 and "head" in rates
    assert rates[f"backbone.{depth + 1}"] == pytest.approx(1e-3 * 0.5 ** (depth + 1))
    plain = MetricLearningModule(Embedder(TINY_VIT, embedding_dim=8, pooling="cls"), CircleLoss())
    assert [g["name"] for g in plain.configure_optimizers().param_groups] == ["backbone", "head"]


def test_layer_decay_errors() -> None:
    with pytest.raises(ValueError, match=r"layer_decay must be None or in \(0, 1\]"):
        Embedder(TINY_VIT, pooling="cls", layer_decay=1.5)
    with pytest.raises(ValueError, match=r"for a token backbone; got 0\.7 for backbone 'resnet18'"):
        Embedder("resnet18", layer_decay=0.7)
    with pytest.raises(ValueError, match="transformer `blocks`"):
        layer_decay_groups(torch.nn.Linear(2, 2), 0.7)
