"""Fitting a weights file's state dict to a built backbone, with errors that name the keys.

`headless_state(model, state, name, source, classifier)` returns the tensors `model` loads with
`strict=True`:
1. a prefix every key shares (`module.` from DDP, `model.`, `backbone.`) is stripped;
2. the classifier tensors (timm's `pretrained_cfg["classifier"]`, e.g. `fc.*`, `head.*`) are
   dropped, since the backbone is built without one;
3. a token backbone's `pos_embed` for another (square) patch grid is resampled to the model's
   grid with timm's `resample_abs_pos_embed` (bicubic), as timm does when it loads weights;
4. anything else must match exactly: a missing key, an unexpected key or a tensor of another
   shape is a `ValueError` that names the first offenders and their shapes, and a patch
   embedding of another kernel says which patch size the file is for.
"""

from __future__ import annotations

import math
from typing import Any, cast

from timm.layers import resample_abs_pos_embed
from torch import Tensor, nn

WRAPPER_PREFIXES = ("module.", "model.", "backbone.")
_SHOWN = 5  # offending keys named in an error


def headless_state(
    model: nn.Module,
    state: dict[str, Tensor],
    name: str,
    source: str,
    classifier: str | tuple[str, ...] | None,
) -> dict[str, Tensor]:
    """The tensors of `state` that `model` loads with `strict=True` (module docstring)."""
    state = _unwrapped(state)
    names = (classifier,) if isinstance(classifier, str) else tuple(classifier or ())
    prefixes = tuple(f"{c}." for c in names)
    state = {k: v for k, v in state.items() if not (prefixes and k.startswith(prefixes))}
    expected = model.state_dict()
    if "pos_embed" in state and "pos_embed" in expected:
        state["pos_embed"] = _pos_embed_for(model, state["pos_embed"], expected["pos_embed"])
    patch = "patch_embed.proj.weight"
    if patch in state and patch in expected and state[patch].shape != expected[patch].shape:
        found, wanted = tuple(state[patch].shape), tuple(expected[patch].shape)
        raise ValueError(
            f"weights from {source} do not fit backbone {name!r}: {patch} has shape {found} "
            f"in the file but {wanted} in {name!r}: the file is for a patch-{found[-1]} model "
            f"and {name!r} has patch {wanted[-1]}; pick the backbone the file was saved from"
        )
    # BatchNorm's step counter is absent from older checkpoints (BN-Inception's); torch fills it
    # in when it loads one, as it does for any state dict without version metadata.
    missing = [k for k in expected if k not in state and not k.endswith(".num_batches_tracked")]
    unexpected = [k for k in state if k not in expected]
    shapes = [
        f"{k} {tuple(v.shape)} in the file, {tuple(expected[k].shape)} in the model"
        for k, v in state.items()
        if k in expected and v.shape != expected[k].shape
    ]
    problems = [
        f"{len(keys)} {what}: {', '.join(keys[:_SHOWN])}"
        + (f" and {len(keys) - _SHOWN} more" if len(keys) > _SHOWN else "")
        for what, keys in (
            ("missing keys", missing),
            ("unexpected keys", unexpected),
            ("tensors of another shape", shapes),
        )
        if keys
    ]
    if problems:
        raise ValueError(
            f"weights from {source} do not fit backbone {name!r}: {'; '.join(problems)}. Save the "
            f"file from timm.create_model({name!r}).state_dict() (docs: Modern backbones), or "
            "pick the backbone it was saved from"
        )
    return state


def _unwrapped(state: dict[str, Tensor]) -> dict[str, Tensor]:
    """`state` without a wrapper prefix that all its keys share (repeatedly: `module.model.`)."""
    while state:
        prefix = next((p for p in WRAPPER_PREFIXES if all(k.startswith(p) for k in state)), None)
        if prefix is None:
            break
        state = {k[len(prefix) :]: v for k, v in state.items()}
    return state


def _pos_embed_for(model: nn.Module, found: Tensor, wanted: Tensor) -> Tensor:
    """`found` [1, N', C] resampled to the model's grid when only the grid differs."""
    if found.shape == wanted.shape or found.ndim != 3 or found.shape[2] != wanted.shape[2]:
        return found  # equal, or a mismatch the checks that follow report
    vit = cast(Any, model)  # a timm ViT: no_embed_class, num_prefix_tokens, patch_embed
    prefix = 0 if getattr(vit, "no_embed_class", False) else int(vit.num_prefix_tokens)
    side = math.isqrt(found.shape[1] - prefix)
    if side * side != found.shape[1] - prefix:
        return found  # not a square grid: reported as a shape mismatch
    grid = list(vit.patch_embed.grid_size)
    return resample_abs_pos_embed(found, grid, [side, side], num_prefix_tokens=prefix)
