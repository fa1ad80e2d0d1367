"""Positions of every positive in each query's ranking, counted without sorting the gallery.

For a query with positives of reference similarities t_1 ≥ … ≥ t_R, the k-th positive sits at

    position_k = k + #{negatives j : s_j ≥ t_k}          (1-based; ties rank negatives first)

and every metric is a function of these positions. The counts come from one low-precision
similarity block per query chunk, whose band is settled exactly (`bands`); a chunk whose band
holds more than `FALLBACK_SHARE` of its pairs is counted again with float32 blocks. Memory is
one block of `chunk × N` shortlist scores plus one threshold and one counter per positive pair.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from benchmark.evaluation.bands import (
    Block,
    Shortlist,
    Tables,
    exclude_pairs,
    scan_cols,
    scan_rows,
    settle,
    threshold_tables,
)
from benchmark.evaluation.sets import EvaluationSets, excluded
from benchmark.evaluation.similarity import UnitEmbeddings, exact_similarities, shortlist_error

# A block whose band holds more than this share of its pairs is recomputed in float32: past it,
# re-checking the band pair by pair costs more than the block's float32 product (the ratio of
# the two costs per pair, which scale alike with D).
FALLBACK_SHARE = 0.05


@dataclass(frozen=True)
class PositiveRanks:
    """`positions [P]` int64, 1-based and ascending within each query; `counts [Q]` the number
    of positives R of each query (0 for a skipped query). Queries may come in any order (label
    order here): the metrics are means over queries."""

    positions: Tensor
    counts: Tensor
    fallbacks: int = 0  # chunks recounted with float32 blocks (their band overflowed)


def same_label_pairs(q_labels: Tensor, g_sorted: Tensor) -> tuple[Tensor, Tensor]:
    """(row, position in g_sorted) of every gallery item sharing the row's label; rows
    ascending, positions ascending within a row."""
    start = torch.searchsorted(g_sorted, q_labels, side="left")
    sizes = torch.searchsorted(g_sorted, q_labels, side="right") - start
    rows = torch.repeat_interleave(torch.arange(q_labels.numel()), sizes)
    offsets = torch.arange(rows.numel()) - torch.repeat_interleave(sizes.cumsum(0) - sizes, sizes)
    return rows, start[rows] + offsets


def _positions(tab: Tables) -> Tensor:
    """1-based positions of every positive, ascending within each query, from the histogram:
    the j-th (0-based) ascending positive of a query with w positives, cells [c, c + w] from
    c = ptr[i] + i, ranks after j others and the negatives counted in cells c + w - j .. c + w
    (those with more than w - 1 - j thresholds at or below them; ties rank negatives first)."""
    ptr, counts = tab.ptr, np.diff(tab.ptr)
    query = np.repeat(np.arange(counts.size), counts)
    j = np.arange(ptr[-1]) - ptr[query]
    after = np.append(np.cumsum(tab.hist[::-1])[::-1], 0)  # after[c] = Σ hist[c:]
    end = ptr[query + 1] + query + 1  # one past the query's last cell
    return torch.from_numpy(j + 1 + after[end - 1 - j] - after[end])


def _result(tabs: list[Tables], fallbacks: int) -> PositiveRanks:
    counts = [torch.from_numpy(np.diff(t.ptr)) for t in tabs]
    return PositiveRanks(torch.cat([_positions(t) for t in tabs]), torch.cat(counts), fallbacks)


def _limit(fallback: Block | None, rows: int, cols: int) -> int | None:
    """Band pairs above which a block of rows × cols is recomputed by `fallback`, if any."""
    return None if fallback is None else int(FALLBACK_SHARE * rows * cols)


def positive_ranks(
    q: UnitEmbeddings,
    g: UnitEmbeddings,
    sets: EvaluationSets,
    *,
    block: Block,
    chunk_size: int,
) -> PositiveRanks:
    """Positions of all positives of every query of `sets` (embedded as q and g).

    Excluded from each query's ranking: itself (`same_set`) and the pairs `sets.excluded` names;
    junk gallery items must be removed by the caller. Copies coarser than float32 recount a
    chunk whose band holds more than `FALLBACK_SHARE` of its pairs with float32 blocks.
    """
    fallback = None if q.low_dtype == torch.float32 else block
    q_labels, q_cams, g_cams = sets.query_labels, sets.query_cams, sets.gallery_cams
    if sets.same_set:
        return _same_set_ranks(q, q_labels, block, chunk_size, fallback)
    g_labels = sets.gallery_labels
    g_order = torch.argsort(g_labels, stable=True)
    g_sorted = g_labels[g_order]
    # Queries in label order: a chunk then touches few label groups (ranks do not depend on it).
    q_order = torch.argsort(q_labels, stable=True)
    passes = [(q, g, block(g.low), shortlist_error(q, g))]
    tabs, fallbacks = [], 0
    for start in range(0, q_labels.numel(), chunk_size):
        q_index = q_order[start : start + chunk_size]
        rows, pos = same_label_pairs(q_labels[q_index], g_sorted)
        g_index = g_order[pos]
        pair_q_cams = q_cams[q_index][rows] if q_cams is not None else None
        pair_g_cams = g_cams[g_index] if g_cams is not None else None
        positive = ~excluded(torch.ones_like(rows, dtype=torch.bool), pair_q_cams, pair_g_cams)
        sims = exact_similarities(q, g, q_index[rows[positive]], g_index[positive])
        for attempt, (q_p, g_p, shortlist, eps_in) in enumerate(passes):
            tab = threshold_tables(rows[positive], sims, q_index.numel(), eps_in, shortlist.readout)
            scores = shortlist(q_p.low.rows(q_index).values, 0)  # [B, N]
            exclude_pairs(scores, (rows, g_index))  # same label (and camera, or not)
            limit = _limit(fallback if attempt == 0 else None, *scores.shape)
            band = scan_rows(tab, scores, 0, limit)
            del scores
            if band is not None:
                settle(tab, q_p, g_p, q_index, band, None)
                break
            if len(passes) == 1 and fallback is not None:  # the first overflow: float32 copies
                q32, g32 = q.in_dtype(torch.float32), g.in_dtype(torch.float32)
                passes.append((q32, g32, fallback(g32.low), shortlist_error(q32, g32)))
            fallbacks += 1
        tabs.append(tab)
    return _result(tabs, fallbacks)


@dataclass
class _Panels:
    """One arithmetic's blocks over a same_set evaluation in label order."""

    q: UnitEmbeddings
    order: Tensor
    query: Tensor  # the low copy's values, rows in label order
    shortlist: Shortlist
    tab: Tables

    @staticmethod
    def of(q: UnitEmbeddings, order: Tensor, block: Block, pairs: Tensor, sims: Tensor) -> _Panels:
        copy = q.low.rows(order)
        shortlist = block(copy)
        eps_in = shortlist_error(q, q)
        tab = threshold_tables(pairs, sims, order.numel(), eps_in, shortlist.readout)
        return _Panels(q, order, copy.values, shortlist, tab)

    def count(self, s: int, e: int, same: Tensor, fallback: Block | None) -> bool:
        """Count panel rows [s, e) × columns [s, N) into the table; False, with the histogram
        partly counted, when a band holds more pairs than `_limit` allows."""
        n = self.order.numel()
        scores = self.shortlist(self.query[s:e], s)  # [e - s, n - s]
        exclude_pairs(scores, same)
        rows = scan_rows(self.tab, scores, s, _limit(fallback, e - s, n - s))
        cols = scan_cols(self.tab, scores, e - s, e, _limit(fallback, e - s, n - e))
        del scores
        if rows is None or cols is None:
            return False
        settle(self.tab, self.q, self.q, self.order, rows, self.order[s:])
        settle(self.tab, self.q, self.q, self.order, cols, self.order[s:], by_query=True)
        return True


def _same_set_ranks(
    q: UnitEmbeddings, labels: Tensor, block: Block, chunk_size: int, fallback: Block | None
) -> PositiveRanks:
    """same_set: items in label order; a panel holds rows [s, e) × columns [s, N), so every
    pair is computed once: rows count the panel's own queries, columns ≥ e (transposed) the
    later ones. A panel whose band overflows is counted again by `fallback`'s float32 blocks."""
    order = torch.argsort(labels, stable=True)
    lab = labels[order]
    n = lab.numel()
    rows, pos = same_label_pairs(lab, lab)
    positive = pos != rows
    sims = exact_similarities(q, q, order[rows[positive]], order[pos[positive]])
    panels = _Panels.of(q, order, block, rows[positive], sims)
    backup: _Panels | None = None
    group_end = torch.searchsorted(lab, lab, side="right")
    fallbacks = 0
    for s in range(0, n, chunk_size):
        e = min(n, s + chunk_size)
        w = int(group_end[e - 1]) - s  # columns [0, w) may share a label with these rows
        same = lab[s:e, None] == lab[None, s : s + w]
        saved = panels.tab.hist.copy() if fallback is not None else None
        if panels.count(s, e, same, fallback):
            continue
        assert fallback is not None and saved is not None  # only a limited panel overflows
        panels.tab.hist[:] = saved
        if backup is None:
            backup = _Panels.of(q.in_dtype(torch.float32), order, fallback, rows[positive], sims)
            backup.tab.hist = panels.tab.hist  # one histogram, counted by either arithmetic
        backup.count(s, e, same, None)
        fallbacks += 1
    return _result([panels.tab], fallbacks)
