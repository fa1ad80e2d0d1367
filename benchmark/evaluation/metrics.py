"""Retrieval metrics as functions of the positives' positions (see README, `## Evaluation`).

For a query with R positives at 1-based positions p_1 < … < p_R of its ranking:

    R@K          = 1[p_1 ≤ K]                                   (CMC rank-K for re-ID)
    AP           = (1/R) Σ_k k / p_k                            (mAP = mean over queries)
    MAP@R        = (1/R) Σ_{k : p_k ≤ R} k / p_k                (Musgrave et al., 2020)
    R-Precision  = #{k : p_k ≤ R} / R                           (Musgrave et al., 2020)

Each is averaged over the queries that have at least one positive.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

from benchmark.evaluation.ranks import PositiveRanks


def retrieval_metrics(
    ranks: PositiveRanks, ks: Sequence[int], metrics: Sequence[str]
) -> dict[str, float]:
    """Mean metrics over the queries with at least one positive (0.0 if there is none)."""
    counts = ranks.counts[ranks.counts > 0]
    n_queries = counts.numel()
    query = torch.repeat_interleave(torch.arange(n_queries), counts)  # [P] owner of each position
    pos = ranks.positions.to(torch.float64)
    k = torch.arange(pos.numel()) - torch.repeat_interleave(counts.cumsum(0) - counts, counts) + 1
    r = counts.to(torch.float64)[query]
    precision = k.to(torch.float64) / pos  # precision at each positive

    def mean_over_queries(per_position: Tensor) -> float:
        if n_queries == 0:
            return 0.0
        per_query = torch.zeros(n_queries, dtype=torch.float64).index_add_(0, query, per_position)
        return (per_query / counts.to(torch.float64)).mean().item()

    out: dict[str, float] = {}
    if "recall" in metrics:
        first = pos[(counts.cumsum(0) - counts)] if n_queries else pos[:0]
        for kk in ks:
            out[f"R@{kk}"] = (first <= kk).to(torch.float64).mean().item() if n_queries else 0.0
    if "mAP" in metrics:
        out["mAP"] = mean_over_queries(precision)
    in_top_r = pos <= r
    if "MAP@R" in metrics:
        out["MAP@R"] = mean_over_queries(torch.where(in_top_r, precision, 0.0))
    if "R-Precision" in metrics:
        out["R-Precision"] = mean_over_queries(in_top_r.to(torch.float64))
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
    import faiss  # a core dependency; imported here to keep `import benchmark` light

    n_classes = len(np.unique(labels))
    kmeans = faiss.Kmeans(unit.shape[1], n_classes, niter=20, seed=seed, verbose=False)
    kmeans.train(np.ascontiguousarray(unit, dtype=np.float32))
    _, assign = kmeans.index.search(np.ascontiguousarray(unit, dtype=np.float32), 1)
    return normalized_mutual_information(labels, assign[:, 0])
