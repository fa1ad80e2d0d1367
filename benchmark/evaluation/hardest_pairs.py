"""Per query, the hardest positive and the hardest negative similarity (Circle paper, Fig. 4/5).

They show where a trained model sits relative to a loss's decision boundary (a run's
`similarities.npz`, the leaderboard's scatter plots); sets and exclusions are the evaluator's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from benchmark.evaluation.sets import EvaluationSets, excluded


@dataclass(frozen=True)
class HardestPairs:
    """Float32 arrays of equal length: lowest positive `sp` and highest negative `sn`."""

    sp: np.ndarray
    sn: np.ndarray


def hardest_pair_similarities(
    sets: EvaluationSets, *, max_queries: int = 2000, chunk: int = 256
) -> HardestPairs:
    """Cosine similarities of at most `max_queries` evenly spaced queries; queries without a
    positive or a negative are dropped."""
    q = F.normalize(sets.query, dim=1)  # [Q, D]
    g = F.normalize(sets.gallery, dim=1)  # [G, D]
    picked = torch.linspace(0, len(q) - 1, min(max_queries, len(q))).round().long().unique()
    sp_all, sn_all = [], []
    for start in range(0, len(picked), chunk):
        rows = picked[start : start + chunk]
        sim = q[rows] @ g.T  # [c, G]
        same = sets.query_labels[rows, None] == sets.gallery_labels[None, :]  # [c, G]
        q_cams = sets.query_cams[rows, None] if sets.query_cams is not None else None
        g_cams = sets.gallery_cams[None, :] if sets.gallery_cams is not None else None
        valid = ~excluded(same, q_cams, g_cams)
        if sets.same_set:
            valid[torch.arange(len(rows)), rows] = False  # a query never retrieves itself
        pos, neg = same & valid, ~same & valid
        sp = torch.where(pos, sim, torch.inf).amin(dim=1)
        sn = torch.where(neg, sim, -torch.inf).amax(dim=1)
        keep = pos.any(1) & neg.any(1)
        sp_all.append(sp[keep])
        sn_all.append(sn[keep])
    return HardestPairs(torch.cat(sp_all).numpy(), torch.cat(sn_all).numpy())
