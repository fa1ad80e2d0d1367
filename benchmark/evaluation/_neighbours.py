"""Exact nearest-neighbour lists of a whole set, from float32 panels and exact re-checks.

For every item of the N, its `width` most similar items under the reference similarity s (ties
by index) and its least similar one. Panels of float32 products s̃ (rows [a, b) × columns
[a, N), each pair once) fold into each row's running lists of its largest and smallest s̃
(`_kreciprocal.fold_panel`). With |s̃ - s| ≤ ε and v a row's width-th largest s̃, every item of
the exact top `width` has s̃ ≥ v - 2ε: those candidates get their exact s, and a row whose list
ends inside that margin is recomputed whole. The least similar item is found the same way.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from benchmark.evaluation import _kreciprocal
from benchmark.evaluation.precision import ieee_float32
from benchmark.evaluation.similarity import UnitEmbeddings, exact_similarities, shortlist_error

_MARGIN = 16  # list entries kept beyond the ones asked for, to hold the items within 2ε


@dataclass(frozen=True)
class Neighbours:
    """Each item's nearest items and least similarity, under the reference similarity."""

    rank: Tensor  # [N, width] int64: most similar first (s descending, then index ascending)
    least: Tensor  # [N] float64: min_j s(i, j) over all N items
    eps: float  # bound on |s̃ - s| of the float32 products


def _candidates(
    x: UnitEmbeddings, values: Tensor, index: Tensor, limit: Tensor, sign: float, chunk: int
) -> tuple[Tensor, Tensor]:
    """(row, column) of every item with sign·s̃ ≥ limit[row], from a row's list of its largest
    sign·s̃ (`values`, `index` [N, keep], descending); a row whose list ends at or above its
    limit may miss some and is recomputed whole."""
    inner = values.to(torch.float64) >= limit[:, None]  # [N, keep]
    low = x.low.values  # [N, D] float32
    partial = inner[:, -1] & (values.shape[1] < low.shape[0])
    rows, slots = (inner & ~partial[:, None]).nonzero(as_tuple=True)
    found = [(rows, index[rows, slots])]
    redo = partial.nonzero()[:, 0]
    for start in range(0, redo.numel(), chunk):
        r = redo[start : start + chunk]
        s = sign * (low[r] @ low.T).to(torch.float64)  # [B, N]
        hit_r, hit_c = (s >= limit[r, None]).nonzero(as_tuple=True)
        found.append((r[hit_r], hit_c))
    return torch.cat([f[0] for f in found]), torch.cat([f[1] for f in found])


def nearest_neighbours(x: UnitEmbeddings, width: int, chunk: int) -> Neighbours:
    """Exact `width` nearest items and least similarity of every row of `x` (its float32 copy),
    in the memory of one chunk × N float32 panel and N × (width + 2·16) list entries."""
    low = x.low.values  # [N, D] float32
    n = low.shape[0]
    eps = shortlist_error(x, x)
    keep_near, keep_far = min(n, width + _MARGIN), min(n, _MARGIN)
    near_v, far_v = torch.full((n, keep_near), -torch.inf), torch.full((n, keep_far), -torch.inf)
    near_i = torch.full((n, keep_near), -1, dtype=torch.int64)
    far_i = torch.full((n, keep_far), -1, dtype=torch.int64)
    buffer = torch.empty(min(chunk, n) * n)
    with ieee_float32():
        for a in range(0, n, chunk):
            b = min(n, a + chunk)
            panel = buffer[: (b - a) * (n - a)].view(b - a, n - a)
            torch.mm(low[a:b], low[a:].T, out=panel)  # [B, N - a]
            _kreciprocal.fold_panel(panel.numpy(), a, near_v.numpy(), near_i.numpy(),
                                    far_v.numpy(), far_i.numpy())  # fmt: skip
        del buffer
        v = near_v[:, width - 1].to(torch.float64)  # the width-th largest s̃ of each row
        rows, cols = _candidates(x, near_v, near_i, v - 2 * eps, 1.0, chunk)
        m = far_v[:, 0].to(torch.float64)  # minus the smallest s̃ of each row
        least_rows, least_cols = _candidates(x, far_v, far_i, m - 2 * eps, -1.0, chunk)
    rank = _top(rows, cols, exact_similarities(x, x, rows, cols), n, width)
    s = exact_similarities(x, x, least_rows, least_cols).to(torch.float64)
    least = torch.full((n,), torch.inf, dtype=torch.float64)
    least.scatter_reduce_(0, least_rows, s, reduce="amin")
    return Neighbours(rank, least, eps)


def _top(rows: Tensor, cols: Tensor, s: Tensor, n: int, width: int) -> Tensor:
    """The first `width` columns of each row ordered by s descending, then column ascending."""
    order = torch.from_numpy(np.lexsort((cols.numpy(), -s.numpy(), rows.numpy())))
    rows, cols = rows[order], cols[order]
    start = torch.searchsorted(rows, torch.arange(n))  # every row has ≥ width candidates
    return cols[start[:, None] + torch.arange(width)]  # [N, width]
