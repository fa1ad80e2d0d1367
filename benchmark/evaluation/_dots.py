"""Compiled dot products of scattered pairs of rows: the re-checks of `benchmark.evaluation.ranks`.

Band pairs are scattered over the gallery, so a sampled (SDDMM) product needs them sorted into
a sparse pattern and gathers rows piece by piece; one compiled loop over the pairs reads each
row in place, in any pair order, on every core (on SOP in `bench eval`: the float32 re-check
1.8x and the exact references 5x faster than torch's sampled CSR product). Reassociation
lets the compiler vectorise the sums; the bounds that use these values hold for every
summation order, and contracting into FMA only drops roundings.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange


@njit(parallel=True, nogil=True, cache=True, fastmath={"reassoc", "contract"})
def raw_dots(x, y, x_rows, y_rows, out):
    """out[m] = x[x_rows[m]] · y[y_rows[m]], float32 rows accumulated in float32."""
    for m in prange(out.size):
        a, b = x[x_rows[m]], y[y_rows[m]]
        acc = np.float32(0.0)
        for d in range(a.size):
            acc += a[d] * b[d]
        out[m] = acc


@njit(parallel=True, nogil=True, cache=True, fastmath={"reassoc", "contract"})
def unit_dots(x, y, x_norms, y_norms, x_rows, y_rows, out):
    """out[m] = fp32(Σ_d x̂_d ŷ_d in float64) with x̂ = x / n_x rounded to float32 (float32
    norms): the reference similarity of `evaluation.similarity`. The products of two float32
    numbers are exact in float64, so the order only moves the sum by D·2⁻⁵³ before rounding,
    and every pair goes through the same loop, so identical rows give identical values.
    """
    for m in prange(out.size):
        a, b = x[x_rows[m]], y[y_rows[m]]
        na, nb = x_norms[x_rows[m]], y_norms[y_rows[m]]
        acc = 0.0
        for d in range(a.size):
            acc += np.float64(a[d] / na) * np.float64(b[d] / nb)
        out[m] = np.float32(acc)
