"""The metric registry: every metric's name, result columns, protocols and formula, in one place.

For a query with R positives at 1-based positions p_1 < … < p_R of its ranking:

    R@K          = 1[p_1 ≤ K]                                   (CMC rank-K for re-ID)
    AP           = (1/R) Σ_k k / p_k                            (mAP = mean over queries)
    MAP@R        = (1/R) Σ_{k : p_k ≤ R} k / p_k                (Musgrave et al., 2020)
    R-Precision  = #{k : p_k ≤ R} / R                           (Musgrave et al., 2020)
    INP          = R / p_R                                      (mINP = mean; Ye et al., 2021)

Each is averaged over the queries that have at least one positive; NMI clusters the embeddings
instead. The evaluator, results rows and leaderboard all read `METRICS`: adding a metric is one
`Metric` entry (and its test).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from benchmark.evaluation.faiss_blocks import import_faiss
from benchmark.evaluation.ranks import PositiveRanks
from benchmark.evaluation.sets import PROTOCOLS, RetrievalProtocol


@dataclass(frozen=True)
class Positions:
    """The positives' positions of the queries that have one, in the forms the formulas use."""

    pos: Tensor  # [P] float64, 1-based positions, ascending within each query
    k: Tensor  # [P] float64, 1-based index of each positive within its query
    r: Tensor  # [P] float64, R of the query each position belongs to
    query: Tensor  # [P] int64, index of that query among the counted ones
    counts: Tensor  # [Q'] int64, R of each counted query (all > 0)

    @staticmethod
    def of(ranks: PositiveRanks) -> Positions:
        counts = ranks.counts[ranks.counts > 0]
        query = torch.repeat_interleave(torch.arange(counts.numel()), counts)
        start = torch.repeat_interleave(counts.cumsum(0) - counts, counts)
        k = torch.arange(query.numel()) - start + 1
        r = counts.to(torch.float64)[query]
        return Positions(ranks.positions.to(torch.float64), k.to(torch.float64), r, query, counts)

    @property
    def n_queries(self) -> int:
        return self.counts.numel()

    def first(self) -> Tensor:
        """p_1 of every counted query [Q']."""
        return self.pos[self.counts.cumsum(0) - self.counts]

    def last(self) -> Tensor:
        """p_R, the hardest positive's position, of every counted query [Q']."""
        return self.pos[self.counts.cumsum(0) - 1]

    def mean(self, per_query: Tensor) -> float:
        """Mean of `per_query` [Q'] over the counted queries; 0.0 when no query counts."""
        return per_query.mean().item() if self.n_queries else 0.0

    def mean_over_queries(self, per_position: Tensor) -> float:
        """Mean over queries of (1/R) Σ per_position; 0.0 when no query counts."""
        per_query = torch.zeros(self.n_queries, dtype=torch.float64)
        per_query.index_add_(0, self.query, per_position)
        return self.mean(per_query / self.counts.to(torch.float64))


def _recall(p: Positions, ks: Sequence[int]) -> dict[str, float]:
    return {f"R@{k}": p.mean((p.first() <= k).to(torch.float64)) for k in ks}


def _average_precision(p: Positions, ks: Sequence[int]) -> dict[str, float]:
    return {"mAP": p.mean_over_queries(p.k / p.pos)}


def _map_at_r(p: Positions, ks: Sequence[int]) -> dict[str, float]:
    return {"MAP@R": p.mean_over_queries(torch.where(p.pos <= p.r, p.k / p.pos, 0.0))}


def _r_precision(p: Positions, ks: Sequence[int]) -> dict[str, float]:
    return {"R-Precision": p.mean_over_queries((p.pos <= p.r).to(torch.float64))}


def _inverse_negative_penalty(p: Positions, ks: Sequence[int]) -> dict[str, float]:
    return {"mINP": p.mean(p.counts.to(torch.float64) / p.last())}


@dataclass(frozen=True)
class Metric:
    """One registered metric: `name` is what `RetrievalEvaluator(metrics=...)` selects, `column`
    its result key and results-row column (`{k}` stands for each K: `R@{k}`), `from_ranks` its
    formula on the positives' positions (None for NMI, which clusters the embeddings)."""

    name: str
    column: str
    from_ranks: Callable[[Positions, Sequence[int]], dict[str, float]] | None
    protocols: tuple[RetrievalProtocol, ...] = PROTOCOLS

    def owns(self, column: str) -> int | None:
        """K of `column` for a per-K metric (0 for the others) if `column` is ours, else None."""
        prefix, per_k, suffix = self.column.partition("{k}")
        if not per_k:
            return 0 if column == self.column else None
        found = re.fullmatch(re.escape(prefix) + r"(\d+)" + re.escape(suffix), column)
        return int(found[1]) if found else None


METRICS: tuple[Metric, ...] = (
    Metric("recall", "R@{k}", _recall),
    Metric("mAP", "mAP", _average_precision),
    Metric("MAP@R", "MAP@R", _map_at_r),
    Metric("R-Precision", "R-Precision", _r_precision),
    # Ye et al. (TPAMI 2021) define mINP for re-ID; the formula needs only the positives'
    # positions, so it means the same under same_set (R = the query's class size - 1).
    Metric("mINP", "mINP", _inverse_negative_penalty),
    Metric("NMI", "NMI", None),
)
METRIC_NAMES = tuple(m.name for m in METRICS)
# NMI runs k-means and mINP is new: opt in (existing rows and leaderboards keep their columns).
DEFAULT_METRICS = ("recall", "mAP", "MAP@R", "R-Precision")


def metric(name: str) -> Metric:
    """The registered metric called `name`."""
    for m in METRICS:
        if m.name == name:
            return m
    raise KeyError(f"unknown metric {name!r}; choose one of {list(METRIC_NAMES)}")


def _column_key(column: str) -> tuple[int, int] | None:
    """(registry index, K) of a metric column, None for any other column."""
    for index, m in enumerate(METRICS):
        k = m.owns(column)
        if k is not None:
            return index, k
    return None


def metric_columns(columns: Iterable[str]) -> list[str]:
    """The metric columns among `columns`, in registry order (per-K metrics by K)."""
    keyed = [(key, c) for c in columns if (key := _column_key(c)) is not None]
    return [c for _, c in sorted(keyed)]


def retrieval_metrics(
    ranks: PositiveRanks, ks: Sequence[int], metrics: Sequence[str]
) -> dict[str, float]:
    """The rank-based metrics among `metrics`, in registry order; 0.0 when no query counts."""
    positions = Positions.of(ranks)
    out: dict[str, float] = {}
    for m in METRICS:
        if m.name in metrics and m.from_ranks is not None:
            out |= m.from_ranks(positions, ks)
    return out


def normalized_mutual_information(labels: np.ndarray, clusters: np.ndarray) -> float:
    """NMI = I(Y; C) / ((H(Y) + H(C)) / 2), the arithmetic-mean normalisation, in [0, 1]."""
    _, y = np.unique(labels, return_inverse=True)
    _, c = np.unique(clusters, return_inverse=True)
    joint = np.zeros((y.max() + 1, c.max() + 1))
    np.add.at(joint, (y, c), 1.0)
    joint /= joint.sum()
    py, pc = joint.sum(1), joint.sum(0)
    nz = joint > 0
    mutual = float((joint[nz] * np.log(joint[nz] / np.outer(py, pc)[nz])).sum())
    hy = float(-(py * np.log(py)).sum())
    hc = float(-(pc * np.log(pc)).sum())
    if hy + hc == 0:
        return 1.0
    return max(0.0, 2 * mutual / (hy + hc))


def kmeans_nmi(unit: np.ndarray, labels: np.ndarray, seed: int = 0) -> float:
    """NMI of k-means clusters (faiss, k = number of classes, fixed seed) against the labels."""
    faiss = import_faiss()  # imports faiss on first use: it keeps `import benchmark` light
    n_classes = len(np.unique(labels))
    kmeans = faiss.Kmeans(unit.shape[1], n_classes, niter=20, seed=seed, verbose=False)
    kmeans.train(np.ascontiguousarray(unit, dtype=np.float32))
    _, assign = kmeans.index.search(np.ascontiguousarray(unit, dtype=np.float32), 1)
    return normalized_mutual_information(labels, assign[:, 0])
