"""Hardest positive / negative similarity per query, on the evaluator's sets and exclusions."""

from __future__ import annotations

import numpy as np
import torch

from benchmark.evaluation import RetrievalEvaluator


def test_same_set_excludes_self_and_matches_brute_force() -> None:
    emb = torch.tensor([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0], [-1.0, 0.0]])
    labels = torch.tensor([0, 0, 1, 1])
    pairs = RetrievalEvaluator("same_set").hardest_pairs(emb, labels)
    # query 0: its only positive is 1 (cos 0.8); negatives 2 (0.0) and 3 (-1.0)
    np.testing.assert_allclose(pairs.sp, [0.8, 0.8, -0.0, -0.0], atol=1e-6)
    np.testing.assert_allclose(pairs.sn, [0.0, 0.6, 0.6, -0.8], atol=1e-6)


def test_query_gallery_ignores_same_camera_and_junk() -> None:
    query = torch.tensor([[1.0, 0.0]])
    gallery = torch.tensor([[1.0, 0.0], [0.6, 0.8], [0.0, 1.0], [0.99, 0.1]])
    pairs = RetrievalEvaluator("query_gallery").hardest_pairs(
        query,
        torch.tensor([5]),
        gallery,
        torch.tensor([5, 5, 7, -1]),  # -1: junk, ignored even though it is the closest
        torch.tensor([0]),
        torch.tensor([0, 1, 1, 1]),  # gallery 0: same id and camera, not a valid match
    )
    np.testing.assert_allclose(pairs.sp, [0.6], atol=1e-6)
    np.testing.assert_allclose(pairs.sn, [0.0], atol=1e-6)


def test_at_most_max_queries_evenly_spaced() -> None:
    emb = torch.randn(50, 4, generator=torch.Generator().manual_seed(0))
    labels = torch.arange(50) % 5
    pairs = RetrievalEvaluator("same_set").hardest_pairs(emb, labels, max_queries=7)
    assert len(pairs.sp) == len(pairs.sn) == 7 and pairs.sp.dtype == np.float32
