"""Compiled row passes of `similarity`: float32 norms and the dot products of scattered pairs.

Every kernel is serial and releases the GIL; `on_threads` runs it on torch's threads, since a
serial kernel compiles faster than a parallel one (docs/benchmarks/evaluation.md). One loop over
the pairs reads each row in place, in any order, where a sampled (SDDMM) product would need
them sorted into a sparse pattern.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch
from numba import njit

_PIECES = 4  # pieces per thread: a thread that finishes early takes the next one


def on_threads(part: Callable[[int, int], object], n: int) -> None:
    """part(a, b) over pieces [a, b) that cover [0, n), on `torch.get_num_threads()` threads."""
    threads = min(torch.get_num_threads(), n)
    if threads <= 1:
        part(0, n)
        return
    cuts = np.linspace(0, n, _PIECES * threads + 1).astype(np.int64).tolist()
    with ThreadPoolExecutor(threads) as pool:
        for done in [pool.submit(part, a, b) for a, b in itertools.pairwise(cuts) if b > a]:
            done.result()


@njit(nogil=True, cache=True)
def float32_norms(x, norms):
    """norms[i] = fp32(sqrt(Σ_d x_d² in float64)), summed in order, one pass per row: torch's
    float64 norm of a float32 matrix converts the whole matrix first. No fastmath: the unit rows
    (float32 division by these norms) are those of the reference."""
    for i in range(x.shape[0]):
        row = x[i]
        acc = 0.0
        for d in range(row.size):
            acc += np.float64(row[d]) * np.float64(row[d])
        norms[i] = np.float32(np.sqrt(acc))


@njit(nogil=True, cache=True, fastmath={"reassoc", "contract"})
def raw_cosines(x, y, x_norms, y_norms, x_rows, y_rows, out):
    """out[m] = (x[i] · y[j] accumulated in float32) / (x_norms[i] · y_norms[j]) in float64,
    for the pairs (i, j) = (x_rows[m], y_rows[m]); float32 rows, float64 norms.

    Reassociation lets the sums vectorise: the bounds on these values hold for every summation
    order, and contracting into FMA only drops roundings. Four pairs share each pass over d:
    four independent sums keep the FMA units busy where one sum waits on its own latency.
    """
    quads = out.size // 4
    for k in range(quads + out.size % 4):
        if k < quads:
            m = 4 * k
            a0, b0 = x[x_rows[m]], y[y_rows[m]]
            a1, b1 = x[x_rows[m + 1]], y[y_rows[m + 1]]
            a2, b2 = x[x_rows[m + 2]], y[y_rows[m + 2]]
            a3, b3 = x[x_rows[m + 3]], y[y_rows[m + 3]]
            s0, s1 = np.float32(0.0), np.float32(0.0)
            s2, s3 = np.float32(0.0), np.float32(0.0)
            for d in range(a0.size):
                s0 += a0[d] * b0[d]
                s1 += a1[d] * b1[d]
                s2 += a2[d] * b2[d]
                s3 += a3[d] * b3[d]
            sums = (s0, s1, s2, s3)
            for r in range(4):
                i, j = x_rows[m + r], y_rows[m + r]
                out[m + r] = np.float64(sums[r]) / (x_norms[i] * y_norms[j])
        else:
            m = 4 * quads + (k - quads)
            i, j = x_rows[m], y_rows[m]
            a, b = x[i], y[j]
            acc = np.float32(0.0)
            for d in range(a.size):
                acc += a[d] * b[d]
            out[m] = np.float64(acc) / (x_norms[i] * y_norms[j])


@njit(nogil=True, cache=True, fastmath={"reassoc", "contract"})
def unit_dots(x, y, x_norms, y_norms, x_rows, y_rows, out):
    """out[m] = fp32(Σ_d x̂_d ŷ_d in float64) with x̂ = x / n_x rounded to float32 (float32
    norms): the reference similarity of `evaluation.similarity`. The products of two float32
    numbers are exact in float64, so the order only moves the sum by D·2⁻⁵³ before rounding,
    and every pair goes through the same loop, so identical rows give identical values.
    """
    for m in range(out.size):
        a, b = x[x_rows[m]], y[y_rows[m]]
        na, nb = x_norms[x_rows[m]], y_norms[y_rows[m]]
        acc = 0.0
        for d in range(a.size):
            acc += np.float64(a[d] / na) * np.float64(b[d] / nb)
        out[m] = np.float32(acc)


@njit(nogil=True, cache=True)
def bucket_sort(keys, values, n_keys):
    """(`keys`, `values`) reordered so that `keys` (integers in [0, n_keys)) ascend, stably: a
    counting sort, O(M + n_keys), that moves the pairs themselves, where a comparison sort,
    O(M log M), can cost more than the products it orders."""
    starts = np.zeros(n_keys + 1, np.int64)
    for m in range(keys.size):
        starts[keys[m] + 1] += 1
    for k in range(n_keys):
        starts[k + 1] += starts[k]
    out_keys = np.empty_like(keys)
    out_values = np.empty_like(values)
    for m in range(keys.size):
        at = starts[keys[m]]
        out_keys[at] = keys[m]
        out_values[at] = values[m]
        starts[keys[m]] = at + 1
    return out_keys, out_values
