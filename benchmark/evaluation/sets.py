"""What each protocol compares: the checked query and gallery sets, and who is excluded.

`same_set` (CUB, Cars, SOP): every item queries all the others; an item never retrieves
itself. `query_gallery` (Market-1501, MSMT17): gallery items labelled -1 (junk) are dropped
for every query, and a gallery item with the query's label AND camera is excluded from that
query's ranking (neither positive nor negative), as in the re-ID evaluation code of both
datasets. Each argument check names the argument and the fix.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from core.protocols import PROTOCOLS, RetrievalProtocol

__all__ = ["PROTOCOLS", "EvaluationSets", "RetrievalProtocol", "evaluation_sets", "excluded"]

JUNK = -1  # gallery label of images that no query may retrieve


@dataclass(frozen=True)
class EvaluationSets:
    """Float32 embeddings and int64 labels/cameras on the CPU, junk already removed.

    Under `same_set` the gallery is the query set itself (`gallery` is `query`).
    """

    query: Tensor  # [Q, D]
    query_labels: Tensor  # [Q]
    gallery: Tensor  # [G, D]
    gallery_labels: Tensor  # [G]
    query_cams: Tensor | None  # [Q]
    gallery_cams: Tensor | None  # [G]
    same_set: bool


def _as_tensor(value: Tensor | np.ndarray, name: str) -> Tensor:
    if isinstance(value, np.ndarray):
        if not value.dtype.isnative:  # big-endian data (`>f4`): torch reads native order only
            value = value.astype(value.dtype.newbyteorder("="))
        return torch.from_numpy(value if all(s >= 0 for s in value.strides) else value.copy())
    if isinstance(value, Tensor):
        return value.detach().cpu()
    raise ValueError(f"{name} must be a torch.Tensor or numpy array, got {type(value).__name__}")


def _embeddings(value: Tensor | np.ndarray, name: str) -> Tensor:
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


def _labels(value: Tensor | np.ndarray, name: str, n: int, emb_name: str) -> Tensor:
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


def evaluation_sets(
    protocol: RetrievalProtocol,
    query_emb: Tensor | np.ndarray,
    query_labels: Tensor | np.ndarray,
    gallery_emb: Tensor | np.ndarray | None = None,
    gallery_labels: Tensor | np.ndarray | None = None,
    query_cams: Tensor | np.ndarray | None = None,
    gallery_cams: Tensor | np.ndarray | None = None,
) -> EvaluationSets:
    """Check the arguments of `RetrievalEvaluator.evaluate` and apply the protocol's set rules."""
    q = _embeddings(query_emb, "query_emb")
    q_labels = _labels(query_labels, "query_labels", q.shape[0], "query_emb")
    if protocol == "same_set":
        if gallery_emb is not None or gallery_labels is not None or gallery_cams is not None:
            raise ValueError(
                "same_set uses the queries as the gallery: pass gallery_emb, gallery_labels "
                "and gallery_cams as None, or use protocol='query_gallery'"
            )
        return EvaluationSets(q, q_labels, q, q_labels, None, None, same_set=True)
    if gallery_emb is None or gallery_labels is None:
        raise ValueError(
            "query_gallery needs gallery_emb and gallery_labels; "
            "for a single set use protocol='same_set'"
        )
    g = _embeddings(gallery_emb, "gallery_emb")
    if g.shape[1] != q.shape[1]:
        raise ValueError(f"gallery_emb has dimension {g.shape[1]} but query_emb has {q.shape[1]}")
    g_labels = _labels(gallery_labels, "gallery_labels", g.shape[0], "gallery_emb")
    if (query_cams is None) != (gallery_cams is None):
        given = "query_cams" if query_cams is not None else "gallery_cams"
        raise ValueError(
            f"{given} given without the other side's cameras: pass both query_cams and "
            "gallery_cams (same id + same camera is excluded) or neither"
        )
    q_cams: Tensor | None = None
    g_cams: Tensor | None = None
    if query_cams is not None and gallery_cams is not None:
        q_cams = _labels(query_cams, "query_cams", q.shape[0], "query_emb")
        g_cams = _labels(gallery_cams, "gallery_cams", g.shape[0], "gallery_emb")
    kept = g_labels != JUNK
    if not bool(kept.all()):
        g, g_labels = g[kept], g_labels[kept]
        g_cams = g_cams[kept] if g_cams is not None else None
    if g.shape[0] == 0:
        raise ValueError("gallery_labels: every gallery item is junk (-1)")
    return EvaluationSets(q, q_labels, g, g_labels, q_cams, g_cams, same_set=False)


def excluded(same_label: Tensor, query_cams: Tensor | None, gallery_cams: Tensor | None) -> Tensor:
    """Which (query, gallery) pairs leave the ranking: the same label seen by the same camera.

    Shapes broadcast (pairs [P] or blocks [B, G]); without cameras nothing is excluded. The
    query's own entry under `same_set` is excluded by position, not by this rule.
    """
    if query_cams is None or gallery_cams is None:
        return same_label & False
    return same_label & (query_cams == gallery_cams)
