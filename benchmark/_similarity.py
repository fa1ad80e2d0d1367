"""Exact cosine similarities and the low-precision copies that shortlist them.

The reference similarity of a query x and a gallery item y is

    s(x, y) = fp32( sum_d x̂_d ŷ_d  evaluated in float64 ),   x̂ = fp32( x / ||x||_2 in float64 ),

i.e. the float32 cosine similarity of the float32 unit vectors, rounded once. Products of two
float32 numbers are exact in float64, so the float64 sum is within D·2⁻⁵³ of the true dot
product whatever the summation order, and the final rounding makes identical vectors tie.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

_ROWS_PER_PIECE_BYTES = 64 * 2**20  # float64 working set of one gather step
U32 = 2.0**-24  # float32 unit roundoff


@dataclass(frozen=True)
class UnitEmbeddings:
    """Embeddings with their float64 norms and a low-precision unit copy for the shortlist.

    `raw [N, D]` is the caller's tensor on the CPU (not copied when already float32), `norms [N]`
    float64, `low [N, D]` the unit vectors in the shortlist dtype on the compute device.
    `low_norm` bounds ||low_i|| and `low_error` bounds ||x̂_i - low_i|| over all rows.
    """

    raw: Tensor
    norms: Tensor
    low: Tensor
    low_norm: float
    low_error: float

    @property
    def dim(self) -> int:
        return self.raw.shape[1]


def unit_rows(raw: Tensor, norms: Tensor) -> Tensor:
    """float32 unit vectors x̂ [n, D] of `raw` rows, normalised in float64."""
    return (raw.to(torch.float64) / norms[:, None]).to(torch.float32)


def prepare(
    raw: Tensor, *, low_dtype: torch.dtype, device: torch.device, chunk: int
) -> UnitEmbeddings:
    """Normalise `raw [N, D]` chunk by chunk (bounded memory) and build the shortlist copy."""
    n = raw.shape[0]
    norms = torch.empty(n, dtype=torch.float64)
    low = torch.empty(raw.shape, dtype=low_dtype, device=device)
    low_norm = low_error = 0.0
    for start in range(0, n, chunk):
        rows = raw[start : start + chunk].to(torch.float64)
        norms[start : start + chunk] = torch.linalg.vector_norm(rows, dim=1)
        unit = unit_rows(raw[start : start + chunk], norms[start : start + chunk])
        part = unit.to(low_dtype)
        low[start : start + chunk] = part.to(device)
        low64 = part.to(torch.float64)
        low_norm = max(low_norm, torch.linalg.vector_norm(low64, dim=1).max().item())
        low_error = max(
            low_error, torch.linalg.vector_norm(unit.to(torch.float64) - low64, dim=1).max().item()
        )
    # The float64 norms of D terms carry a relative error far below 1e-12; 1e-9 covers it.
    return UnitEmbeddings(raw, norms, low, low_norm * (1 + 1e-9), low_error * (1 + 1e-9))


def exact_similarities(
    q: UnitEmbeddings, g: UnitEmbeddings, q_index: Tensor, g_index: Tensor
) -> Tensor:
    """Reference similarities s(q_i, g_j) [M] float32 of the pairs (q_index[m], g_index[m])."""
    out = torch.empty(q_index.numel(), dtype=torch.float32)
    piece = max(1, _ROWS_PER_PIECE_BYTES // (16 * q.dim))
    for start in range(0, q_index.numel(), piece):
        qi, gj = q_index[start : start + piece], g_index[start : start + piece]
        x = unit_rows(q.raw[qi], q.norms[qi]).to(torch.float64)
        y = unit_rows(g.raw[gj], g.norms[gj]).to(torch.float64)
        out[start : start + piece] = (x * y).sum(1).to(torch.float32)
    return out


def shortlist_error(q: UnitEmbeddings, g: UnitEmbeddings) -> float:
    """Bound on |s̃ - s| for the shortlist product s̃ = low_q · low_g accumulated in float32.

    With x̂ = x̃ + δx:  x̂·ŷ - x̃·ỹ = x̃·δy + δx·ỹ + δx·δy  (Cauchy-Schwarz on each term), plus the
    float32 accumulation of D exact products (γ_D·||x̃||·||ỹ||, Higham Thm 3.1), plus the two
    roundings that separate x̂·ŷ from the reference s (2⁻²⁴ covers both for |s| ≤ 1.01).
    Rounding of the product's output, if any, is added by the caller (`output_error`).
    """
    gamma_d = q.dim * U32 / (1 - q.dim * U32)
    a_q, a_g, e_q, e_g = q.low_norm, g.low_norm, q.low_error, g.low_error
    return a_q * e_g + e_q * a_g + e_q * e_g + gamma_d * a_q * a_g + U32 + 1e-30


def output_error(low_out: torch.dtype, thresholds_abs_max: Tensor, eps_in: float) -> Tensor:
    """Per-row extra bound [B] for rounding the product's output to `low_out`.

    bfloat16 has 8 significant bits: rounding a value |v| < 1 moves it by at most 2⁻⁹, and by 2⁻⁸
    when 1 ≤ |v| < 2. A row whose thresholds all satisfy |t| < 1 - 2ε_in - 2⁻⁸ can use 2⁻⁹: any
    value that reached |v| ≥ 1 is on the correct side of every threshold even after rounding.
    """
    if low_out == torch.float32:
        return torch.zeros_like(thresholds_abs_max, dtype=torch.float64)
    small = thresholds_abs_max.to(torch.float64) < 1 - 2 * eps_in - 2.0**-8
    return torch.where(small, 2.0**-9, 2.0**-8)
