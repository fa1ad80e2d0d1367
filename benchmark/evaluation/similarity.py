"""Exact cosine similarities and the low-precision copies that shortlist them.

The reference similarity of a query x and a gallery item y (float32 inputs) is

    s(x, y) = fp32( Σ_d x̂_d ŷ_d  evaluated in float64 ),   x̂ = x / n_x  in float32,

with n_x = fp32(||x||₂ computed in float64): the float32 cosine similarity of the float32 unit
vectors, rounded once. Products of two float32 numbers are exact in float64, so the float64 sum
is within D·2⁻⁵³ of the true dot product whatever the order, and the final rounding makes
identical (or equally similar) items tie.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import torch
from torch import Tensor

from benchmark.evaluation import _dots

U32 = 2.0**-24  # float32 unit roundoff


@dataclass(frozen=True)
class LowCopy:
    """A low-precision copy x̃ of the unit vectors: `values [N, D]` on the compute device, `norm`
    bounding every ||x̃_i|| and `error` every ||x̂_i - x̃_i||."""

    values: Tensor
    norm: float
    error: float

    def rows(self, index: Tensor) -> LowCopy:
        """The same copy restricted (or reordered) to rows `index`; the bounds still hold."""
        return replace(self, values=self.values[index.to(self.values.device)])


@dataclass(frozen=True)
class UnitEmbeddings:
    """Float32 embeddings, their norms and the low-precision copy that shortlists them.

    `raw [N, D]` float32 on the CPU (the caller's tensor, not copied), `norms [N]` the float32
    norms n_x (held as float64). `low` is the copy in `low_dtype` on `device`, built on first
    use, that shortlists these rows as queries and as gallery items alike.
    """

    raw: Tensor
    norms: Tensor
    low_dtype: torch.dtype
    device: torch.device
    chunk: int

    @property
    def dim(self) -> int:
        return self.raw.shape[1]

    @functools.cached_property
    def low(self) -> LowCopy:
        """The unit rows in `low_dtype`, chunk by chunk, with the measured rounding error."""
        low = torch.empty(self.raw.shape, dtype=self.low_dtype, device=self.device)
        low_error = 0.0
        for start in range(0, self.raw.shape[0], self.chunk):
            rows = slice(start, start + self.chunk)
            unit = unit_rows(self.raw[rows], self.norms[rows])
            part = unit.to(self.low_dtype)
            low[rows] = part.to(self.device)
            unit -= part.to(torch.float32)  # in place: one pass fewer over the chunk
            low_error = max(low_error, torch.linalg.vector_norm(unit, dim=1).max().item())
        # float32 norms of D terms are within D·2⁻²⁴ (< 1e-3 for D < 16,000) of the true ones,
        # so ||x̂|| ≤ 1 + 1e-3 and ||low|| ≤ ||x̂|| + ||x̂ - low|| (saves a norm pass per chunk).
        low_error *= 1 + 1e-3
        return LowCopy(low, (1 + 1e-3) * (1 + low_error), low_error)

    @functools.cached_property
    def raw_in_range(self) -> bool:
        """Whether float32 dot products of the raw rows keep `raw_error`'s bound: with every
        norm in [2⁻⁴⁰, 2⁴⁰] no partial sum overflows and underflow moves a cosine by < D·2⁻⁷⁰."""
        return bool(((self.norms >= 2.0**-40) & (self.norms <= 2.0**40)).all())

    def in_dtype(self, low_dtype: torch.dtype) -> UnitEmbeddings:
        """The same rows shortlisted in `low_dtype` (the copy built anew, on first use)."""
        return self if low_dtype == self.low_dtype else replace(self, low_dtype=low_dtype)


def unit_rows(raw: Tensor, norms: Tensor) -> Tensor:
    """float32 unit vectors x̂ [n, D] of float32 `raw` rows and their norms n_x [n]."""
    return raw / norms.to(torch.float32)[:, None]


def prepare(
    raw: Tensor, name: str, *, low_dtype: torch.dtype, device: torch.device, chunk: int
) -> UnitEmbeddings:
    """Check and normalise `raw [N, D]` (compiled, one pass per row); the shortlist copy in
    `low_dtype` is built when first used. Raises ValueError naming `name` if a row is all zeros,
    holds a NaN or Inf, or has a norm past float32's range (its norm is then not finite)."""
    x = raw.numpy()
    norms32 = np.empty(x.shape[0], np.float32)
    _dots.on_threads(lambda a, b: _dots.float32_norms(x[a:b], norms32[a:b]), x.shape[0])
    bad = ~np.isfinite(norms32) | (norms32 == 0)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        if norms32[row] == 0:
            what = "is all zeros: its cosine similarity is undefined"
        elif np.isfinite(x[row]).all():
            what = (
                f"has a norm past float32's largest value ({np.finfo(np.float32).max:.3g}); "
                "scale the embeddings down (cosine similarity does not change)"
            )
        else:
            what = "has NaN or Inf values: its cosine similarity is undefined"
        raise ValueError(f"{name} row {row} {what}")
    norms = torch.from_numpy(norms32).to(torch.float64)
    return UnitEmbeddings(raw, norms, low_dtype, device, chunk)


def exact_similarities(
    q: UnitEmbeddings, g: UnitEmbeddings, q_rows: Tensor, g_rows: Tensor
) -> Tensor:
    """Reference similarities [M] float32 of the pairs (q_rows[m], g_rows[m]), in any order.
    Every one comes from this compiled loop (`_dots.unit_dots`): identical vectors tie."""
    q_norms, g_norms = q.norms.to(torch.float32).numpy(), g.norms.to(torch.float32).numpy()
    return _pairs(_dots.unit_dots, q, g, q_norms, g_norms, q_rows, g_rows, np.float32)


def raw_similarities(
    q: UnitEmbeddings, g: UnitEmbeddings, q_rows: Tensor, g_rows: Tensor
) -> Tensor:
    """float32 dot products of raw rows over the float64 norms, for pairs (q_rows[m], g_rows[m]),
    in any order. Within `raw_error(D)` of the reference; float64 [M].
    """
    q_norms, g_norms = q.norms.numpy(), g.norms.numpy()
    return _pairs(_dots.raw_cosines, q, g, q_norms, g_norms, q_rows, g_rows, np.float64)


def _pairs(
    kernel: Callable[..., None],
    q: UnitEmbeddings,
    g: UnitEmbeddings,
    q_norms: np.ndarray,
    g_norms: np.ndarray,
    q_rows: Tensor,
    g_rows: Tensor,
    dtype: type[np.floating],
) -> Tensor:
    """A `_dots` pair kernel's output [M] for the pairs (q_rows[m], g_rows[m]), on threads."""
    out = np.empty(q_rows.numel(), dtype=dtype)
    x, y, xr, yr = q.raw.numpy(), g.raw.numpy(), q_rows.numpy(), g_rows.numpy()

    def run(a: int, b: int) -> None:
        kernel(x, y, q_norms, g_norms, xr[a:b], yr[a:b], out[a:b])

    _dots.on_threads(run, out.size)
    return torch.from_numpy(out)


def raw_error(dim: int) -> float:
    """Bound on |raw_similarities - s|: float32 accumulation γ_D, the two float32 roundings of
    x̂ and ŷ (2·2⁻²⁴ relative), and the reference's own rounding (2⁻²⁴)."""
    return dim * U32 / (1 - dim * U32) + 3.01 * U32


def shortlist_error(q: UnitEmbeddings, g: UnitEmbeddings) -> float:
    """Bound on |s̃ - s| for the shortlist product s̃ = x̃ · ỹ of q's and g's low-precision
    copies, before any rounding of the product's output.

    With x̂ = x̃ + δx:  x̂·ŷ - x̃·ỹ = x̃·δy + δx·ỹ + δx·δy  (Cauchy-Schwarz on each term), plus the
    float32 accumulation of D exact products (γ_D·||x̃||·||ỹ||, Higham Thm 3.1), plus the two
    roundings that separate x̂·ŷ from the reference s (2⁻²⁴ covers both for |s| ≤ 1.01).
    Rounding of the product's output, if any, is added by the caller (`output_error`).
    """
    qc, gc = q.low, g.low
    gamma_d = q.dim * U32 / (1 - q.dim * U32)
    a_q, a_g, e_q, e_g = qc.norm, gc.norm, qc.error, gc.error
    return a_q * e_g + e_q * a_g + e_q * e_g + gamma_d * a_q * a_g + U32 + 1e-30


def output_error(low_out: torch.dtype, thresholds: Tensor, eps_in: float) -> Tensor:
    """Per-threshold extra bound [P] float64 for rounding the product's output to `low_out`.

    bfloat16 keeps 8 significant bits: below a power of two P it moves a value by at most
    P·2⁻⁹. With P ≥ |t| + ε_in + 2⁻⁷, every value that could be near t lies below P, and a value
    v with |v| ≥ P still lands on the correct side of t ± (ε_in + P·2⁻⁹) after rounding
    (|fl(v)| ≥ P ≥ |t| + ε_in + 2⁻⁷ and P·2⁻⁹ < 2⁻⁷). So thresholds in [¼, ½) get 2⁻¹⁰, half
    the bound of those in [½, 1): a narrower band, fewer pairs to re-check.
    """
    t = thresholds.to(torch.float64)
    if low_out == torch.float32:
        return torch.zeros_like(t)
    reach = t.abs() + eps_in + 2.0**-7
    power = torch.exp2(torch.ceil(torch.log2(reach)))
    power = torch.where(power < reach, 2 * power, power)  # log2 may round down just above 2^k
    return power * 2.0**-9
