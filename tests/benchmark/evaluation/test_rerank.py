"""k-reciprocal re-ranking against the paper's algorithm written as plain numpy loops, and the
re-ranked evaluation against a full sort of the re-ranked distances."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch

from benchmark.evaluation import RetrievalEvaluator, _neighbours, arithmetic
from benchmark.evaluation.rerank import KReciprocal, reranked_distances
from benchmark.evaluation.similarity import prepare
from tests.benchmark.evaluation.conftest import ranking_metrics

PARAMS = [KReciprocal(), KReciprocal(k1=5, k2=1, lambda_=0.0), KReciprocal(k1=7, k2=3)]
METRICS = ("recall", "mAP", "MAP@R", "R-Precision", "mINP")


def reference_rerank(q: np.ndarray, g: np.ndarray, k1: int, k2: int, lam: float) -> np.ndarray:
    """d* [Q, G] of Zhong et al. (CVPR 2017) as the authors' code computes it, dense: probes then
    gallery in one set, squared distances of unit vectors over their row's maximum, k + 1
    nearest (the item itself included, ties by index), the ½-expansion, the Gaussian kernel,
    local query expansion over the k2 nearest, Jaccard distance as Σ min / Σ max."""
    x = np.concatenate([q, g]).astype(np.float32)
    x = x / np.linalg.norm(x.astype(np.float64), axis=1).astype(np.float32)[:, None]
    s = (x.astype(np.float64) @ x.astype(np.float64).T).astype(np.float32).astype(np.float64)
    d = 2 - 2 * s
    d = d / d.max(axis=1, keepdims=True)
    n, n_query = len(x), len(q)
    rank = np.argsort(d, axis=1, kind="stable")

    def reciprocal(i: int, k: int) -> list[int]:
        return [int(j) for j in rank[i, : k + 1] if i in rank[j, : k + 1]]

    v = np.zeros((n, n))
    for i in range(n):
        r = reciprocal(i, k1)
        expanded = set(r)
        for c in r:
            rc = reciprocal(c, round(k1 / 2))
            if len(set(rc) & set(r)) > 2 / 3 * len(rc):
                expanded |= set(rc)
        idx = sorted(expanded)
        weight = np.exp(-d[i, idx])
        v[i, idx] = weight / weight.sum()
    if k2 > 1:
        v = np.stack([v[rank[i, :k2]].mean(axis=0) for i in range(n)])
    vq, vg = v[:n_query, None, :], v[None, n_query:, :]
    jaccard = 1 - np.minimum(vq, vg).sum(-1) / np.maximum(vq, vg).sum(-1)
    return (1 - lam) * jaccard + lam * d[:n_query, n_query:]


def metrics_by_sort(dist, ql, gl, qc, gc, ks=(1, 2, 4)) -> tuple[dict[str, float], int]:
    """Metrics from a full sort of each query's row of `dist` (ascending), ties broken
    pessimistically (negatives first), junk (-1) and same id + camera left out."""
    per_query = []
    for i in range(len(ql)):
        ranking = sorted(
            (float(dist[i, j]), int(gl[j] == ql[i]))
            for j in range(len(gl))
            if gl[j] != -1 and not (gl[j] == ql[i] and gc[j] == qc[i])
        )  # by distance ascending; among equals negatives (0) first
        row = ranking_metrics(ranking, ks)
        if row is not None:
            per_query.append(row)
    means = {key: float(np.mean([row[key] for row in per_query])) for key in per_query[0]}
    return means, len(ql) - len(per_query)


@functools.cache
def reid_case(seed: int, quantised: bool, n: int = 160, dim: int = 8, classes: int = 14):
    """Query/gallery split with cameras, junk (-1), distractor ids and queries without a match;
    `quantised` entries in {-1, 0, 1} give duplicate vectors and exact ties."""
    gen = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, classes, (n,), generator=gen)
    if quantised:
        emb = torch.randint(-1, 2, (n, dim), generator=gen).float()
        emb[(emb == 0).all(1), 0] = 1.0
    else:
        centres = torch.randn(classes, dim, generator=gen)
        emb = centres[labels] + 1.2 * torch.randn(n, dim, generator=gen)
    cams = torch.randint(0, 3, (n,), generator=gen)
    q, ql, qc = emb[:45], labels[:45].clone(), cams[:45]
    g, gl, gc = emb[45:], labels[45:].clone(), cams[45:]
    gl[gl == 13] = -1  # junk: removed before re-ranking
    gl[gl == 12] = 99  # distractors
    ql[:2] = 50  # no match in the gallery: skipped
    return q, ql, qc, g, gl, gc


@functools.cache
def reference_case(seed: int, quantised: bool, params: KReciprocal) -> np.ndarray:
    q, _, _, g, gl, _ = reid_case(seed, quantised)
    return reference_rerank(q.numpy(), g[gl != -1].numpy(), params.k1, params.k2, params.lambda_)


@pytest.mark.parametrize("params", PARAMS, ids=str)
@pytest.mark.parametrize("quantised", [False, True], ids=["continuous", "ties"])
def test_reranked_distances_equal_the_papers_algorithm(params: KReciprocal, quantised) -> None:
    for seed in range(2):
        q, _, _, g, gl, _ = reid_case(seed, quantised)
        expected = reference_case(seed, quantised, params)
        for chunk in (7, 1024):
            got = reranked_distances(q, g[gl != -1], params, chunk=chunk).numpy()
            np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize("params", PARAMS, ids=str)
@pytest.mark.parametrize("chunk_size", [7, 1024])
def test_reranked_metrics_equal_a_full_sort_of_the_papers_distances(params, chunk_size) -> None:
    for seed in range(2):
        q, ql, qc, g, gl, gc = reid_case(seed, quantised=False)
        kept = gl != -1
        dist = reference_case(seed, False, params)
        expected, skipped = metrics_by_sort(dist, ql, gl[kept], qc, gc[kept])
        ev = RetrievalEvaluator("query_gallery", (1, 2, 4), METRICS, chunk_size=chunk_size,
                                rerank=params)  # fmt: skip
        assert ev.evaluate(q, ql, g, gl, qc, gc) == pytest.approx(expected, abs=1e-12)
        assert ev.last_report.skipped_queries == skipped >= 2
        assert (ev.last_report.rerank, ev.last_backend) == (str(params), "torch-cpu-float32")


def test_ties_rank_negatives_first_under_re_ranking_too() -> None:
    """Duplicate vectors tie exactly in d*: the ranks must match a pessimistic full sort."""
    for seed in range(3):
        q, ql, qc, g, gl, gc = reid_case(seed, quantised=True)
        kept = gl != -1
        dist = reranked_distances(q, g[kept], KReciprocal(k1=7, k2=3)).numpy()
        assert len(np.unique(dist)) < dist.size  # the case has ties
        expected, _ = metrics_by_sort(dist, ql, gl[kept], qc, gc[kept])
        ev = RetrievalEvaluator("query_gallery", (1, 2, 4), METRICS, chunk_size=16,
                                rerank=KReciprocal(k1=7, k2=3))  # fmt: skip
        assert ev.evaluate(q, ql, g, gl, qc, gc) == pytest.approx(expected, abs=1e-12)


def test_a_looser_error_bound_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """With ε = 0.05 most list entries, whole rows and many negatives go to the exact re-checks:
    the result must not move (the float32 shortlist only decides what to re-check)."""
    q, ql, qc, g, gl, gc = reid_case(0, quantised=False)
    ev = RetrievalEvaluator("query_gallery", (1, 2, 4), METRICS, rerank="k-reciprocal")
    expected = ev.evaluate(q, ql, g, gl, qc, gc)
    monkeypatch.setattr(_neighbours, "shortlist_error", lambda x, y: 0.05)
    assert ev.evaluate(q, ql, g, gl, qc, gc) == expected


@pytest.mark.parametrize("quantised", [False, True], ids=["continuous", "ties"])
def test_neighbour_lists_are_a_stable_sort_of_the_reference(quantised: bool) -> None:
    q, _, _, g, _, _ = reid_case(1, quantised)
    x = torch.cat([q, g])
    unit = prepare(x, "x", low_dtype=torch.float32, device=torch.device("cpu"), chunk=16)
    xn = (x / unit.norms.float()[:, None]).double()
    s = (xn @ xn.T).float().double().numpy()
    nb = _neighbours.nearest_neighbours(unit, 21, chunk=16)
    np.testing.assert_array_equal(nb.rank.numpy(), np.argsort(-s, axis=1, kind="stable")[:, :21])
    np.testing.assert_array_equal(nb.least.numpy(), s.min(axis=1))


def test_lambda_one_keeps_the_plain_ranking() -> None:
    """d* = d when λ = 1, and d is monotone in the similarity: the plain metrics come back."""
    q, ql, qc, g, gl, gc = reid_case(0, quantised=True)
    plain = RetrievalEvaluator("query_gallery", (1, 2, 4), METRICS).evaluate(q, ql, g, gl, qc, gc)
    ev = RetrievalEvaluator("query_gallery", (1, 2, 4), METRICS, rerank=KReciprocal(lambda_=1))
    assert ev.evaluate(q, ql, g, gl, qc, gc) == pytest.approx(plain, abs=1e-12)


def test_re_ranking_checks_the_arithmetic_variable_too(monkeypatch) -> None:
    """Re-ranking evaluates in float32, yet a misspelt CIRCLEBENCH_EVAL_ARITHMETIC is an error."""
    q, ql, qc, g, gl, gc = reid_case(0, quantised=True)
    monkeypatch.setenv(arithmetic.ENV_VAR, "bfloat61")
    ev = RetrievalEvaluator("query_gallery", (1, 2, 4), METRICS, rerank=KReciprocal())
    with pytest.raises(ValueError, match="CIRCLEBENCH_EVAL_ARITHMETIC must be one of"):
        ev.evaluate(q, ql, g, gl, qc, gc)
    monkeypatch.setenv(arithmetic.ENV_VAR, "bfloat16")  # a valid one: still float32 ranks
    ev.evaluate(q, ql, g, gl, qc, gc)
    assert ev.last_backend == "torch-cpu-float32"


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"rerank": "k-reciprocal", "protocol": "same_set"}, "needs protocol='query_gallery'"),
        ({"rerank": "kreciprocal"}, r"rerank must be one of \['k-reciprocal'\]"),
    ],
)
def test_rerank_argument_errors(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        RetrievalEvaluator(**{"protocol": "query_gallery", **kwargs})


def test_two_empty_encodings_are_at_jaccard_distance_one() -> None:
    """More than k1 + 1 identical vectors: the later copies are not among their own k1 + 1
    nearest (ties go by index), so R* and, with k2 = 1, V are empty; two empty rows share
    nothing (d_J = 1), where Σ min / Σ max would be 0 / 0."""
    gen = torch.Generator().manual_seed(0)
    q = torch.cat([torch.ones(30, 4), torch.randn(5, 4, generator=gen)])
    g = torch.cat([torch.ones(10, 4), torch.randn(20, 4, generator=gen)])
    d = reranked_distances(q, g, KReciprocal(k1=20, k2=1, lambda_=0.0))
    assert torch.isfinite(d).all() and (d[25:30, :10] == 1.0).all()


def test_a_bad_gallery_row_is_named_under_re_ranking_too() -> None:
    q, ql, qc, g, gl, gc = reid_case(0, quantised=False)
    g = g.clone()
    g[7, 0] = torch.nan
    ev = RetrievalEvaluator("query_gallery", rerank="k-reciprocal")
    with pytest.raises(ValueError, match="gallery_emb row 7 has NaN or Inf"):
        ev.evaluate(q, ql, g, gl, qc, gc)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"k1": 0}, "k1 must be an integer ≥ 1"), ({"k2": 2.5}, "k2 must be an integer"),
     ({"lambda_": 1.5}, r"lambda_ must be in \[0, 1\]")],
)  # fmt: skip
def test_k_reciprocal_parameter_errors(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        KReciprocal(**kwargs)
