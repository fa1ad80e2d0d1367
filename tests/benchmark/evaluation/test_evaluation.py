"""RetrievalEvaluator against a brute-force full sort, and on cases small enough to do by hand."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch

from benchmark.evaluation import RetrievalEvaluator
from tests.benchmark.evaluation.conftest import PATHS, evaluator, force, ranking_metrics


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
        row = ranking_metrics(ranking, ks)
        if row is not None:
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


@pytest.mark.parametrize("quantised", [False, True], ids=["continuous", "ties"])
@pytest.mark.parametrize("chunk_size", [16, 1024])
def test_same_set_equals_brute_force(path: str, quantised: bool, chunk_size: int) -> None:
    for seed in range(3):
        emb, labels, (expected, skipped) = same_set_case(seed, quantised)
        ev = evaluator("same_set", path=path, chunk_size=chunk_size)
        assert ev.evaluate(emb, labels) == pytest.approx(expected, abs=1e-12)
        assert ev.last_report.skipped_queries == skipped


@pytest.mark.parametrize("quantised", [False, True], ids=["continuous", "ties"])
@pytest.mark.parametrize("chunk_size", [16, 1024])
def test_query_gallery_equals_brute_force(path: str, quantised: bool, chunk_size: int) -> None:
    for seed in range(3):
        (q, ql, g, gl, qc, gc), (expected, skipped) = query_gallery_case(seed, quantised)
        ev = evaluator("query_gallery", path=path, chunk_size=chunk_size)
        got = ev.evaluate(q.numpy(), ql.numpy(), g.numpy(), gl.numpy(), qc.numpy(), gc.numpy())
        assert got == pytest.approx(expected, abs=1e-12)
        assert ev.last_report.skipped_queries == skipped >= 3


def near_tie_case(seed: int, dim: int):
    """Queries whose negatives sit within 0, 1e-7, 1e-5 and 1e-3 of a positive's similarity (on
    either side), exact duplicates and scaled copies included: every shortlist's band."""
    gen = torch.Generator().manual_seed(seed)
    n_q = 12
    q = torch.randn(n_q, dim, generator=gen, dtype=torch.float64)
    q /= q.norm(dim=1, keepdim=True)
    gallery, labels = [], []
    for i in range(n_q):
        u = torch.randn(dim, generator=gen, dtype=torch.float64)
        u -= (u @ q[i]) * q[i]
        u /= u.norm()  # orthogonal to the query
        for cos in (0.9, 0.6, 0.3):
            positive = cos * q[i] + (1 - cos**2) ** 0.5 * u
            gallery.append(positive)
            labels.append(i)
            gallery.append(2 * positive)  # the same unit vector: a tie, the negative first
            labels.append(100 + i)
            for delta in (-1e-3, -1e-5, -1e-7, 1e-7, 1e-5, 1e-3):
                c = cos + delta
                gallery.append(c * q[i] + (1 - c**2) ** 0.5 * u)
                labels.append(100 + (i + 1) % n_q)  # a negative for every query
    g = torch.stack(gallery).float()
    return q.float(), torch.arange(n_q), g, torch.tensor(labels)


@functools.cache
def near_tie_expected(dim: int):
    q, ql, g, gl = near_tie_case(0, dim)
    emb, labels = torch.cat([q, g]), torch.cat([ql, gl])
    qg, _ = brute_force(q, ql, g, gl, same_set=False)
    same, _ = brute_force(emb, labels, emb, labels, same_set=True)
    return (q, ql, g, gl), qg, same


@pytest.mark.parametrize("dim", [8, 512])
def test_adversarial_near_ties_equal_brute_force(path: str, dim: int) -> None:
    (q, ql, g, gl), expected_qg, expected_same = near_tie_expected(dim)
    ev = evaluator("query_gallery", path=path, chunk_size=5)
    assert ev.evaluate(q, ql, g, gl) == pytest.approx(expected_qg, abs=1e-12)
    ev = evaluator("same_set", path=path, chunk_size=64)
    assert ev.evaluate(torch.cat([q, g]), torch.cat([ql, gl])) == pytest.approx(
        expected_same, abs=1e-12
    )


@pytest.mark.parametrize("path", PATHS)  # named `path`: a faiss path gets the faiss mark
def test_paths_agree_on_clustered_data(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    emb, labels = random_case(7, quantised=False, n=600, dim=32, classes=40)
    expected = evaluator("same_set", (1, 10), path="float32").evaluate(emb, labels)
    force(path, monkeypatch)
    assert evaluator("same_set", (1, 10), path=path).evaluate(emb, labels) == expected


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
    assert ev.last_backend == "torch-cpu-float32"


@pytest.mark.faiss  # NMI's k-means
def test_nmi_of_separated_clusters_is_one() -> None:
    centres = torch.eye(4) * 10
    labels = torch.arange(4).repeat_interleave(50)
    emb = centres[labels] + 0.01 * torch.randn(200, 4, generator=torch.Generator().manual_seed(0))
    ev = RetrievalEvaluator("same_set", (1,), metrics=("recall", "NMI"))
    got = ev.evaluate(emb, labels)
    assert got["NMI"] == pytest.approx(1.0) and got["R@1"] == 1.0
    assert set(got) == {"R@1", "NMI"}


@pytest.mark.parametrize("scale", [1e19, 1e-21])
def test_extreme_scales_give_the_same_metrics(scale: float) -> None:
    """Cosine similarity is scale-free: the float32 look at band pairs must not overflow or
    underflow (raw float32 products of rows ~1e19 are inf, of rows ~1e-21 subnormal)."""
    torch.manual_seed(0)
    emb, labels = torch.randn(300, 32), torch.arange(300) // 6
    expected = RetrievalEvaluator("same_set", ks=(1, 4), arithmetic="float32").evaluate(emb, labels)
    got = RetrievalEvaluator("same_set", ks=(1, 4), arithmetic="float16").evaluate(
        emb * scale, labels
    )
    assert got == expected
