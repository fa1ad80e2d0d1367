"""Compiled scans of one similarity block: every candidate negative classified in one pass.

A block holds shortlist scores s̃ as raw float bits (int16 for bfloat16, int32 for float32).
For query i with positives' reference similarities t_1 ≤ … ≤ t_w (a ragged segment
`ptr[i]:ptr[i+1]`), a negative with |s̃ - s| ≤ ε_k is surely at or above t_k when key ≥ hi_k
and surely below it when key < lo_k. When both counts agree, `hist[i, count] += 1`; otherwise
the pair is in the band and goes to a finer check. Keys are the sign-magnitude integers of
float32 bit patterns (ordered like the values, -0 = +0); a vectorised compare of the raw bits
against the query's floor skips most scores first. The scans are parallel (`prange`): serial
ones on threads compile faster but run slower (docs/benchmarks/evaluation.md).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

TILE = 256  # columns per thread in the column pass: contiguous reads, private counters
_LINEAR = 16  # segments up to this width are searched linearly, longer ones by bisection


@njit(inline="always")
def _key(bits, shift):
    k = np.int64(bits) << shift
    return k if k >= 0 else np.int64(-(2**31)) - k


@njit(inline="always")
def _count_le(keys, a, b, key):
    """#{m in [a, b): keys[m] ≤ key} for keys ascending on [a, b)."""
    lo, hi = a, b
    while lo < hi:
        mid = (lo + hi) >> 1
        if keys[mid] <= key:
            lo = mid + 1
        else:
            hi = mid
    return lo - a


@njit(inline="always")
def _classify(key, lo, hi, a, b):
    """Thresholds surely at or below the score, or -1 when the score is in the band."""
    if b - a <= _LINEAR:
        sure = 0
        maybe = 0
        for k in range(a, b):
            sure += hi[k] <= key
            maybe += lo[k] <= key
    else:
        sure = _count_le(hi, a, b, key)
        maybe = _count_le(lo, a, b, key)
    return sure if sure == maybe else -1


@njit(inline="always")
def _record(fill, idx, cap, band_n, band_q, band_g, q, g):
    """One band pair of unit idx: into its `cap` slots (counting pass, band_n = counts) or
    from its start offset (filling pass, band_n = next free slot)."""
    if fill:
        band_q[band_n[idx]] = q
        band_g[band_n[idx]] = g
    elif band_n[idx] < cap:
        band_q[idx * cap + band_n[idx]] = q
        band_g[idx * cap + band_n[idx]] = g
    band_n[idx] += 1


@njit(parallel=True, nogil=True, cache=True)
def scan_rows(bits, shift, row0, floor, native, ptr, lo, hi, hist, sel, cap, band_n, band_q,
              band_g, fill):  # fmt: skip
    """Rows `sel` of `bits [R, C]` (query row0 + r; columns are gallery positions).

    floor[i] is the key of query i's lowest lo bound, native[i] the smallest raw bit pattern
    that can reach it (see `native_floors`). Counting pass (fill=False): sure candidates go to
    `hist`, band_n[k] counts row sel[k]'s band pairs and the first `cap` are kept in its slots.
    Filling pass (fill=True, for rows that overflowed): every band pair is written from offset
    band_n[k]; `hist` is left alone.
    """
    n_cols = bits.shape[1]
    n_words = (n_cols + 7) // 8
    for idx in prange(sel.size):
        r = sel[idx]
        i = row0 + r
        a, b = ptr[i], ptr[i + 1]
        if a == b:
            continue
        f, f_native, row = floor[i], native[i], bits[r]
        mask = np.zeros(8 * n_words, np.uint8)
        words = mask.view(np.uint64)
        hits = np.empty(8 * n_words, np.int64)
        # A vectorised pass marks the scores that can reach the floor (~1 %), whole 8-byte
        # words of the mask are skipped at once, and only then does per-score work start:
        # kept apart, the compiler vectorises the first loop, which it cannot do for one fused one.
        for c in range(n_cols):
            mask[c] = row[c] >= f_native
        n_hits = 0
        for word in range(n_words):
            if words[word] != 0:
                for c in range(8 * word, 8 * word + 8):
                    hits[n_hits] = c
                    n_hits += mask[c]
        for k in range(n_hits):
            c = hits[k]
            key = _key(row[c], shift)
            if key < f:
                continue
            m = _classify(key, lo, hi, a, b)
            if m < 0:
                _record(fill, idx, cap, band_n, band_q, band_g, i, c)
            elif not fill:
                hist[a + i + m] += 1  # the query's segment has w + 1 cells from ptr[i] + i


@njit(parallel=True, nogil=True, cache=True)
def scan_cols(bits, shift, c0, item0, floor, native, ptr, lo, hi, hist, sel, cap, band_n,
              band_q, band_g, fill):  # fmt: skip
    """Column tiles `sel` of `bits [R, C]`: tile t holds columns c0 + t·TILE + j, the queries
    item0 + t·TILE + j, and rows are their gallery items. The transposed half of a symmetric
    block; band pairs are (query, row) and the passes work as in `scan_rows`, with a tile (one
    thread, contiguous reads of each row) as the unit that owns `cap` band slots.
    """
    n_rows, n_cols = bits.shape
    for idx in prange(sel.size):
        ta = sel[idx] * TILE
        width = min(n_cols - c0 - ta, TILE)
        f_native = np.empty(width, bits.dtype)
        for j in range(width):
            f_native[j] = native[item0 + ta + j]
        mask = np.zeros(TILE, np.uint8)
        words = mask.view(np.uint64)
        hits = np.empty(TILE, np.int64)
        for r in range(n_rows):
            row = bits[r, c0 + ta : c0 + ta + width]
            for j in range(width):
                mask[j] = row[j] >= f_native[j]
            n_hits = 0
            for word in range((width + 7) // 8):
                if words[word] != 0:
                    for j in range(8 * word, 8 * word + 8):
                        hits[n_hits] = j
                        n_hits += mask[j]
            for h in range(n_hits):
                j = hits[h]
                i = item0 + ta + j
                a, b = ptr[i], ptr[i + 1]
                key = _key(row[j], shift)
                if a == b or key < floor[i]:
                    continue
                m = _classify(key, lo, hi, a, b)
                if m < 0:
                    _record(fill, idx, cap, band_n, band_q, band_g, i, r)
                elif not fill:
                    hist[a + i + m] += 1


def native_floors(floor: np.ndarray, dtype: np.dtype, shift: int) -> np.ndarray:
    """Per query, the smallest raw bit pattern (of `dtype`) whose key can reach floor.

    For a positive floor, raw patterns order like keys (negative values have the sign bit, so
    negative integers): ceil(floor / 2^shift), clipped so an empty query (floor = max) never
    hits. Other floors take the dtype's minimum: every score goes on to the key comparison.
    """
    info = np.iinfo(dtype)
    ceil = -((-floor) >> shift)
    return np.where(floor > 0, np.minimum(ceil, info.max), info.min).astype(dtype)


@njit(nogil=True, cache=True)
def count_values(q_items, values, ptr, thresholds, eps, hist, unsure):
    """Band pairs with finer scores `values` (|value - s| ≤ eps; eps = 0: exact references).

    Sure pairs go to `hist`; unsure[m] is set for pairs still within eps of a threshold.
    """
    for m in range(values.size):
        i = q_items[m]
        a, b = ptr[i], ptr[i + 1]
        v = values[m]
        sure = 0
        maybe = 0
        for k in range(a, b):
            sure += thresholds[k] + eps <= v
            maybe += thresholds[k] - eps <= v
        if sure == maybe or eps == 0.0:
            hist[a + i + sure] += 1
        else:
            unsure[m] = True
