"""k-reciprocal re-ranking (Zhong, Zheng, Cao, Li, CVPR 2017) for the query_gallery protocol.

Probes and gallery form one set of N items; with s the reference similarity (`similarity`), as
in the authors' code (docs/evaluation/rerank.md has the full definitions and where the code
departs from the paper):

    d(p, g)   = (2 - 2 s(p, g)) / max_j (2 - 2 s(p, j))   over all N items j
    R*(p, k1) = the k1-reciprocal neighbours of p, ½-expanded
    V_p[g]    = exp(-d(p, g)) normalised over g ∈ R*(p, k1), then averaged over p's k2 nearest
    d_J(p, g) = 1 - Σ_j min(V_p[j], V_g[j]) / Σ_j max(V_p[j], V_g[j])
    d*(p, g)  = (1 - λ) d_J(p, g) + λ d(p, g)              defaults k1 = 20, k2 = 6, λ = 0.3

The gallery is ranked by d* ascending, with the set rules of `sets`. Exact: every similarity
that decides something is the reference s, a negative's float32 estimate of d* is replaced by
its exact d* whenever it is within its bound of a positive's, and the Jaccard sums run in a
fixed order (`_kreciprocal`). Memory: chunk × N float32 panels and a sparse V, never an N × N
or Q × G matrix.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

import numpy as np
import scipy.sparse as sp
import torch
from torch import Tensor

from benchmark.evaluation import _kreciprocal
from benchmark.evaluation._neighbours import nearest_neighbours
from benchmark.evaluation.precision import ieee_float32
from benchmark.evaluation.ranks import PositiveRanks
from benchmark.evaluation.sets import EvaluationSets, excluded
from benchmark.evaluation.similarity import UnitEmbeddings, exact_similarities, prepare

RerankMethod = Literal["k-reciprocal"]
RERANK_METHODS: tuple[RerankMethod, ...] = ("k-reciprocal",)


@dataclass(frozen=True)
class KReciprocal:
    """k-reciprocal re-ranking's parameters, by default the paper's (Market-1501): `k1` the size
    of the sets R(p, k1), `k2` the neighbours averaged by local query expansion (1: none),
    `lambda_` the weight λ of the original distance in d* (0: Jaccard only)."""

    k1: int = 20
    k2: int = 6
    lambda_: float = 0.3

    def __post_init__(self) -> None:
        for name, value in (("k1", self.k1), ("k2", self.k2)):
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
                raise ValueError(
                    f"KReciprocal: {name} must be an integer ≥ 1, got {value!r}; "
                    "the paper uses k1=20, k2=6"
                )
        if not 0.0 <= self.lambda_ <= 1.0:
            raise ValueError(
                f"KReciprocal: lambda_ must be in [0, 1], got {self.lambda_!r}; the paper uses 0.3"
            )

    def __str__(self) -> str:
        return f"k-reciprocal k1={self.k1} k2={self.k2} lambda={self.lambda_:g}"


def rerank_method(rerank: str | KReciprocal) -> KReciprocal:
    """The parameters `rerank` stands for: "k-reciprocal" is the paper's defaults."""
    if isinstance(rerank, KReciprocal):
        return rerank
    if rerank == "k-reciprocal":
        return KReciprocal()
    raise ValueError(
        f"rerank must be one of {list(RERANK_METHODS)}, a KReciprocal(k1, k2, lambda_) or None, "
        f"got {rerank!r}"
    )


@dataclass(frozen=True)
class _Encoding:
    """Everything d* needs beyond one chunk: the k-reciprocal features V and the normalisers."""

    x: UnitEmbeddings  # probes then gallery, [N, D]
    n_query: int
    scale: Tensor  # [N] float64: max_j (2 - 2 s(i, j)), the row's normaliser of d
    probe_v: sp.csr_matrix  # [Q, N] V of the probes
    gallery_v: sp.csc_matrix  # [G, N] V of the gallery, by column
    probe_sum: Tensor  # [Q] float64 Σ_j V_p[j] (1 up to rounding)
    gallery_sum: Tensor  # [G] float64
    eps: float  # |s̃ - s| ≤ eps for the float32 products s̃ of `x.low.values`


def _encode(query: Tensor, gallery: Tensor, params: KReciprocal, chunk: int) -> _Encoding:
    """V of every item (after local query expansion) from the exact neighbour lists."""
    cpu = torch.device("cpu")
    q = prepare(query, "query_emb", low_dtype=torch.float32, device=cpu, chunk=chunk)
    g = prepare(gallery, "gallery_emb", low_dtype=torch.float32, device=cpu, chunk=chunk)
    # One set of N items; its float32 copy is built once, when first used.
    x = replace(q, raw=torch.cat([q.raw, g.raw]), norms=torch.cat([q.norms, g.norms]))
    n, n_query = x.raw.shape[0], query.shape[0]
    k1, half, k2 = min(params.k1 + 1, n), min(round(params.k1 / 2) + 1, n), min(params.k2, n)
    neighbours = nearest_neighbours(x, max(k1, k2), chunk)
    rank = neighbours.rank
    scale = 2 - 2 * neighbours.least
    if not bool((scale > 0).all()):
        raise ValueError("re-ranking: every embedding points the same way (all distances 0)")
    rows, cols = _expanded_sets(rank, k1, half)
    s = exact_similarities(x, x, rows, cols).to(torch.float64)
    weight = torch.exp(-((2 - 2 * s) / scale[rows]))  # Gaussian kernel of d
    total = torch.zeros(n, dtype=torch.float64).index_add_(0, rows, weight)
    ptr = np.concatenate([[0], np.cumsum(np.bincount(rows.numpy(), minlength=n))])
    v = sp.csr_matrix(((weight / total[rows]).numpy(), cols.numpy(), ptr), shape=(n, n))
    if k2 > 1:
        mean = sp.csr_matrix(
            (np.ones(n * k2), rank[:, :k2].reshape(-1).numpy(), np.arange(0, n * k2 + 1, k2)),
            shape=(n, n),
        )
        v = mean @ v
        v.data /= k2
    v = sp.csr_matrix(v)
    v.sort_indices()
    sums = torch.from_numpy(np.asarray(v.sum(axis=1)).ravel())
    return _Encoding(
        x, n_query, scale, v[:n_query], sp.csc_matrix(v[n_query:]), sums[:n_query],
        sums[n_query:], neighbours.eps,
    )  # fmt: skip


def _expanded_sets(rank: Tensor, k1: int, half: int) -> tuple[Tensor, Tensor]:
    """(p, g) for every g ∈ R*(p, k1), rows ascending, g ascending within a row; `k1` and
    `half` count the nearest items each set is drawn from (p itself included)."""
    members = np.empty((rank.shape[0], k1 * (1 + half)), dtype=np.int64)  # R(p) + R(q) each
    _kreciprocal.expanded_sets(rank.contiguous().numpy(), k1, half, members)
    rows, slots = np.nonzero(members >= 0)
    return torch.from_numpy(rows), torch.from_numpy(members[rows, slots])


def _jaccard_distances(enc: _Encoding, a: int, b: int) -> Tensor:
    """d_J [b - a, G] float64 of probes [a, b) against the whole gallery."""
    p, g = enc.probe_v, enc.gallery_v
    out = np.empty((b - a, g.shape[0]))
    _kreciprocal.jaccard_rows(p.indptr, p.indices, p.data, a, g.indptr, g.indices, g.data,
                              enc.probe_sum.numpy(), enc.gallery_sum.numpy(), out)  # fmt: skip
    return torch.from_numpy(out)


def _final(jaccard: Tensor, s: Tensor, scale: Tensor, lambda_: float) -> Tensor:
    """d* = (1 - λ) d_J + λ d, with d = (2 - 2s) / scale (float64, broadcasting)."""
    return (1 - lambda_) * jaccard + lambda_ * ((2 - 2 * s) / scale)


def reranked_distances(
    query: Tensor, gallery: Tensor, params: KReciprocal, chunk: int = 1024
) -> Tensor:
    """d* [Q, G] float64 of float32 `query [Q, D]` and `gallery [G, D]`, every entry from the
    exact similarity: Q × G values, for small sets (`reranked_ranks` has bounded memory)."""
    enc = _encode(query, gallery, params, chunk)
    n_query, n_gallery = query.shape[0], gallery.shape[0]
    out = torch.empty(n_query, n_gallery, dtype=torch.float64)
    cols = torch.arange(n_gallery)
    for a in range(0, n_query, chunk):
        b = min(n_query, a + chunk)
        rows = torch.arange(a, b).repeat_interleave(n_gallery)
        s = exact_similarities(enc.x, enc.x, rows, n_query + cols.repeat(b - a))
        s64 = s.to(torch.float64).view(b - a, n_gallery)
        out[a:b] = _final(_jaccard_distances(enc, a, b), s64, enc.scale[a:b, None], params.lambda_)
    return out


def reranked_ranks(sets: EvaluationSets, params: KReciprocal, chunk: int) -> PositiveRanks:
    """Positions of the positives in each query's ranking of the gallery by d* ascending.

    position_k = k + #{negatives j : d*_j ≤ t_k}, t_1 ≤ … ≤ t_R the positives' d* (ties rank the
    negative first, as `ranks`); queries in their given order.
    """
    if sets.same_set:
        raise ValueError("k-reciprocal re-ranking needs protocol='query_gallery'")
    enc = _encode(sets.query, sets.gallery, params, chunk)
    parts = [
        _chunk_positions(enc, sets, a, min(enc.n_query, a + chunk), params.lambda_)
        for a in range(0, enc.n_query, chunk)
    ]
    return PositiveRanks(torch.cat([p for p, _ in parts]), torch.cat([c for _, c in parts]))


def _chunk_positions(
    enc: _Encoding, sets: EvaluationSets, a: int, b: int, lambda_: float
) -> tuple[Tensor, Tensor]:
    """(positions [P], counts [b - a]) of queries [a, b)."""
    jaccard = _jaccard_distances(enc, a, b)  # [B, G]
    q_labels, q_cams, g_cams = sets.query_labels[a:b], sets.query_cams, sets.gallery_cams
    positive = q_labels[:, None] == sets.gallery_labels[None, :]
    if q_cams is not None and g_cams is not None:
        positive &= ~excluded(positive, q_cams[a:b, None], g_cams[None, :])
    scale = enc.scale[a:b]
    pr, pc = positive.nonzero(as_tuple=True)  # rows ascending
    s = exact_similarities(enc.x, enc.x, a + pr, enc.n_query + pc).to(torch.float64)
    t = _final(jaccard[pr, pc], s, scale[pr], lambda_)
    order = torch.sort(t, stable=True).indices
    order = order[torch.sort(pr[order], stable=True).indices]  # by row, then t ascending
    pr, t = pr[order], t[order]
    counts = torch.bincount(pr, minlength=b - a)
    ptr = torch.cat([torch.zeros(1, dtype=torch.int64), counts.cumsum(0)])
    width = int(counts.max()) if pr.numel() else 0
    # Negatives: counted from their float32 estimate, or marked unsure when it is too close.
    hist = np.zeros((b - a, width + 1), dtype=np.int64)  # hist[i, c]: #{t < d*} = c
    unsure = np.zeros(jaccard.shape, dtype=np.bool_)
    delta = lambda_ * 2 * enc.eps / scale + 1e-12  # [B] bound on |d̃* - d*|, plus roundings
    with ieee_float32():  # recomputed: keeping them from the graph's panels takes Q × G floats
        low = enc.x.low.values  # [N, D] float32
        s_low = low[a:b] @ low[enc.n_query :].T  # [B, G] float32
    _kreciprocal.count_negatives(
        jaccard.numpy(), s_low.numpy(), scale.numpy(), lambda_, delta.numpy(),
        q_labels.numpy(), sets.gallery_labels.numpy(), ptr.numpy(), t.numpy(), hist, unsure,
    )  # fmt: skip
    ur, uc = (torch.from_numpy(i) for i in np.nonzero(unsure))
    s = exact_similarities(enc.x, enc.x, a + ur, enc.n_query + uc).to(torch.float64)
    exact = _final(jaccard[ur, uc], s, scale[ur], lambda_)
    thresholds = torch.full((b - a, width + 1), torch.inf, dtype=torch.float64)
    slot = torch.arange(pr.numel()) - ptr[pr]
    thresholds[pr, slot] = t  # [B, R_max + 1], ascending, +inf padded
    below = torch.searchsorted(thresholds[ur], exact[:, None])[:, 0]
    ahead = torch.from_numpy(hist).index_put_((ur, below), torch.ones_like(below), accumulate=True)
    ahead = ahead[:, :width].cumsum(1)  # ahead[i, k-1]: negatives with d* ≤ t_k
    return slot + 1 + ahead[pr, slot], counts
