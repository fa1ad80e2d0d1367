"""`auto`'s choice on the data: the sample's thresholds and band, the cost model, the decision."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from benchmark.evaluation import RetrievalEvaluator, _scan, arithmetic, choice
from benchmark.evaluation.bands import ROW_CAP, TILE_CAP, scan_rows, threshold_tables
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
        sample = choice._sample_band(
            sets, q_s.in_dtype(low), g_s.in_dtype(low), rows, cols, thresholds, block
        )
        band, checked, hits, negatives = sample.band, sample.checked, sample.hits, sample.negatives
        assert checked <= band <= hits <= negatives and negatives == 300 * 600 - int(
            (labels[rows][:, None] == labels[cols][None, :]).sum()
        )
        assert sample.per_row.shape == (300,) and sample.per_col.shape == (600,)
        assert sample.per_row.sum() == sample.per_col.sum() == band
        bands[name] = band / negatives
    assert bands["float32"] < 0.01 < bands["bfloat16"] < bands["int8"]
    assert bands["int8"] > 0.5  # most negatives sit within int8's error of some positive


def test_estimates_scale_the_probe_and_the_sample_to_the_whole_evaluation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    x = collapsed()
    sets, q, _ = prepared(x, torch.arange(x.shape[0]) // 6)
    monkeypatch.setattr(arithmetic, "native", lambda device: ["float32", "int8", "bfloat16"])
    monkeypatch.setattr(arithmetic, "probe", lambda device, dim: {
        "float32": 4.0, "int8": 1.0, "bfloat16": float("inf")})  # fmt: skip
    monkeypatch.setattr(choice, "scan_seconds", lambda device, width: {
        "float32": choice.ScanCost(2e-9, 2e-9, 0.0, 0.0, 0.0, 0.0, 0.0),
        "int8": choice.ScanCost(1e-9, 1e-9, 0.0, 0.0, 0.0, 0.0, 0.0)})  # fmt: skip
    monkeypatch.setattr(choice, "_refill_seconds", lambda *args: 0.5)
    found = {e.arithmetic: e for e in choice.estimates(sets, q, q, CPU)}
    assert set(found) == {"float32", "int8"}  # a candidate that cannot run is not costed
    macs = 1200 * 1201 // 2 * 64
    assert found["float32"].product_s == pytest.approx(4.0 * macs / (1024 * 8192 * 512))
    assert found["float32"].scan_s == pytest.approx(2e-9 * 1200 * 1199 + 0.5)
    # int8's band holds most pairs of every chunk: float32 recounts them all, after int8's
    # product, and int8 scans and re-checks nothing.
    assert found["int8"].band_fraction > 0.5
    assert found["int8"].recount_s == pytest.approx(found["float32"].total_s)
    assert found["int8"].scan_s == pytest.approx(0.5) and found["int8"].recheck_s == 0
    assert found["int8"].product_s == pytest.approx(macs / (1024 * 8192 * 512))


def test_chunks_whose_band_overflows_are_costed_as_float32s() -> None:
    """A chunk (runs of `chunk` queries in label order) is recounted when its sampled rows'
    mean band share exceeds FALLBACK_SHARE; its rows leave the sample, their pairs' share goes
    to float32 (same_set: weighted by the width of their panels)."""
    labels = torch.tensor([3, 0, 2, 1, 0, 3, 1, 2])  # label order: items 1 4 3 6 2 7 0 5
    sets = evaluation_sets("same_set", torch.randn(8, 4), labels)
    rows = torch.tensor([0, 1, 2, 3])  # label ranks 6, 0, 4, 2: chunks of two: 3, 0, 2, 1
    per_row = np.array([0, 90, 1, 2])  # over 1000 sampled columns: only chunk 0 overflows
    sample = choice.SampleBand(93, 9, 193, 4000, per_row, np.full(1000, 93) // 1000)
    units = choice._query_chunks(sets, rows, chunk=2)
    assert units.tolist() == [3, 0, 2, 1]
    over, weight = choice._recounted(sets, units, choice._chunk_density(sample, units), chunk=2)
    assert over.tolist() == [False, True, False, False]
    assert weight.tolist() == [8 - 6, 8 - 0, 8 - 4, 8 - 2]  # the width of each row's panel
    kept, share = choice._kept(sample, over, weight)
    assert (
        share == pytest.approx(8 / 20) and kept.band == 3 and kept.per_row.tolist() == [0, 0, 1, 2]
    )
    assert kept.hits == round((193 - 93) * (1 - 8 / 20)) + 3 and kept.checked == round(9 * 3 / 93)
    query_gallery = evaluation_sets("query_gallery", torch.randn(8, 4), labels, torch.randn(8, 4),
                                    labels)  # fmt: skip
    _, weight = choice._recounted(query_gallery, units, np.zeros(4), chunk=2)
    assert weight.tolist() == [1.0] * 4  # every query against the whole gallery


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
        sample = choice._sample_band(
            sets, q.subset(rows), q.subset(cols), rows, cols, (pair_rows, sims),
            arithmetic.block("float32", CPU),
        )  # fmt: skip
        hits, negatives = sample.hits, sample.negatives
        unit = torch.nn.functional.normalize(x)
        sim = unit[rows] @ unit[cols].T
        lowest = torch.full((rows.numel(),), torch.inf).scatter_reduce(0, pair_rows, sims, "amin")
        negative = labels[rows][:, None] != labels[cols][None, :]
        expected = int(((sim >= lowest[:, None] - 1e-6) & negative).sum())
        assert abs(hits - expected) <= 2  # float32 rounding at the threshold itself
        assert low <= hits / negatives <= high


def test_scan_cost_weighs_hits_band_and_both_directions_of_a_same_set_panel() -> None:
    cost = choice.ScanCost(1.0, 3.0, 10.0, 30.0, 100.0, 300.0, 0.0)
    assert cost.seconds(100, 5, 2, same_set=False) == 100 * 1.0 + 5 * 10.0 + 2 * 100.0
    assert cost.seconds(100, 5, 2, same_set=True) == (100 * 4.0 + 5 * 40.0 + 2 * 400.0) / 2
    found = choice.scan_seconds(CPU, 3000)  # timed once per process and width bucket
    assert set(found) == set(arithmetic.native(CPU))
    for name, c in found.items():
        assert 0 < c.rows < 1e-6 and 0 < c.cols < 1e-6, name  # per pair: nanoseconds
        assert c.rows_hit >= 0 and c.cols_hit >= 0 and c.rows_band >= 0 and c.cols_band >= 0
        assert c.settle == found["float32"].settle > 0  # the same bookkeeping for all
    assert choice.scan_seconds(CPU, 4000) is found  # both round up to the narrowest width


def test_the_scan_probes_settings_give_a_pass_then_hits_then_a_band() -> None:
    """On the probe block (float32 readout), thresholds above every score leave no hit; the
    hit setting finds the probe's hits with no band; the band setting puts them in the band.
    """
    scores = choice._probe_scores(4096)
    w = scores.shape[1]
    share = float((scores > 0.3).float().mean())
    assert abs(share - choice._HIT_SHARE) < 0.002 and float(scores[scores < 0.3].max()) < 0.25
    items = torch.arange(w).repeat_interleave(3)
    offsets = torch.tensor([-0.01, 0.0, 0.01]).repeat(w)
    found = {}
    for setting in (choice._PASS, choice._HITS, choice._BAND):
        centre, eps = setting
        tab = threshold_tables(items, centre + offsets, w, eps, torch.float32)
        band = scan_rows(tab, scores, 0)
        found[setting] = (int(tab.hist.sum()) + band[0].size, band[0].size)
    hits = int((scores > 0.3).sum())
    assert found[choice._PASS] == (0, 0)
    assert found[choice._HITS] == (hits, 0)
    band_hits, band = found[choice._BAND]  # all but the hits 3 σ below 0.5, in the band
    assert 0.99 * hits < band <= band_hits <= hits


def test_filling_passes_are_charged_to_the_units_that_overflow() -> None:
    """query_gallery: a row over `bands.ROW_CAP` band pairs is scanned again, whole; same_set:
    the closed form over the panels' widths equals a sum over every row position."""
    cost = choice.ScanCost(1.0, 2.0, 10.0, 20.0, 100.0, 200.0, 0.0)
    per_row = np.array([0, 50, 5])  # band pairs of 3 sampled rows over 100 sampled columns
    per_col = np.zeros(100, dtype=np.int64)
    per_col[:55] = 1  # 55 band pairs over 3 sampled rows
    sample = choice.SampleBand(55, 0, 110, 300, per_row, per_col)  # two hits per band pair
    unit = 1.0 + 0.5 * (2 * 10.0 + 100.0)  # per pair of the 0.5-dense row, refilled
    got = choice._refill_seconds(cost, sample, 30, 4096, chunk=30, tiles=None)
    assert got == pytest.approx(unit * 4096 * 30 / 3)  # only that row: 2,048 > ROW_CAP pairs
    n = 6000
    tiles = choice.ColumnTiles(np.array([0.001, 0.02, 0.02]), np.array([0.0, 2048.0, 3072.0]))
    got = choice._refill_seconds(cost, sample, n, n, chunk=1024, tiles=tiles)
    d = per_row / 100
    by_width = sum(  # every row position s: its panels' width n - s, refilled if over the cap
        float((1.0 + d_i * (2 * 10.0 + 100.0)) * (n - s))
        for d_i in d for s in range(n) if d_i * (n - s) > ROW_CAP
    ) / 3  # fmt: skip
    assert 0.001 * 1024 * _scan.TILE < TILE_CAP < 0.02 * 1024 * _scan.TILE  # rows 1, 2 overflow
    by_column = sum((2.0 + 0.02 * (2 * 20.0 + 200.0)) * rows for rows in (2048, 3072)) * n / 3
    assert got == pytest.approx(by_width + by_column, rel=1e-3)


def test_a_column_tile_is_judged_at_its_chunks_mean_query_density() -> None:
    """Rows of one chunk share their tiles' density (the mean of theirs, recounted rows too),
    and each is read by the gallery rows of the panels before its chunk, less float32's share."""
    per_row = np.array([20, 20, 0, 4])  # over 100 sampled columns; chunk 1's rows agree
    whole = choice.SampleBand(44, 0, 88, 400, per_row, np.zeros(100, dtype=np.int64))
    units = np.array([1, 1, 0, 2])
    tiles = choice._column_tiles(choice._chunk_density(whole, units), units, chunk=8, share=0.25)
    np.testing.assert_allclose(tiles.density, [0.2, 0.2, 0.0, 0.04])
    np.testing.assert_allclose(tiles.rows, [6.0, 6.0, 0.0, 12.0])


def test_chunk_means_are_drawn_to_the_whole_mean_as_far_as_the_sample_cannot_tell_them_apart() -> (
    None
):
    units = np.repeat(np.arange(4), 4)
    # Rows as spread within each chunk as the chunk means are between them: the means are noise.
    noisy = np.array([0, 8, 0, 8, 1, 7, 1, 7, 2, 6, 2, 6, 0, 9, 0, 7], dtype=np.float64)
    np.testing.assert_allclose(choice._chunk_means(units, noisy), np.full(16, noisy.mean()))
    # Chunks apart and rows agreeing within them: the means stand.
    apart = np.repeat([0.0, 1.0, 5.0, 9.0], 4) + np.tile([0.0, 0.1, 0.0, 0.1], 4)
    got = choice._chunk_means(units, apart)
    np.testing.assert_allclose(got, np.repeat([0.05, 1.05, 5.05, 9.05], 4), atol=2e-3)
    # Between the two: every chunk's mean moves toward the whole mean, none past it.
    mixed = np.repeat([0.0, 2.0, 4.0, 6.0], 4) + np.tile([-1.0, 1.0, -1.0, 1.0], 4)
    got = choice._chunk_means(units, mixed)[::4]
    assert np.all(np.abs(got - 3.0) < np.abs(np.array([0.0, 2.0, 4.0, 6.0]) - 3.0))
    assert np.all(np.sign(got - 3.0) == np.sign(np.array([0.0, 2.0, 4.0, 6.0]) - 3.0))
    # One row per chunk: nothing to measure the noise by, the rows stand.
    np.testing.assert_allclose(choice._chunk_means(np.arange(4), noisy[:4]), noisy[:4])


def test_the_recheck_is_timed_per_power_of_two_of_its_reuse() -> None:
    q = prepare(torch.randn(300, 24), "q", low_dtype=torch.float32, device=CPU, chunk=64)
    for reuse, level in ((0.2, 1), (3.0, 4), (5000.0, choice._MAX_REUSE)):
        seconds = choice._per_pair("look", choice.raw_similarities, q, q, CPU, reuse)
        key = ("cpu", None, torch.get_num_threads(), 24, "look", level)
        assert choice._RECHECKS[key] == seconds > 0


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
    monkeypatch.setattr(arithmetic, "probe", lambda device, dim: dict.fromkeys(names, 1e-6))
    free = choice.ScanCost(*[1e-12] * 7)
    monkeypatch.setattr(choice, "scan_seconds", lambda device, width: dict.fromkeys(names, free))
    ev = RetrievalEvaluator("same_set", (1, 4), METRICS, device="cpu")
    got = ev.evaluate(x, labels)
    estimates = {e.arithmetic: e for e in ev.last_estimates}
    assert ev.last_backend == f"torch-cpu-{choice.cheapest(list(estimates.values()))}"
    assert ev.last_backend != "torch-cpu-int8" and estimates["int8"].band_fraction > 0.5
    for name in ("float32", "int8"):
        named = RetrievalEvaluator("same_set", (1, 4), METRICS, device="cpu", arithmetic=name)
        assert named.evaluate(x, labels) == got and named.last_estimates == ()
