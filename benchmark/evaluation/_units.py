"""Compiled passes of `similarity.prepare`: float64 norms, float32 unit rows, int8 copies.

torch's float64 `vector_norm` of a float32 matrix converts the whole matrix to float64 first
(measured: docs/benchmarks/evaluation.md#measurements-behind-the-code); one compiled pass per
row reads each entry once. The unit rows are formed as in the reference (float32 division by
the float32 norm), without fastmath, so every quantity below is a function of exactly those
values.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange


@njit(parallel=True, nogil=True, cache=True)
def norms_and_peak(x, norms, peaks):
    """norms[i] = fp32(sqrt(Σ_d x_d² in float64)); peaks[i] = max_d |fp32(x_d / norms[i])|."""
    for i in prange(x.shape[0]):
        row = x[i]
        acc = 0.0
        for d in range(row.size):
            acc += np.float64(row[d]) * np.float64(row[d])
        n = np.float32(np.sqrt(acc))
        norms[i] = n
        peak = np.float32(0.0)
        if n > 0 and np.isfinite(n):
            for d in range(row.size):
                peak = max(peak, abs(row[d] / n))
        peaks[i] = peak


@njit(parallel=True, nogil=True, cache=True)
def int8_copy(x, norms, scale, limit, zero, out, errors, sizes):
    """out[i, d] = clamp(round(x̂_d / scale), ±limit) + zero with x̂ = fp32(x / norms[i]);
    errors[i] = ||x̂ - scale · (out - zero)|| and sizes[i] = ||scale · (out - zero)||, float64.

    Rounding is half-to-even (np.rint); `out` is int8 (zero 0) or uint8 (zero 64, limit 63).
    """
    inverse = 1.0 / scale  # any rounding of the levels is measured below, so it may be inexact
    for i in prange(x.shape[0]):
        row = x[i]
        n = norms[i]
        err = 0.0
        size = 0.0
        for d in range(row.size):
            unit = np.float64(row[d] / n)
            level = min(max(np.rint(unit * inverse), -limit), limit)
            out[i, d] = level + zero
            approx = scale * level
            err += (unit - approx) * (unit - approx)
            size += approx * approx
        errors[i] = np.sqrt(err)
        sizes[i] = np.sqrt(size)
