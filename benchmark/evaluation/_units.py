"""Compiled pass of `similarity.prepare`: each row's float32 norm, summed in float64.

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
def float32_norms(x, norms):
    """norms[i] = fp32(sqrt(Σ_d x_d² in float64))."""
    for i in prange(x.shape[0]):
        row = x[i]
        acc = 0.0
        for d in range(row.size):
            acc += np.float64(row[d]) * np.float64(row[d])
        norms[i] = np.float32(np.sqrt(acc))
