"""Compiled loops of k-reciprocal re-ranking (`rerank`): neighbour lists, R*, d_J, counting.

Each loop transcribes one step, over rows in parallel; every output row is written by one
thread in a fixed order, so the float64 sums depend neither on threads nor on chunking.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

TILE = 256  # columns per thread in the transposed pass: contiguous reads, private rows


@njit(inline="always")
def _insert(values, index, row, v, col):
    """Insert (v, col) into row's list, kept in descending order; its last entry drops out."""
    k = values.shape[1] - 1
    while k > 0 and values[row, k - 1] < v:
        values[row, k] = values[row, k - 1]
        index[row, k] = index[row, k - 1]
        k -= 1
    values[row, k] = v
    index[row, k] = col


@njit(parallel=True, nogil=True, cache=True)
def fold_panel(panel, a, near_v, near_i, far_v, far_i):
    """Fold the float32 panel [B, N - a] (rows a..a+B, columns a..N of a symmetric matrix) into
    each row's running lists: `near` its largest values, `far` its smallest, held negated
    (both descending, -inf when empty). Rows a..a+B read the panel's rows; rows a+B.. read
    its columns beyond B, transposed, one tile of columns per thread.
    """
    n_rows, width = panel.shape
    kn, kf = near_v.shape[1] - 1, far_v.shape[1] - 1
    for i in prange(n_rows):
        r = a + i
        for j in range(width):
            v = panel[i, j]
            if v > near_v[r, kn]:
                _insert(near_v, near_i, r, v, a + j)
            if -v > far_v[r, kf]:
                _insert(far_v, far_i, r, -v, a + j)
    for t in prange((width - n_rows + TILE - 1) // TILE):
        j0 = n_rows + t * TILE
        for i in range(n_rows):
            for j in range(j0, min(width, j0 + TILE)):
                v, r = panel[i, j], a + j
                if v > near_v[r, kn]:
                    _insert(near_v, near_i, r, v, a + i)
                if -v > far_v[r, kf]:
                    _insert(far_v, far_i, r, -v, a + i)


@njit(inline="always")
def _reciprocal(rank, p, k, out):
    """R(p, k - 1) into out[:count]: the q among p's k nearest that have p among theirs."""
    count = 0
    for t in range(k):
        q = rank[p, t]
        for u in range(k):
            if rank[q, u] == p:
                out[count] = q
                count += 1
                break
    return count


@njit(parallel=True, nogil=True, cache=True)
def expanded_sets(rank, k1, half, out):
    """out[p] = R*(p) ascending, padded with -1: R(p) from p's k1 nearest, and R(q) from the
    `half` nearest of each q ∈ R(p) wherever |R(q) ∩ R(p)| > ⅔ |R(q)| (`rank` [N, ≥ k1])."""
    for p in prange(rank.shape[0]):
        r = np.empty(k1, np.int64)
        rq = np.empty(half, np.int64)
        members = out[p]
        n_r = _reciprocal(rank, p, k1, r)
        members[:n_r] = r[:n_r]
        m = n_r
        for t in range(n_r):
            n_q = _reciprocal(rank, r[t], half, rq)
            overlap = 0
            for u in range(n_q):
                for w in range(n_r):
                    if rq[u] == r[w]:
                        overlap += 1
                        break
            if overlap > 2.0 / 3.0 * n_q:
                members[m : m + n_q] = rq[:n_q]
                m += n_q
        members[:m].sort()
        kept = 0
        for t in range(m):
            if t == 0 or members[t] != members[t - 1]:
                members[kept] = members[t]
                kept += 1
        members[kept:] = -1


@njit(parallel=True, nogil=True, cache=True)
def jaccard_rows(p_ptr, p_col, p_val, row0, g_ptr, g_row, g_val, p_sum, g_sum, out):
    """out[i, j] = d_J = 1 - m / (Σ V_p + Σ V_g - m), m = Σ_c min(V_p[c], V_g[c]) over the
    columns both hold (Σ max = Σ V_p + Σ V_g - Σ min), for probe row0 + i (CSR `p_*`) and
    gallery j (CSC `g_*` over columns)."""
    for i in prange(out.shape[0]):
        acc = out[i]
        acc[:] = 0.0
        for t in range(p_ptr[row0 + i], p_ptr[row0 + i + 1]):
            c, v = p_col[t], p_val[t]
            for u in range(g_ptr[c], g_ptr[c + 1]):
                w = g_val[u]
                acc[g_row[u]] += v if v < w else w
        ps = p_sum[row0 + i]
        for j in range(acc.size):
            union = ps + g_sum[j] - acc[j]
            # Two empty rows (an item outside its own k1 + 1 nearest, among > k1 duplicates,
            # with k2 = 1) share nothing: distance 1 rather than 0 / 0.
            acc[j] = 1.0 - acc[j] / union if union > 0.0 else 1.0


@njit(inline="always")
def _count_below(t, a, b, x):
    """#{k in [a, b) : t[k] < x} for t ascending on [a, b).

    `_scan._count_le`'s twin on purpose: numba's disk cache is invalidated by the kernel's own
    file only, so a helper imported from another file could leave a stale cached kernel."""
    lo, hi = a, b
    while lo < hi:
        mid = (lo + hi) >> 1
        if t[mid] < x:
            lo = mid + 1
        else:
            hi = mid
    return lo - a


@njit(parallel=True, nogil=True, cache=True)
def count_negatives(jaccard, s_low, scale, lambda_, delta, q_labels, g_labels, t_ptr, t, hist,
                    unsure):  # fmt: skip
    """For query i and every gallery item j of another label (a negative), d̃* from the float32
    product s̃ (|d̃* - d*| ≤ delta[i]); when d̃* ± delta[i] have as many of the query's
    thresholds t[t_ptr[i]:t_ptr[i+1]] (ascending) strictly below them, that count c is d*'s
    and hist[i, c] += 1, else unsure[i, j] = True.
    """
    for i in prange(jaccard.shape[0]):
        a, b = t_ptr[i], t_ptr[i + 1]
        top = t[b - 1] if b > a else -np.inf
        sc, de, label = scale[i], delta[i], q_labels[i]
        for j in range(jaccard.shape[1]):
            if g_labels[j] == label:
                continue
            d = (1.0 - lambda_) * jaccard[i, j] + lambda_ * ((2.0 - 2.0 * s_low[i, j]) / sc)
            if d - de > top:  # beyond every threshold: most negatives
                hist[i, b - a] += 1
                continue
            lo = _count_below(t, a, b, d - de)
            if lo == _count_below(t, a, b, np.nextafter(d + de, np.inf)):
                hist[i, lo] += 1
            else:
                unsure[i, j] = True
