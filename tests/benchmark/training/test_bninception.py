"""BN-Inception: the state-dict layout of Cadene's `bn_inception-52deb4733.pth`, built here from
the paper's Table 1 independently of `benchmark/_bninception.py`, and the forward shapes."""

from __future__ import annotations

import urllib.error
from pathlib import Path

import pytest
import torch

from benchmark.training.bninception import BNInception
from benchmark.training.embedders import Embedder

# Ioffe & Szegedy 2015, Table 1: #1x1, #3x3 reduce, #3x3, double #3x3 reduce, double #3x3,
# pool projection (0 = pass-through of the pooled input, in the stride-2 blocks 3c and 4e).
TABLE_1 = {
    "3a": (64, 64, 64, 64, 96, 32),
    "3b": (64, 64, 96, 64, 96, 64),
    "3c": (0, 128, 160, 64, 96, 0),
    "4a": (224, 64, 96, 96, 128, 128),
    "4b": (192, 96, 128, 96, 128, 128),
    "4c": (160, 128, 160, 128, 160, 128),
    "4d": (96, 128, 192, 160, 192, 128),
    "4e": (0, 128, 192, 192, 256, 0),
    "5a": (352, 192, 320, 160, 224, 128),
    "5b": (352, 192, 320, 192, 224, 128),
}


def expected_layout() -> dict[str, tuple[int, ...]]:
    """Key -> shape of the checkpoint (no `num_batches_tracked`: it predates PyTorch 0.4)."""
    layout: dict[str, tuple[int, ...]] = {}

    def conv_bn(name: str, cin: int, cout: int, k: int) -> None:
        layout[f"{name}.weight"], layout[f"{name}.bias"] = (cout, cin, k, k), (cout,)
        for tensor in ("weight", "bias", "running_mean", "running_var"):
            layout[f"{name}_bn.{tensor}"] = (cout,)

    conv_bn("conv1_7x7_s2", 3, 64, 7)
    conv_bn("conv2_3x3_reduce", 64, 64, 1)
    conv_bn("conv2_3x3", 64, 192, 3)
    channels = 192  # each block's input is the previous block's concatenated output
    for block, (c1, r3, c3, rd, cd, proj) in TABLE_1.items():
        p = f"inception_{block}"
        if c1:
            conv_bn(f"{p}_1x1", channels, c1, 1)
        conv_bn(f"{p}_3x3_reduce", channels, r3, 1)
        conv_bn(f"{p}_3x3", r3, c3, 3)
        conv_bn(f"{p}_double_3x3_reduce", channels, rd, 1)
        conv_bn(f"{p}_double_3x3_1", rd, cd, 3)
        conv_bn(f"{p}_double_3x3_2", cd, cd, 3)
        if proj:
            conv_bn(f"{p}_pool_proj", channels, proj, 1)
        channels = c1 + c3 + cd + (proj or channels)
    assert channels == 1024
    layout["last_linear.weight"], layout["last_linear.bias"] = (1000, 1024), (1000,)
    return layout


def random_checkpoint() -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    return {k: torch.rand(shape, generator=gen) + 0.5 for k, shape in expected_layout().items()}


def test_state_dict_has_exactly_the_checkpoint_keys_and_shapes() -> None:
    ours = {
        k: tuple(v.shape)
        for k, v in BNInception().state_dict().items()
        if not k.endswith("num_batches_tracked")
    }
    expected = expected_layout()
    assert sorted(ours) == sorted(expected)
    assert ours == expected
    assert len(expected) == 416
    assert expected["inception_3a_3x3_reduce_bn.running_mean"] == (64,)


def test_checkpoint_loads_strictly_and_a_wrong_shape_does_not() -> None:
    model, state = BNInception(), random_checkpoint()
    model.load_state_dict(state, strict=True)
    torch.testing.assert_close(
        model.inception_5b_pool_proj.weight, state["inception_5b_pool_proj.weight"]
    )
    state["inception_4c_3x3.weight"] = torch.zeros(160, 128, 1, 1)
    with pytest.raises(RuntimeError, match=r"inception_4c_3x3\.weight"):
        BNInception().load_state_dict(state, strict=True)


def test_forward_shapes() -> None:
    model = BNInception().eval()
    with torch.no_grad():
        assert model.forward_features(torch.rand(2, 3, 224, 224)).shape == (2, 1024, 7, 7)
        assert model(torch.rand(2, 3, 64, 64)).shape == (2, 1000)
        assert BNInception(num_classes=0)(torch.rand(1, 3, 64, 96)).shape == (1, 1024)


def test_image_sides_that_break_the_stride_2_blocks_are_an_error() -> None:
    with pytest.raises(ValueError, match="multiples of 32"), torch.no_grad():
        BNInception(num_classes=0).forward_features(torch.rand(1, 3, 200, 200))


def test_embedder_loads_the_checkpoint_from_a_path(tmp_path: Path) -> None:
    path = tmp_path / "bn_inception-52deb4733.pth"
    state = random_checkpoint()
    torch.save(state, path)
    embedder = Embedder("bninception", embedding_dim=8, pretrained=str(path))
    assert embedder.pretrained_source == str(path)
    torch.testing.assert_close(embedder.backbone.conv1_7x7_s2.weight, state["conv1_7x7_s2.weight"])
    assert embedder.backbone.last_linear is None  # headless: the ImageNet classifier is dropped
    assert embedder(torch.rand(2, 3, 64, 64)).shape == (2, 8)


def test_pretrained_true_offline_says_to_pass_a_path(monkeypatch: pytest.MonkeyPatch) -> None:
    def offline(*args: object, **kwargs: object) -> None:
        raise urllib.error.URLError("[Errno -2] Name or service not known")

    monkeypatch.setattr(torch.hub, "load_state_dict_from_url", offline)
    with pytest.raises(RuntimeError, match=r"pretrained=<path to bn_inception-52deb4733\.pth>"):
        Embedder("bninception", pretrained=True)
