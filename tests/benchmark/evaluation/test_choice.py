"""`auto`'s choice on the data: the sample's thresholds and band, the cost model, the decision."""

from __future__ import annotations

import pytest
import torch

from benchmark.evaluation import RetrievalEvaluator, arithmetic, choice
from benchmark.evaluation.sets import evaluation_sets
from benchmark.evaluation.similarity import prepare

CPU = torch.device("cpu")
METRICS = ("recall", "mAP", "MAP@R", "R-Precision")


def collapsed(n: int = 1200, dim: int = 64, per_class: int = 6, seed: int = 0) -> torch.Tensor:
    """Classes around one large shared direction: every cosine above ≈ 0.85, positives ≈ 0.03
    above the negatives (a barely trained embedding)."""
    gen = torch.Generator().manual_seed(seed)
    centres = torch.nn.functional.normalize(torch.randn(n // per_class, dim, generator=gen))
    z = (
        centres.repeat_interleave(per_class, 0)
        + 1.5 * torch.randn(n, dim, generator=gen) / dim**0.5
    )
    shared = torch.nn.functional.normalize(torch.randn(dim, generator=gen), dim=0)
    return torch.nn.functional.normalize(z) + 3.0 * shared


def prepared(x: torch.Tensor, labels: torch.Tensor, *args: torch.Tensor):
    protocol = "same_set" if not args else "query_gallery"
    sets = evaluation_sets(protocol, x, labels, *args)
    q = prepare(sets.query, "q", low_dtype=torch.float32, device=CPU, chunk=256)
    g = q if sets.same_set else prepare(sets.gallery, "g", low_dtype=torch.float32, device=CPU,
                                         chunk=256)  # fmt: skip
    return sets, q, g


def test_sample_thresholds_are_each_querys_positives_in_the_whole_gallery() -> None:
    """Brute force: a sampled query's thresholds are the exact similarities of its same-label
    gallery items, minus those seen by its own camera (query_gallery) or itself (same_set)."""
    gen = torch.Generator().manual_seed(1)
    x, g = torch.randn(30, 8, generator=gen), torch.randn(70, 8, generator=gen)
    ql, gl = torch.randint(0, 5, (30,), generator=gen), torch.randint(0, 5, (70,), generator=gen)
    qc, gc = torch.randint(0, 3, (30,), generator=gen), torch.randint(0, 3, (70,), generator=gen)
    sets, q_e, g_e = prepared(x, ql, g, gl, qc, gc)
    rows = torch.tensor([0, 7, 29])
    pair_rows, sims = choice._sample_thresholds(sets, q_e, g_e, rows)
    unit_q, unit_g = torch.nn.functional.normalize(x), torch.nn.functional.normalize(g)
    for r, i in enumerate(rows.tolist()):
        keep = (gl == ql[i]) & (gc != qc[i])
        expected = sorted((unit_g[keep] @ unit_q[i]).tolist())
        assert sorted(sims[pair_rows == r].tolist()) == pytest.approx(expected, abs=1e-6)
    sets, q_e, _ = prepared(x, ql)
    pair_rows, sims = choice._sample_thresholds(sets, q_e, q_e, rows)
    for r, i in enumerate(rows.tolist()):
        assert int((pair_rows == r).sum()) == int((ql == ql[i]).sum()) - 1  # not itself


def test_a_coarser_arithmetic_leaves_a_wider_band_and_collapsed_data_fills_int8s() -> None:
    x = collapsed()
    labels = torch.arange(x.shape[0]) // 6
    sets, q, _ = prepared(x, labels)
    rows, cols = choice._spread(1200, 300), choice._spread(1200, 600)
    thresholds = choice._sample_thresholds(sets, q, q, rows)
    q_s, g_s = q.subset(rows), q.subset(cols)  # gathered once, as `estimates` does
    bands = {}
    for name in ("float32", "bfloat16", "int8"):
        low = arithmetic.LOW_DTYPES[name]
        block = arithmetic.block(name, CPU)
        band, checked, hits, negatives = choice._sample_band(
            sets, q_s.in_dtype(low), g_s.in_dtype(low), rows, cols, thresholds, block
        )
        assert checked <= band <= hits <= negatives and negatives == 300 * 600 - int(
            (labels[rows][:, None] == labels[cols][None, :]).sum()
        )
        bands[name] = band / negatives
    assert bands["float32"] < 0.01 < bands["bfloat16"] < bands["int8"]
    assert bands["int8"] > 0.5  # most negatives sit within int8's error of some positive


def test_estimates_scale_the_probe_and_the_sample_to_the_whole_evaluation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    x = collapsed()
    sets, q, _ = prepared(x, torch.arange(x.shape[0]) // 6)
    monkeypatch.setattr(arithmetic, "native", lambda device: ["float32", "int8", "bfloat16"])
    monkeypatch.setattr(arithmetic, "probe", lambda device: {
        "float32": 4.0, "int8": 1.0, "bfloat16": float("inf")})  # fmt: skip
    monkeypatch.setattr(choice, "scan_seconds", lambda device: {
        "float32": choice.ScanCost(2e-9, 2e-9, 0.0, 0.0),
        "int8": choice.ScanCost(1e-9, 1e-9, 0.0, 0.0)})  # fmt: skip
    found = {e.arithmetic: e for e in choice.estimates(sets, q, q, CPU)}
    assert set(found) == {"float32", "int8"}  # a candidate that cannot run is not costed
    macs = 1200 * 1201 // 2 * 64
    assert found["float32"].product_s == pytest.approx(4.0 * macs / (1024 * 8192 * 512))
    assert found["int8"].scan_s == pytest.approx(1e-9 * 1200 * 1199)
    assert found["int8"].recheck_s > 10 * found["float32"].recheck_s


def test_hits_are_the_negatives_above_each_querys_lowest_positive() -> None:
    """Brute force on float32 (a band of ~0): a sampled negative is a hit when its similarity
    reaches the query's lowest positive threshold; crowded data has many more of them."""
    gen = torch.Generator().manual_seed(3)
    for spread, low, high in ((0.3, 0.0, 0.05), (3.0, 0.2, 1.0)):
        centres = torch.randn(100, 32, generator=gen)
        labels = torch.arange(600) // 6
        x = centres[labels] + spread * torch.randn(600, 32, generator=gen)
        sets, q, _ = prepared(x, labels)
        rows, cols = choice._spread(600, 200), choice._spread(600, 300)
        pair_rows, sims = choice._sample_thresholds(sets, q, q, rows)
        _, _, hits, negatives = choice._sample_band(
            sets, q.subset(rows), q.subset(cols), rows, cols, (pair_rows, sims),
            arithmetic.block("float32", CPU),
        )  # fmt: skip
        unit = torch.nn.functional.normalize(x)
        sim = unit[rows] @ unit[cols].T
        lowest = torch.full((rows.numel(),), torch.inf).scatter_reduce(0, pair_rows, sims, "amin")
        negative = labels[rows][:, None] != labels[cols][None, :]
        expected = int(((sim >= lowest[:, None] - 1e-6) & negative).sum())
        assert abs(hits - expected) <= 2  # float32 rounding at the threshold itself
        assert low <= hits / negatives <= high


def test_scan_cost_weighs_hits_and_both_directions_of_a_same_set_panel() -> None:
    cost = choice.ScanCost(rows=1.0, cols=3.0, rows_hit=10.0, cols_hit=30.0)
    assert cost.seconds(100, 5, same_set=False) == 100 * 1.0 + 5 * 10.0
    assert cost.seconds(100, 5, same_set=True) == (100 * 4.0 + 5 * 40.0) / 2
    found = choice.scan_seconds(CPU)  # timed once per process
    assert set(found) == set(arithmetic.native(CPU))
    for name, c in found.items():
        assert 0 < c.rows < 1e-6 and 0 < c.cols < 1e-6, name  # per pair: nanoseconds
        assert c.rows_hit >= 0 and c.cols_hit >= 0
    assert choice.scan_seconds(CPU) is found


def test_a_small_evaluation_takes_float32_without_measuring(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refuse(device: torch.device) -> dict[str, float]:
        raise AssertionError("a small evaluation must not probe")

    monkeypatch.setattr(arithmetic, "probe", refuse)
    monkeypatch.delenv(arithmetic.ENV_VAR, raising=False)
    ev = RetrievalEvaluator("same_set", (1,), device="cpu")
    ev.evaluate(torch.randn(40, 8), torch.arange(40) % 4)
    assert ev.last_backend == "torch-cpu-float32" and ev.last_estimates == ()


def test_auto_runs_the_cheapest_estimate_with_the_metrics_of_every_arithmetic(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On collapsed data int8's band is most of the pairs: its re-check rules it out, and the
    metrics are those of every named arithmetic, to the last digit."""
    x = collapsed(dim=256)
    labels = torch.arange(x.shape[0]) // 6
    monkeypatch.setattr(arithmetic, "SMALL_MACS", 0)
    monkeypatch.delenv(arithmetic.ENV_VAR, raising=False)
    # Products and scans all but free: what decides is the re-check each band costs.
    names = arithmetic.native(CPU)
    monkeypatch.setattr(arithmetic, "probe", lambda device: dict.fromkeys(names, 1e-6))
    free = choice.ScanCost(1e-12, 1e-12, 1e-12, 1e-12)
    monkeypatch.setattr(choice, "scan_seconds", lambda device: dict.fromkeys(names, free))
    ev = RetrievalEvaluator("same_set", (1, 4), METRICS, device="cpu")
    got = ev.evaluate(x, labels)
    estimates = {e.arithmetic: e for e in ev.last_estimates}
    assert ev.last_backend == f"torch-cpu-{choice.cheapest(list(estimates.values()))}"
    assert ev.last_backend != "torch-cpu-int8" and estimates["int8"].band_fraction > 0.5
    for name in ("float32", "int8"):
        named = RetrievalEvaluator("same_set", (1, 4), METRICS, device="cpu", arithmetic=name)
        assert named.evaluate(x, labels) == got and named.last_estimates == ()
