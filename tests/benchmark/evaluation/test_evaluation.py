"""RetrievalEvaluator against a brute-force full sort, and on cases small enough to do by hand."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch

from benchmark.evaluation import RetrievalEvaluator
from benchmark.evaluation.similarity import output_error, prepare, shortlist_error

BACKENDS = ["torch", "faiss"] + (["torch-cuda"] if torch.cuda.is_available() else [])


def evaluator(protocol: str, ks=(1, 2, 4), backend: str = "torch", **kwargs) -> RetrievalEvaluator:
    device = "cuda" if backend == "torch-cuda" else "cpu"
    name = "torch" if backend == "torch-cuda" else backend
    metrics = ("recall", "mAP", "MAP@R", "R-Precision", "mINP")
    return RetrievalEvaluator(protocol, ks, metrics, backend=name, device=device, **kwargs)


@functools.cache
def same_set_case(seed: int, quantised: bool):
    emb, labels = random_case(seed, quantised=quantised)
    return emb, labels, brute_force(emb, labels, emb, labels, same_set=True)


@functools.cache
def query_gallery_case(seed: int, quantised: bool):
    emb, labels = random_case(seed, quantised=quantised, n=200, classes=12)
    cams = torch.randint(0, 3, (200,), generator=torch.Generator().manual_seed(100 + seed))
    q, ql, qc = emb[:60], labels[:60].clone(), cams[:60]
    g, gl, gc = emb[60:], labels[60:].clone(), cams[60:]
    gl[gl == 11] = -1  # junk: ignored
    gl[gl == 10] = 99  # distractors: an identity no query has
    ql[:3] = 50  # queries whose identity is absent from the gallery: skipped
    return (q, ql, g, gl, qc, gc), brute_force(q, ql, g, gl, qc, gc, same_set=False)


def brute_force(q, ql, g, gl, qc=None, gc=None, *, same_set: bool, ks=(1, 2, 4)):
    """Metrics from a full sort per query, ties broken pessimistically (negatives first)."""
    qn = q / torch.linalg.vector_norm(q, dim=1, dtype=torch.float64).float()[:, None]
    gn = g / torch.linalg.vector_norm(g, dim=1, dtype=torch.float64).float()[:, None]
    sims = (qn.double() @ gn.double().T).float()
    per_query = []
    for i in range(len(q)):
        ranking = []
        for j in range(len(g)):
            if same_set and i == j:
                continue
            if not same_set and gl[j] == -1:
                continue
            if qc is not None and gl[j] == ql[i] and gc[j] == qc[i]:
                continue
            ranking.append((-sims[i, j].item(), int(gl[j] == ql[i])))
        ranking.sort()  # by similarity, descending; among equals negatives (0) first
        positions = [p + 1 for p, (_, rel) in enumerate(ranking) if rel]
        r = len(positions)
        if r == 0:
            continue
        row = {f"R@{k}": float(positions[0] <= k) for k in ks}
        row["mAP"] = sum((k + 1) / p for k, p in enumerate(positions)) / r
        row["MAP@R"] = sum((k + 1) / p for k, p in enumerate(positions) if p <= r) / r
        row["R-Precision"] = sum(p <= r for p in positions) / r
        row["mINP"] = r / positions[-1]  # INP: R over the hardest (last) positive's position
        per_query.append(row)
    skipped = len(q) - len(per_query)
    return {key: float(np.mean([row[key] for row in per_query])) for key in per_query[0]}, skipped


def random_case(seed: int, *, quantised: bool, n: int = 120, dim: int = 6, classes: int = 15):
    gen = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, classes, (n,), generator=gen)
    if quantised:  # entries in {-1, 0, 1}: many exact ties and duplicate vectors
        emb = torch.randint(-1, 2, (n, dim), generator=gen).float()
        emb[(emb == 0).all(1), 0] = 1.0
    else:
        centres = torch.randn(classes, dim, generator=gen)
        emb = centres[labels] + 1.5 * torch.randn(n, dim, generator=gen)
    return emb, labels


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("quantised", [False, True], ids=["continuous", "ties"])
@pytest.mark.parametrize("chunk_size", [16, 1024])
def test_same_set_equals_brute_force(backend: str, quantised: bool, chunk_size: int) -> None:
    for seed in range(3):
        emb, labels, (expected, skipped) = same_set_case(seed, quantised)
        ev = evaluator("same_set", backend=backend, chunk_size=chunk_size)
        assert ev.evaluate(emb, labels) == pytest.approx(expected, abs=1e-12)
        assert ev.last_report.skipped_queries == skipped


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("quantised", [False, True], ids=["continuous", "ties"])
@pytest.mark.parametrize("chunk_size", [16, 1024])
def test_query_gallery_equals_brute_force(backend: str, quantised: bool, chunk_size: int) -> None:
    for seed in range(3):
        (q, ql, g, gl, qc, gc), (expected, skipped) = query_gallery_case(seed, quantised)
        ev = evaluator("query_gallery", backend=backend, chunk_size=chunk_size)
        got = ev.evaluate(q.numpy(), ql.numpy(), g.numpy(), gl.numpy(), qc.numpy(), gc.numpy())
        assert got == pytest.approx(expected, abs=1e-12)
        assert ev.last_report.skipped_queries == skipped >= 3


def test_backends_agree_on_clustered_data() -> None:
    emb, labels = random_case(7, quantised=False, n=600, dim=32, classes=40)
    results = [evaluator("same_set", (1, 10), backend=b).evaluate(emb, labels) for b in BACKENDS]
    assert all(r == results[0] for r in results)


def test_hand_computed_ranking_pos_neg_pos() -> None:
    # Query (1, 0): positive sim 1, negative 0.8, positive 0.6 -> positives at positions 1 and 3.
    q, ql = torch.tensor([[1.0, 0.0]]), torch.tensor([0])
    g = torch.tensor([[1.0, 0.0], [0.8, 0.6], [0.6, 0.8]])
    gl = torch.tensor([0, 1, 0])
    got = evaluator("query_gallery", ks=(1, 2)).evaluate(q, ql, g, gl)
    assert got["mAP"] == pytest.approx((1 / 1 + 2 / 3) / 2)
    assert got["MAP@R"] == pytest.approx((1 / 1) / 2)  # R = 2: only position 1 is within R
    assert got["R-Precision"] == pytest.approx(1 / 2)
    assert got["mINP"] == pytest.approx(2 / 3)  # R = 2 positives, the last at position 3
    assert (got["R@1"], got["R@2"]) == (1.0, 1.0)


def test_hand_computed_ranking_neg_pos_neg_pos() -> None:
    q, ql = torch.tensor([[1.0, 0.0]]), torch.tensor([0])
    g = torch.tensor([[1.0, 0.0], [0.8, 0.6], [0.6, 0.8], [0.0, 1.0]])
    gl = torch.tensor([1, 0, 1, 0])
    got = evaluator("query_gallery", ks=(1, 2, 4)).evaluate(q, ql, g, gl)
    assert got["mAP"] == pytest.approx((1 / 2 + 2 / 4) / 2)
    assert got["MAP@R"] == pytest.approx((1 / 2) / 2)
    assert got["R-Precision"] == pytest.approx(1 / 2)
    assert got["mINP"] == pytest.approx(2 / 4)
    assert (got["R@1"], got["R@2"], got["R@4"]) == (0.0, 1.0, 1.0)


def test_tie_ranks_the_negative_first() -> None:
    q, ql = torch.tensor([[1.0, 0.0]]), torch.tensor([0])
    g = torch.tensor([[2.0, 0.0], [1.0, 0.0]])  # same direction: equal similarity 1
    for gl in (torch.tensor([1, 0]), torch.tensor([0, 1])):  # gallery order does not matter
        got = evaluator("query_gallery", ks=(1,)).evaluate(q, ql, g, gl)
        assert (got["R@1"], got["mAP"]) == (0.0, 1 / 2)


def test_same_camera_same_id_is_excluded_and_junk_ignored() -> None:
    q, ql, qc = torch.tensor([[1.0, 0.0]]), torch.tensor([0]), torch.tensor([0])
    g = torch.tensor([[1.0, 0.0], [0.6, 0.8], [0.8, 0.6], [1.0, 0.01]])
    gl, gc = torch.tensor([0, 0, 2, -1]), torch.tensor([0, 1, 0, 1])
    ev = evaluator("query_gallery", ks=(1,))
    with_cams = ev.evaluate(q, ql, g, gl, qc, gc)  # ranking: neg 0.8, pos 0.6
    assert (with_cams["R@1"], with_cams["mAP"], with_cams["mINP"]) == (0.0, 1 / 2, 1 / 2)
    without = ev.evaluate(q, ql, g, gl)  # ranking: pos 1, neg 0.8, pos 0.6
    assert without["mAP"] == pytest.approx((1 + 2 / 3) / 2)
    assert without["mINP"] == pytest.approx(2 / 3)  # the junk item at 0.99995 is not a negative


def test_same_set_hand_computed_with_singleton_skipped() -> None:
    emb = torch.tensor([[1.0, 0.0], [0.8, 0.6], [0.6, 0.8]])
    labels = torch.tensor([0, 1, 0])  # item 1 is alone in its class: skipped, counted
    ev = evaluator("same_set", ks=(1, 2))
    got = ev.evaluate(emb, labels)  # both queries rank the negative (0.8 / 0.96) first
    assert (got["R@1"], got["R@2"], got["mAP"]) == (0.0, 1.0, 1 / 2)
    assert ev.last_report.skipped_queries == 1
    assert ev.last_backend == "torch-cpu"


def test_nmi_of_separated_clusters_is_one() -> None:
    centres = torch.eye(4) * 10
    labels = torch.arange(4).repeat_interleave(50)
    emb = centres[labels] + 0.01 * torch.randn(200, 4, generator=torch.Generator().manual_seed(0))
    ev = RetrievalEvaluator("same_set", (1,), metrics=("recall", "NMI"))
    got = ev.evaluate(emb, labels)
    assert got["NMI"] == pytest.approx(1.0) and got["R@1"] == 1.0
    assert set(got) == {"R@1", "NMI"}


def test_shortlist_error_bound_holds_for_bfloat16() -> None:
    gen = torch.Generator().manual_seed(0)
    for dim in (3, 64, 2048):
        x = torch.randn(300, dim, generator=gen) * torch.rand(300, 1, generator=gen) * 100
        x[:50] = x[50:100] + 1e-3 * torch.randn(50, dim, generator=gen)  # near-duplicates, s ≈ 1
        e = prepare(x, "x", low_dtype=torch.bfloat16, device=torch.device("cpu"), chunk=64)
        unit = x / e.norms.float()[:, None]
        reference = (unit.double() @ unit.double().T).float().double()
        shortlist = (e.low @ e.low.T).double()
        eps_in = shortlist_error(e, e)
        worst = eps_in + output_error(torch.bfloat16, torch.ones(1), eps_in)
        assert (shortlist - reference).abs().max() <= worst
