"""Input checks of RetrievalEvaluator.evaluate: each failure names the argument and the fix."""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

_CHECK_ROWS = 4096  # rows per finiteness check, so the check allocates little


def _as_tensor(value: Tensor | np.ndarray, name: str) -> Tensor:
    if isinstance(value, np.ndarray):
        return torch.from_numpy(value)
    if isinstance(value, Tensor):
        return value.detach().cpu()
    raise ValueError(f"{name} must be a torch.Tensor or numpy array, got {type(value).__name__}")


def check_embeddings(value: Tensor | np.ndarray, name: str) -> Tensor:
    """A finite, non-empty floating [N, D] tensor on the CPU (float32 kept without a copy)."""
    x = _as_tensor(value, name)
    if x.ndim != 2:
        raise ValueError(f"{name} must be 2-D [N, D], got shape {tuple(x.shape)}")
    if x.shape[0] == 0 or x.shape[1] == 0:
        raise ValueError(f"{name} is empty (shape {tuple(x.shape)}); evaluate at least one item")
    if not x.is_floating_point():
        raise ValueError(f"{name} must be floating point, got {x.dtype}")
    for start in range(0, x.shape[0], _CHECK_ROWS):
        part = x[start : start + _CHECK_ROWS]
        if not bool(torch.isfinite(part).all()):
            row = start + int((~torch.isfinite(part)).any(1).nonzero()[0])
            raise ValueError(f"{name} has NaN or Inf values (first in row {row})")
        if bool((part == 0).all(1).any()):
            row = start + int((part == 0).all(1).nonzero()[0])
            raise ValueError(f"{name} row {row} is all zeros: its cosine similarity is undefined")
    return x


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
