"""A similarity block's band: the pairs its arithmetic cannot place, found and settled.

Each query's positives give thresholds t_k (`Tables`). A shortlist score more than ε_k from t_k
is on a known side of it and counted by the compiled scans (`_scan`); the pairs within ε_k of
some threshold form the band, which `settle` counts with a float32 look, then, if still
unsure, with their exact similarity.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch
from torch import Tensor

from benchmark.evaluation import _dots, _scan
from benchmark.evaluation.similarity import (
    LowCopy,
    UnitEmbeddings,
    exact_similarities,
    output_error,
    raw_error,
    raw_similarities,
)


class Shortlist(Protocol):
    """Low-precision similarity blocks against one gallery copy (`evaluation.arithmetic`)."""

    def __call__(self, q: Tensor, start: int) -> Tensor:
        """Scores [B, N - start] of query-copy rows q [B, D] against gallery rows start.."""
        ...

    readout: torch.dtype  # the dtype its blocks come in


Block = Callable[[LowCopy], Shortlist]  # gallery copy -> its shortlist
_EMPTY = np.iinfo(np.int64).max  # floor of a query without positives: no score reaches it
_BITS = {torch.bfloat16: (torch.int16, 16), torch.float32: (torch.int32, 0)}  # see `_bits`


def _bits(scores: Tensor) -> tuple[np.ndarray, int]:
    """A CPU block's scores as raw bits (its own memory) and the shift that puts them in
    float32's place: bfloat16 as int16 << 16, float32 as int32 << 0."""
    int_dtype, shift = _BITS[scores.dtype]
    return scores.contiguous().view(int_dtype).numpy(), shift


def exclude_pairs(scores: Tensor, where: tuple[Tensor, Tensor] | Tensor) -> None:
    """Set scores[where] to -inf, below every threshold, in a CPU block (every shortlist returns
    one). `where` is an index pair, or a bool mask of the first columns. Written through numpy:
    torch's parallel index_put and masked_fill stall beside other jobs."""
    raw = _bits(scores)[0]
    raw_value = _bits(torch.tensor([-torch.inf], dtype=scores.dtype))[0][0]
    if isinstance(where, Tensor):
        np.copyto(raw[:, : where.shape[1]], raw_value, where=where.numpy())
    else:
        raw[where[0].numpy(), where[1].numpy()] = raw_value


@dataclass
class Tables:
    """Ragged per-query thresholds (segment ptr[i]:ptr[i+1], ascending) and their counters."""

    ptr: np.ndarray  # [Q + 1] int64
    t: np.ndarray  # [P] float64 reference similarities (float32 values)
    lo: np.ndarray  # [P] int64 keys: scores below lo_k are surely below t_k
    hi: np.ndarray  # [P] int64 keys: scores at or above hi_k are surely at or above t_k
    floor: np.ndarray  # [Q] int64 key of the lowest lo (_EMPTY without positives)
    native: np.ndarray  # [Q] the raw bit pattern that can reach floor (see _scan.native_floors)
    hist: np.ndarray  # [P + Q] int64: negatives per number of thresholds at or below them


def _ceil_keys(x: Tensor) -> np.ndarray:
    """Keys (sign-magnitude float32 bits, as in `_scan`) of the smallest float32 ≥ x (float64)."""
    f = x.to(torch.float32)
    f = torch.where(f.to(torch.float64) < x, torch.nextafter(f, torch.tensor(torch.inf)), f)
    b = f.view(torch.int32).to(torch.int64)
    return torch.where(b >= 0, b, -(2**31) - b).numpy()


def threshold_tables(
    rows: Tensor, sims: Tensor, n_rows: int, eps_in: float, readout: torch.dtype
) -> Tables:
    """Tables for queries 0..n_rows-1 from their positive pairs (rows [P], sims [P] float32),
    keyed for blocks read by `readout` (its output rounding widens each bound)."""
    counts = torch.bincount(rows, minlength=n_rows)
    order = torch.argsort(rows * 4.0 + sims.to(torch.float64), stable=True)  # by row, then sim
    t = sims[order].to(torch.float64)
    eps = eps_in + output_error(readout, t, eps_in) + 2.0**-30
    lo, hi = _ceil_keys(t - eps), _ceil_keys(t + eps)
    empty, bit_shift = _bits(torch.empty(0, dtype=readout))
    ptr = np.concatenate([[0], counts.cumsum(0).numpy()])
    # Per segment, hi as a running maximum and lo as a running minimum from the right, so both
    # ascend (binary search) and each bound only widens the band. Keys lie in (-2³¹, 2³¹):
    # adding 2³³ per segment keeps a running extreme from crossing into the next segment.
    shift = np.repeat(np.arange(n_rows, dtype=np.int64), counts.numpy()) << 33
    hi = np.maximum.accumulate(hi + shift) - shift
    lo = np.minimum.accumulate((lo + shift)[::-1])[::-1] - shift
    first = np.minimum(ptr[:-1], max(lo.size - 1, 0))
    floor = np.where(counts.numpy() > 0, lo[first] if lo.size else 0, _EMPTY)
    native = _scan.native_floors(floor, empty.dtype, bit_shift)
    hist = np.zeros(t.numel() + n_rows, dtype=np.int64)
    return Tables(ptr, t.numpy(), lo, hi, floor, native, hist)


ROW_CAP, TILE_CAP = 1024, 16 * _scan.TILE  # band slots per row / column tile before a refill
_HEAD = 32  # units scanned first when a band limit applies (`_band_pairs`)
_SURE = 3.0  # standard errors by which the units counted first must be over the band limit
_SORT_PAIRS = 1 << 16  # band pairs above which the float32 look reads them in gallery order


Band = tuple[np.ndarray, np.ndarray]  # (query, gallery position) of each band pair


def _band_pairs(kernel: Callable, n: int, cap: int, args: tuple, limit: int | None) -> Band | None:
    """Run a scan kernel over its n units (rows, or column tiles): one counting pass that keeps
    up to `cap` band pairs each, then a filling pass over the few that had more. None, before
    the filling pass allocates anything, when the band holds more than `limit` pairs.

    With a limit, the counting pass runs in doubling batches from `_HEAD` units, in
    `_spread_order` (a panel's first rows can be one crowded class), and stops once the units
    counted are surely over their share of `limit` (`_surely_over`): classifying a block that is
    mostly band costs several times its product. The pairs come out in scan order.
    """
    sel = _spread_order(n) if limit is not None else np.arange(n, dtype=np.int64)
    band_n = np.zeros(n, dtype=np.int64)  # by position in sel, as the slots
    band_q, band_g = np.empty(n * cap, dtype=np.int64), np.empty(n * cap, dtype=np.int64)

    done, size = 0, (min(n, _HEAD) if limit is not None else n)
    while done < n:
        end = min(n, done + size)
        part = (sel[done:end], cap, band_n[done:end], band_q[done * cap :], band_g[done * cap :])
        kernel(*args, *part, False)
        done, size = end, 2 * end
        if limit is not None and done < n and _surely_over(band_n[:done], limit / n):
            return None
    if limit is not None and int(band_n.sum()) > limit:
        return None
    # Units that overflowed are redone whole by the filling pass: none of their slots is kept.
    kept_n = np.where(band_n > cap, 0, band_n)
    kept = np.repeat(np.arange(n) * cap - (np.cumsum(kept_n) - kept_n), kept_n)
    kept += np.arange(kept.size)  # slot j of position k sits at k·cap + j
    band_q, band_g = band_q[kept], band_g[kept]
    over = np.flatnonzero(band_n > cap)
    if over.size == 0:
        return band_q, band_g
    sizes = band_n[over]
    starts = np.cumsum(sizes) - sizes
    more_q, more_g = np.empty(int(sizes.sum()), np.int64), np.empty(int(sizes.sum()), np.int64)
    kernel(*args, sel[over], cap, starts, more_q, more_g, True)
    return np.concatenate([band_q, more_q]), np.concatenate([band_g, more_g])


def _surely_over(counts: np.ndarray, share: float) -> bool:
    """Whether units with these band counts (a sample of a block's) have a mean over `share`
    by `_SURE` standard errors of their mean: crowded and sparse rows mixed make it wide."""
    mean = float(counts.mean())
    spread = float(counts.std(ddof=1)) if counts.size > 1 else mean
    return mean - _SURE * spread / counts.size**0.5 > share


def _spread_order(n: int) -> np.ndarray:
    """0..n-1 in bit-reversed order (van der Corput): every prefix is spread over the range."""
    bits = max(1, (n - 1).bit_length())
    units = np.arange(n, dtype=np.int64)
    reversed_ = np.zeros(n, dtype=np.int64)
    for b in range(bits):
        reversed_ |= ((units >> b) & 1) << (bits - 1 - b)
    return units[np.argsort(reversed_, kind="stable")]


def scan_rows(tab: Tables, scores: Tensor, row0: int, limit: int | None = None) -> Band | None:
    """Rows of `scores` are queries row0.., columns gallery positions: the (query, column)
    band; None when it holds more than `limit` pairs (sure pairs are counted either way)."""
    raw, shift = _bits(scores)
    args = (raw, shift, row0, tab.floor, tab.native, tab.ptr, tab.lo, tab.hi, tab.hist)
    return _band_pairs(_scan.scan_rows, scores.shape[0], ROW_CAP, args, limit)


def scan_cols(
    tab: Tables, scores: Tensor, c0: int, item0: int, limit: int | None = None
) -> Band | None:
    """Columns c0.. of `scores` are queries item0.., rows their gallery: the (query, row)
    band; None when it holds more than `limit` pairs."""
    raw, shift = _bits(scores)
    args = (raw, shift, c0, item0, tab.floor, tab.native, tab.ptr, tab.lo, tab.hi, tab.hist)
    tiles = -(-(scores.shape[1] - c0) // _scan.TILE)
    return _band_pairs(_scan.scan_cols, tiles, TILE_CAP, args, limit)


def settle(
    tab: Tables,
    q: UnitEmbeddings,
    g: UnitEmbeddings,
    q_index: Tensor,
    pairs: Band,
    g_index: Tensor | None,
    *,
    by_query: bool = False,
) -> None:
    """Count the band pairs (query, gallery position): a float32 look (shortlists coarser than
    float32 only), then exact references for those still within bound of a threshold.

    `q_index` maps table queries to rows of q, `g_index` gallery positions to rows of g.
    Wide bands are read in the order of the side outside the block's chunk: the gallery, or
    with `by_query` the queries (the transposed half of a same_set panel).
    """
    rows, cols = pairs
    if rows.size == 0:
        return
    # numpy indexing: torch's parallel gathers stall beside other jobs.
    q_map = q_index.numpy()
    gallery = cols if g_index is None else g_index.numpy()[cols]
    if g.low.values.dtype != torch.float32 and q.raw_in_range and g.raw_in_range:
        if rows.size > _SORT_PAIRS:  # each row outside the chunk read once, not once per pair
            if by_query:
                rows, gallery = _dots.bucket_sort(rows, gallery, tab.ptr.size - 1)
            else:
                gallery, rows = _dots.bucket_sort(gallery, rows, g.raw.shape[0])
        approx = raw_similarities(q, g, torch.from_numpy(q_map[rows]), torch.from_numpy(gallery))
        unsure = np.zeros(rows.size, dtype=np.bool_)
        eps = raw_error(q.dim) + 2.0**-30
        _scan.count_values(rows, approx.numpy(), tab.ptr, tab.t, eps, tab.hist, unsure)
        rows, gallery = rows[unsure], gallery[unsure]
    exact = exact_similarities(q, g, torch.from_numpy(q_map[rows]), torch.from_numpy(gallery))
    unused = np.zeros(rows.size, dtype=np.bool_)
    values = exact.numpy().astype(np.float64)
    _scan.count_values(rows, values, tab.ptr, tab.t, 0.0, tab.hist, unused)
