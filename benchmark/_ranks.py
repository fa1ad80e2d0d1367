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


@dataclass
class _Chunk:
    """One chunk of queries: its thresholds, bounds and the running negative-count histogram."""

    q_index: Tensor  # [B] query indices
    table: Tensor  # [B, W] float32 positive similarities, ascending, +inf padded
    table64: Tensor  # the same in float64, padding at _ROW_SPAN / 2
    counts: Tensor  # [B] positives per query
    eps: Tensor  # [B] float64 shortlist bound
    floor: Tensor  # [B] shortlist cut, block dtype, on the compute device
    hist: Tensor  # [B * (W + 1)] negatives per count of thresholds below them


def _chunk(q: UnitEmbeddings, g: UnitEmbeddings, q_index: Tensor, rows: Tensor,
           g_index: Tensor, eps_in: float, out: Tensor) -> _Chunk:  # fmt: skip
    """The chunk's state from its positive pairs (rows, g_index); `out` is a sample block output."""
    n_rows = q_index.numel()
    sims = exact_similarities(q, g, q_index, rows, g_index)
    table, counts = _padded_thresholds(rows, sims, n_rows)
    finite = torch.isfinite(table)
    abs_max = torch.where(finite, table.abs(), 0).amax(1)
    eps = eps_in + output_error(out.dtype, abs_max, eps_in) + 2.0**-30  # [B] float64
    # Lowest threshold minus ε, nudged down so that rounding to the block dtype stays below it.
    floor = torch.where(counts > 0, table[:, 0].to(torch.float64) - eps - 2.0**-7, torch.inf)
    floor = floor.to(device=out.device, dtype=out.dtype)
    table64 = torch.where(finite, table.to(torch.float64), _ROW_SPAN / 2)
    hist = torch.zeros(n_rows * (table.shape[1] + 1), dtype=torch.int64)
    return _Chunk(q_index, table, table64, counts, eps, floor, hist)


def _by_row_then_col(idx: Tensor, rows: Tensor, cols: Tensor, n_cols: int) -> Tensor:
    """`idx` reordered so that (rows, cols)[idx] is ascending by row, then column."""
    return idx[torch.argsort(rows[idx] * n_cols + cols[idx])]


def _add_block(
    c: _Chunk, q: UnitEmbeddings, g: UnitEmbeddings, scores: Tensor, cols: Tensor | None
) -> None:
    """Count the chunk's negatives among `scores [B, M]` (excluded pairs already -inf), the
    block of gallery items `cols [M]` (None: the whole gallery, in order)."""
    cand_rows, cand_cols = torch.nonzero(_at_least(scores, c.floor), as_tuple=True)
    values = scores[cand_rows, cand_cols].to(device="cpu", dtype=torch.float64)
    cand_rows, cand_cols = cand_rows.cpu(), cand_cols.cpu()
    if cols is not None:
        cand_cols = cols[cand_cols]  # ascending within a row no more: the band is re-sorted
    n_rows, n_cols = c.q_index.numel(), g.raw.shape[0]
    surely, maybe = _side_counts(c.table64, c.eps, cand_rows, values)
    band = maybe > surely
    if band.any() and g.low.dtype != torch.float32:
        # Second look at the bfloat16 band: float32 dot products of the raw rows (sparse, so
        # only these pairs are computed), within `raw_error` of the reference.
        idx = _by_row_then_col(band.nonzero()[:, 0], cand_rows, cand_cols, n_cols)
        approx = raw_similarities(q, g, c.q_index, cand_rows[idx], cand_cols[idx])
        eps2 = torch.full((n_rows,), raw_error(q.dim) + 2.0**-30, dtype=torch.float64)
        surely[idx], maybe[idx] = _side_counts(c.table64, eps2, cand_rows[idx], approx)
        band = maybe > surely
    if band.any():
        idx = _by_row_then_col(band.nonzero()[:, 0], cand_rows, cand_cols, n_cols)
        exact = exact_similarities(q, g, c.q_index, cand_rows[idx], cand_cols[idx])
        surely[idx] = _exact_counts(c.table[cand_rows[idx]], exact)
    width = c.table.shape[1]
    c.hist += torch.bincount(cand_rows * (width + 1) + surely, minlength=c.hist.numel())


def _positions(c: _Chunk) -> Tensor:
    """Positions [P_chunk] of the chunk's positives from its finished histogram."""
    width = c.table.shape[1]
    hist = c.hist.view(-1, width + 1)
    above = hist.flip(1).cumsum(1).flip(1)[:, 1:]  # above[r, m]: negatives with s ≥ T[r, m]
    rank_desc = c.counts[:, None] - torch.arange(width)[None, :]  # k of the m-th ascending positive
    positions = (rank_desc + above).flip(1)  # descending similarity = ascending position
    valid = (torch.arange(width)[None, :] < c.counts[:, None]).flip(1)
    return positions[valid]


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
    out = block(q.low[:1], g.low[:1])  # the block's output dtype and device
    g_order = torch.argsort(g_labels, stable=True)
    g_sorted = g_labels[g_order]
    # Queries in label order: a chunk then touches few label groups (ranks do not depend on it).
    q_order = torch.argsort(q_labels, stable=True)
    chunks = []
    for start in range(0, q_labels.numel(), chunk_size):
        q_index = q_order[start : start + chunk_size]
        rows, g_index = _same_label_pairs(q_labels[q_index], g_order, g_sorted)
        if same_set:
            positive = g_index != q_index[rows]
        elif q_cams is not None and g_cams is not None:
            positive = g_cams[g_index] != q_cams[q_index][rows]
        else:
            positive = torch.ones_like(rows, dtype=torch.bool)
        c = _chunk(q, g, q_index, rows[positive], g_index[positive], eps_in, out)
        if not same_set:
            scores = block(q.low[q_index.to(q.low.device)], g.low)  # [B, N]
            scores[rows.to(scores.device), g_index.to(scores.device)] = -torch.inf  # same id+cam
            _add_block(c, q, g, scores, None)
            del scores
        chunks.append(c)
    if same_set:
        _symmetric_blocks(chunks, q, q_labels, block)
    return PositiveRanks(
        torch.cat([_positions(c) for c in chunks]), torch.cat([c.counts for c in chunks])
    )


def _symmetric_blocks(
    chunks: list[_Chunk], q: UnitEmbeddings, labels: Tensor, block: Block
) -> None:
    """same_set: each block of the upper triangle is computed once and serves both the row
    chunk's queries and (transposed) the column chunk's. Same-label pairs (the query itself and
    its positives) are excluded from the negatives."""
    device = q.low.device
    for a, ca in enumerate(chunks):
        low_a = q.low[ca.q_index.to(device)]
        for cb in chunks[a:]:
            scores = block(low_a, q.low[cb.q_index.to(device)])  # [Ba, Bb]
            la, lb = labels[ca.q_index], labels[cb.q_index]
            if la[-1] >= lb[0]:  # queries are in label order: only then can labels meet
                same = (la[:, None] == lb[None, :]).to(scores.device)
                scores.masked_fill_(same, -torch.inf)
            _add_block(ca, q, q, scores, cb.q_index)
            if cb is not ca:
                _add_block(cb, q, q, scores.T.contiguous(), ca.q_index)  # strided reads: 10x slower
