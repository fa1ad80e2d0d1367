"""Compiled pass of `similarity.prepare`: each row's float32 norm, summed in float64.

torch's float64 `vector_norm` of a float32 matrix converts it first and runs at ~17 ns per
entry here (`bench eval`, MSMT17: 4 s of norms); one compiled pass per row reads each entry
once, without fastmath: the reference's norms to the last bit.
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
