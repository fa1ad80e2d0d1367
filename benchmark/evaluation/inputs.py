"""Input checks of RetrievalEvaluator.evaluate: each failure names the argument and the fix."""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor


def _as_tensor(value: Tensor | np.ndarray, name: str) -> Tensor:
    if isinstance(value, np.ndarray):
        return torch.from_numpy(value)
    if isinstance(value, Tensor):
        return value.detach().cpu()
    raise ValueError(f"{name} must be a torch.Tensor or numpy array, got {type(value).__name__}")


def check_embeddings(value: Tensor | np.ndarray, name: str) -> Tensor:
    """A non-empty float32 [N, D] tensor on the CPU (no copy if it is one); NaN, Inf and zero
    rows are caught by `similarity.prepare`, which computes the norms anyway."""
    x = _as_tensor(value, name)
    if x.ndim != 2:
        raise ValueError(f"{name} must be 2-D [N, D], got shape {tuple(x.shape)}")
    if x.shape[0] == 0 or x.shape[1] == 0:
        raise ValueError(f"{name} is empty (shape {tuple(x.shape)}); evaluate at least one item")
    if not x.is_floating_point():
        raise ValueError(f"{name} must be floating point, got {x.dtype}")
    return x.to(torch.float32).contiguous()  # the reference is defined on float32 inputs


def check_labels(value: Tensor | np.ndarray, name: str, n: int, emb_name: str) -> Tensor:
    """Integer labels [N] as int64; floats are refused rather than silently truncated."""
    y = _as_tensor(value, name)
    if y.ndim != 1:
        raise ValueError(f"{name} must be 1-D [N], got shape {tuple(y.shape)}")
    if y.is_floating_point() or y.is_complex() or y.dtype == torch.bool:
        raise ValueError(
            f"{name} must be integer class ids, got dtype {y.dtype}; cast with .long()"
        )
    if y.shape[0] != n:
        raise ValueError(f"{name} has {y.shape[0]} entries but {emb_name} has {n} rows")
    return y.to(torch.int64)


def check_cameras(
    query_cams: Tensor | np.ndarray | None,
    gallery_cams: Tensor | np.ndarray | None,
    n_query: int,
    n_gallery: int,
) -> tuple[Tensor | None, Tensor | None]:
    """Both camera vectors or neither: the same-camera rule needs both sides."""
    if (query_cams is None) != (gallery_cams is None):
        given = "query_cams" if query_cams is not None else "gallery_cams"
        raise ValueError(
            f"{given} given without the other side's cameras: pass both query_cams and "
            "gallery_cams (same id + same camera is excluded) or neither"
        )
    if query_cams is None or gallery_cams is None:
        return None, None
    return (
        check_labels(query_cams, "query_cams", n_query, "query_emb"),
        check_labels(gallery_cams, "gallery_cams", n_gallery, "gallery_emb"),
    )
