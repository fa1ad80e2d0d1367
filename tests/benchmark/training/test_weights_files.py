"""Weights from a local file (safetensors or a torch state dict): exact round trip, clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest
import timm
import torch
from safetensors.torch import save_file
from timm.layers import resample_abs_pos_embed

from benchmark.training.embedders import BackboneFeatures, Embedder

TINY_VIT = "test_vit"  # patch 16, 64-d tokens, built for 160 px: a 10 x 10 grid


def tiny_vit_state(seed: int = 0, **kwargs: object) -> dict[str, torch.Tensor]:
    """A random tiny ViT's full state dict (with its classifier, as timm saves it)."""
    torch.manual_seed(seed)
    return timm.create_model(TINY_VIT, pretrained=False, **kwargs).state_dict()


def assert_loaded(embedder: Embedder | BackboneFeatures, state: dict[str, torch.Tensor]) -> None:
    loaded = embedder.backbone.state_dict()
    assert set(loaded) == {k for k in state if not k.startswith("head.")}
    for key, tensor in loaded.items():
        assert torch.equal(tensor, state[key]), key


@pytest.mark.parametrize("form", ["safetensors", "pth", "ddp_pth", "checkpoint"])
def test_a_file_written_here_loads_back_exactly(tmp_path: Path, form: str) -> None:
    state = tiny_vit_state()
    path = tmp_path / f"vit.{'safetensors' if form == 'safetensors' else 'pth'}"
    if form == "safetensors":
        save_file(state, path)
    elif form == "pth":
        torch.save(state, path)
    elif form == "ddp_pth":  # DistributedDataParallel's `module.` prefix is stripped
        torch.save({f"module.{k}": v for k, v in state.items()}, path)
    else:  # a training checkpoint of a wrapper whose backbone is `backbone.`
        torch.save({"state_dict": {f"backbone.{k}": v for k, v in state.items()}}, path)
    embedder = Embedder(TINY_VIT, embedding_dim=4, pretrained=str(path), pooling="cls")
    assert embedder.pretrained_source == str(path)
    assert_loaded(embedder, state)
    assert_loaded(BackboneFeatures(TINY_VIT, pretrained=str(path), pooling="cls"), state)


def test_positional_embeddings_of_another_grid_are_resampled(tmp_path: Path) -> None:
    state = tiny_vit_state(img_size=32)  # a 2 x 2 grid: pos_embed [1, 1 + 4, 64]
    save_file(state, tmp_path / "vit32.safetensors")
    embedder = Embedder(
        TINY_VIT, embedding_dim=4, pretrained=str(tmp_path / "vit32.safetensors"), pooling="cls"
    )
    expected = resample_abs_pos_embed(state["pos_embed"], [10, 10], [2, 2], num_prefix_tokens=1)
    assert embedder.backbone.pos_embed.shape == (1, 1 + 100, 64)
    torch.testing.assert_close(embedder.backbone.pos_embed.data, expected)
    torch.testing.assert_close(embedder.backbone.blocks[0].attn.qkv.weight.data, state[
        "blocks.0.attn.qkv.weight"
    ])  # fmt: skip


def wrong_file(tmp_path: Path, state: dict[str, torch.Tensor]) -> str:
    path = tmp_path / "wrong.safetensors"
    save_file(state, path)
    return str(path)


def test_a_file_of_another_patch_size_names_both(tmp_path: Path) -> None:
    path = wrong_file(tmp_path, tiny_vit_state(patch_size=8))
    match = (
        r"patch_embed.proj.weight has shape \(64, 3, 8, 8\) in the file but \(64, 3, 16, 16\) "
        "in 'test_vit': the file is for a patch-8 model and 'test_vit' has patch 16"
    )
    with pytest.raises(ValueError, match=match):
        Embedder(TINY_VIT, pretrained=path, pooling="cls")


def test_missing_unexpected_and_misshapen_tensors_are_named(tmp_path: Path) -> None:
    state = tiny_vit_state()
    missing = {k: v for k, v in state.items() if not k.startswith("blocks.5.")}
    match = (
        r"do not fit backbone 'test_vit': 12 missing keys: blocks\.5\.norm1\.weight, .* "
        r"and 7 more\. Save the file from timm\.create_model\('test_vit'\)\.state_dict\(\)"
    )
    with pytest.raises(ValueError, match=match):
        Embedder(TINY_VIT, pretrained=wrong_file(tmp_path, missing), pooling="cls")
    extra = dict(state, **{"blocks.6.norm1.weight": torch.ones(64)})
    with pytest.raises(ValueError, match=r"1 unexpected keys: blocks\.6\.norm1\.weight\. Save"):
        Embedder(TINY_VIT, pretrained=wrong_file(tmp_path, extra), pooling="cls")
    match = (
        r"18 tensors of another shape: blocks\.0\.mlp\.fc1\.bias \(128,\) in the file, \(192,\) "
        r"in the model, blocks\.0\.mlp\.fc1\.weight \(128, 64\) in the file, \(192, 64\) in the "
        r"model, .* and 13 more"
    )
    with pytest.raises(ValueError, match=match):
        Embedder(
            TINY_VIT, pretrained=wrong_file(tmp_path, tiny_vit_state(mlp_ratio=2.0)), pooling="cls"
        )
    with pytest.raises(ValueError, match="do not fit backbone 'test_efficientnet'"):
        Embedder("test_efficientnet", pretrained=wrong_file(tmp_path, state))


def test_a_file_that_is_not_safetensors_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "notes.safetensors").write_text("not weights")
    with pytest.raises(ValueError, match="is not a safetensors file"):
        Embedder(TINY_VIT, pretrained=str(tmp_path / "notes.safetensors"), pooling="cls")
