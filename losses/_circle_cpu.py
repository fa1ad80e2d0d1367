"""Compiled CPU passes of the Circle loss (Eq. 5, 6 and the closed-form backward of Eq. 9/10).

`circle._CircleLossFunction` runs these on CPU float32/float64 tensors: one pass per row reads
the similarities and masks once, where the torch formulation makes about twenty passes over
[B, B] temporaries (weights, logits, two masked exponentials, their maxima and sums) and the
backward three more. Each value is computed as the torch code computes it (same constants in
the input's dtype, same operation order), so the two paths agree to rounding of the sums.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange


@njit(parallel=True, nogil=True, cache=True)
def forward(sim, pos, neg, one_minus_m, one_plus_m, m, gamma, exps, sums_p, sums_n, z):
    """Per anchor i: exps[i, j] = exp(logit - group max) for j in its positive or negative group
    (0 elsewhere), the group sums, and z = log Σ_p + max_p + log Σ_n + max_n (-inf without a
    positive or a negative). Returns False if some pair is in both groups (not handled here).
    """
    zero = m - m  # the constants come in the input's dtype (`circle._run_compiled`), as must 0
    overlaps = 0
    for i in prange(sim.shape[0]):
        s_row, p_row, n_row, e_row = sim[i], pos[i], neg[i], exps[i]
        max_p, max_n = zero, zero  # kept at 0 for a group without entries (its sum stays 0)
        found_p, found_n = False, False
        for j in range(s_row.size):  # logits γ α (Δ - s) on positives, γ α (s - Δ) on negatives
            s = s_row[j]
            logit = zero
            if p_row[j]:
                logit = ((one_minus_m - s) * max(one_plus_m - s, zero)) * gamma
                max_p, found_p = (max(max_p, logit) if found_p else logit), True
                if n_row[j]:
                    overlaps += 1
            elif n_row[j]:
                logit = ((s - m) * max(s + m, zero)) * gamma
                max_n, found_n = (max(max_n, logit) if found_n else logit), True
            e_row[j] = logit
        sum_p, sum_n = zero, zero
        for j in range(s_row.size):
            e = zero
            if p_row[j]:
                e = np.exp(e_row[j] - max_p)
                sum_p += e
            elif n_row[j]:
                e = np.exp(e_row[j] - max_n)
                sum_n += e
            e_row[j] = e
        sums_p[i], sums_n[i] = sum_p, sum_n
        z[i] = np.log(sum_p) + max_p + np.log(sum_n) + max_n
    return overlaps == 0


@njit(parallel=True, nogil=True, cache=True)
def backward(sim, pos, neg, one_plus_m, m, exps, coef_p, coef_n, grad):
    """grad[i, j] = α_ij · exps[i, j] · (coef_n[i] on negatives, coef_p[i] on positives), with
    the weights α of Eq. 5 recomputed from the similarities (no gradient through them)."""
    for i in prange(sim.shape[0]):
        s_row, p_row, n_row, e_row, g_row = sim[i], pos[i], neg[i], exps[i], grad[i]
        zero = m - m
        for j in range(s_row.size):
            s = s_row[j]
            if p_row[j]:
                g_row[j] = (e_row[j] * coef_p[i]) * max(one_plus_m - s, zero)
            elif n_row[j]:
                g_row[j] = (e_row[j] * coef_n[i]) * max(s + m, zero)
            else:
                g_row[j] = zero
