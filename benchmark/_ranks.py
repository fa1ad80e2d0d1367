"""Positions of every positive in each query's ranking, counted without sorting the gallery.

For a query with positives of reference similarities t_1 ≥ … ≥ t_R, the k-th positive sits at

    position_k = k + #{negatives j : s_j ≥ t_k}          (1-based; ties rank negatives first)

and every metric is a function of these positions. The counts come from one low-precision
similarity block per query chunk: an item whose shortlist score s̃ is more than ε away from t_k
is on a known side of it (|s̃ - s| ≤ ε, see `_similarity.shortlist_error`), and only the items
within ε of some threshold get their exact similarity recomputed. Memory is one block of
`chunk × N` shortlist scores plus the candidates above each query's lowest threshold.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from benchmark._similarity import (
    UnitEmbeddings,
    exact_similarities,
    output_error,
    raw_error,
    raw_similarities,
    shortlist_error,
)

Block = Callable[[Tensor, Tensor], Tensor]  # (low queries [B, D], low gallery [N, D]) -> [B, N]
_ROW_SPAN = 8.0  # rows are offset by 8·r so one sorted array serves the whole chunk (|s| < 4)


@dataclass(frozen=True)
class PositiveRanks:
    """Positions of the positives, query by query.

    `positions [P]` int64, 1-based and ascending within each query; `counts [Q]` the number of
    positives R of each query (0 for a skipped query); queries in label order
    (the metrics are means over queries, so the order does not matter).
    """

    positions: Tensor
    counts: Tensor


def _same_label_pairs(q_labels: Tensor, g_order: Tensor, g_sorted: Tensor) -> tuple[Tensor, Tensor]:
    """(row, gallery index) of every gallery item sharing the row's label; rows ascending, and
    gallery indices ascending within a row (g_order is a stable sort)."""
    start = torch.searchsorted(g_sorted, q_labels, side="left")
    sizes = torch.searchsorted(g_sorted, q_labels, side="right") - start
    rows = torch.repeat_interleave(torch.arange(q_labels.numel()), sizes)
    offsets = torch.arange(rows.numel()) - torch.repeat_interleave(sizes.cumsum(0) - sizes, sizes)
    return rows, g_order[start[rows] + offsets]


def _padded_thresholds(rows: Tensor, sims: Tensor, n_rows: int) -> tuple[Tensor, Tensor]:
    """Positive similarities per row, ascending, padded with +inf: (T [B, Pmax], counts [B])."""
    counts = torch.bincount(rows, minlength=n_rows)
    width = int(counts.max().item()) if rows.numel() else 0
    table = torch.full((n_rows, max(width, 1)), torch.inf, dtype=torch.float32)
    order = torch.argsort(rows * 4.0 + sims.to(torch.float64), stable=True)  # by row, then sim
    rows, sims = rows[order], sims[order]
    column = torch.arange(rows.numel()) - (counts.cumsum(0) - counts)[rows]
    table[rows, column] = sims
    return table, counts


def _count_below(
    sorted_keys: Tensor, keys: Tensor, rows: Tensor, width: int, right: bool
) -> Tensor:
    """Per key, how many of its row's `width` sorted boundaries lie below (or at, if right)."""
    found = torch.searchsorted(sorted_keys, keys, right=right)
    return found - rows * width


def _side_counts(
    table64: Tensor, eps: Tensor, rows: Tensor, values: Tensor
) -> tuple[Tensor, Tensor]:
    """For values within eps[row] of the reference: thresholds surely below, and maybe at or below.

    Rows are offset by 8·r so that one sorted array serves the whole chunk (|s| < 4); the
    padding (+inf thresholds) sits at 8·r + 4, above every value of its row.
    """
    n_rows, width = table64.shape
    offset = torch.arange(n_rows, dtype=torch.float64)[:, None] * _ROW_SPAN
    upper = (offset + table64 + eps[:, None]).flatten()
    lower = (offset + table64 - eps[:, None]).flatten()
    keys = rows * _ROW_SPAN + values
    surely = _count_below(upper, keys, rows, width, right=False)
    maybe = _count_below(lower, keys, rows, width, right=True)
    return surely, maybe


def _exact_counts(thresholds: Tensor, sims: Tensor) -> Tensor:
    """#{m : T[m] ≤ s} for each (threshold row [M, Pmax], similarity [M]) pair, in pieces."""
    out = torch.empty(sims.numel(), dtype=torch.int64)
    piece = max(1, 2**24 // thresholds.shape[1])
    for start in range(0, sims.numel(), piece):
        rows = thresholds[start : start + piece]
        out[start : start + piece] = (rows <= sims[start : start + piece, None]).sum(1)
    return out


def _at_least(scores: Tensor, floor: Tensor) -> Tensor:
    """scores [B, N] ≥ floor [B] per row, as a bool mask.

    bfloat16 compares are slow on the CPU, but for a positive floor the int16 bit patterns
    order like the values (every negative value, -0 and -inf has the sign bit, so a negative
    int16), which halves the time of this pass; rows with floor ≤ 0 are redone as floats.
    """
    if scores.dtype != torch.bfloat16:
        return scores >= floor[:, None]
    mask = scores.view(torch.int16) >= floor.view(torch.int16)[:, None]
    low = (floor <= 0).nonzero()[:, 0]
    if low.numel():
        mask[low] = scores[low] >= floor[low, None]
    return mask


def _chunk_ranks(
    q: UnitEmbeddings,
    g: UnitEmbeddings,
    q_index: Tensor,
    rows: Tensor,
    g_index: Tensor,
    positive: Tensor,
    block: Block,
    eps_in: float,
) -> tuple[Tensor, Tensor]:
    """Positions [P_chunk] and positive counts [B] for the queries `q_index [B]`."""
    n_rows = q_index.numel()
    sims = exact_similarities(q, g, q_index, rows[positive], g_index[positive])
    table, counts = _padded_thresholds(rows[positive], sims, n_rows)
    width = table.shape[1]
    finite = torch.isfinite(table)
    abs_max = torch.where(finite, table.abs(), 0).amax(1)
    scores = block(q.low[q_index.to(q.low.device)], g.low)  # [B, N]
    eps = eps_in + output_error(scores.dtype, abs_max, eps_in) + 2.0**-30  # [B] float64
    scores[rows.to(scores.device), g_index.to(scores.device)] = -torch.inf  # self, same id+cam
    # Lowest threshold minus ε, nudged down so that rounding to the block dtype stays below it.
    floor = torch.where(counts > 0, table[:, 0].to(torch.float64) - eps - 2.0**-7, torch.inf)
    floor = floor.to(device=scores.device, dtype=scores.dtype)
    cand_rows, cand_cols = torch.nonzero(_at_least(scores, floor), as_tuple=True)
    values = scores[cand_rows, cand_cols].to(device="cpu", dtype=torch.float64)
    cand_rows, cand_cols = cand_rows.cpu(), cand_cols.cpu()
    del scores
    table64 = torch.where(finite, table.to(torch.float64), _ROW_SPAN / 2)
    surely, maybe = _side_counts(table64, eps, cand_rows, values)
    band = maybe > surely
    if band.any() and g.low.dtype != torch.float32:
        # Second look at the bfloat16 band: float32 dot products of the raw rows (sparse, so
        # only these pairs are computed), within `raw_error` of the reference.
        idx = band.nonzero()[:, 0]
        approx = raw_similarities(q, g, q_index, cand_rows[idx], cand_cols[idx])
        eps2 = torch.full((n_rows,), raw_error(q.dim) + 2.0**-30, dtype=torch.float64)
        surely[idx], maybe[idx] = _side_counts(table64, eps2, cand_rows[idx], approx)
        band = maybe > surely
    if band.any():
        exact = exact_similarities(q, g, q_index, cand_rows[band], cand_cols[band])
        surely[band] = _exact_counts(table[cand_rows[band]], exact)
    hist = torch.bincount(cand_rows * (width + 1) + surely, minlength=n_rows * (width + 1))
    hist = hist.view(n_rows, width + 1)
    above = hist.flip(1).cumsum(1).flip(1)[:, 1:]  # above[r, m]: negatives with s ≥ T[r, m]
    rank_desc = counts[:, None] - torch.arange(width)[None, :]  # k of the m-th ascending positive
    positions = (rank_desc + above).flip(1)  # descending similarity = ascending position
    valid = (torch.arange(width)[None, :] < counts[:, None]).flip(1)
    return positions[valid], counts


def positive_ranks(
    q: UnitEmbeddings,
    g: UnitEmbeddings,
    q_labels: Tensor,
    g_labels: Tensor,
    *,
    same_set: bool,
    q_cams: Tensor | None,
    g_cams: Tensor | None,
    block: Block,
    chunk_size: int,
) -> PositiveRanks:
    """Positions of all positives of every query; see the module docstring for the rule.

    Excluded from each query's ranking: itself (`same_set`), and gallery items with its label
    and its camera (when cameras are given). Junk gallery items must be removed by the caller.
    """
    eps_in = shortlist_error(q, g)
    g_order = torch.argsort(g_labels, stable=True)
    g_sorted = g_labels[g_order]
    # Queries in label order: a chunk then touches few label groups (ranks do not depend on it).
    q_order = torch.argsort(q_labels, stable=True)
    positions, counts = [], []
    for start in range(0, q_labels.numel(), chunk_size):
        q_index = q_order[start : start + chunk_size]
        rows, g_index = _same_label_pairs(q_labels[q_index], g_order, g_sorted)
        if same_set:
            positive = g_index != q_index[rows]
        elif q_cams is not None and g_cams is not None:
            positive = g_cams[g_index] != q_cams[q_index][rows]
        else:
            positive = torch.ones_like(rows, dtype=torch.bool)
        pos, cnt = _chunk_ranks(q, g, q_index, rows, g_index, positive, block, eps_in)
        positions.append(pos)
        counts.append(cnt)
    return PositiveRanks(torch.cat(positions), torch.cat(counts))
