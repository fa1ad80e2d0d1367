"""`auto`: the shortlist arithmetic with the least whole cost on the data being evaluated.

A lower precision computes the product faster, but every pair it cannot place (a negative
within its error ε of a positive's similarity) goes to the exact re-check, and how many pairs
that is depends on the data, not on the hardware: on clustered embeddings int8's band
(ε ≈ 0.04) holds about 1 % of the pairs, on a nearly collapsed embedding (every cosine above
0.9) most of them, and the re-check then costs many times the product (`bench eval --case
collapsed`). So each candidate's cost is

    product   multiply-adds of the evaluation × the probe's seconds per multiply-add
              (`arithmetic.probe`): the product-only bound;
    scan      pairs scanned × seconds per pair of the compiled scan of that arithmetic's
              blocks, plus hits × seconds per hit: a pair scoring above its query's lowest
              positive threshold (a "hit") is classified against the thresholds, which costs
              several times the vectorised pass every pair gets. Hits depend on the data (about
              1 % of pairs on clustered embeddings, most of them where classes crowd a few
              directions: `bench eval --case low-rank`). Both rates are timed once per process
              on a probe-sized block, in each direction (rows; columns, the transposed half of
              a same_set panel, reads its block across rows);
    re-check  band pairs × the float32 look (coarser than float32 only) + pairs left unsure
              × the exact reference, each timed on the evaluation's rows, once per process
              and dimension D.

The band and hit counts come from a sample of the evaluation itself: `SAMPLE_QUERIES` queries
against `SAMPLE_GALLERY` gallery items spread evenly over the sets, each query's thresholds its
real positives in the whole gallery, so a sampled negative is in the band exactly when it would
be in the full run; counts scale by the pairs. Counting, not timing, the sample keeps the choice
stable on a busy machine. Every arithmetic is exact: the choice changes time and memory, never
the metrics. An evaluation of fewer than `arithmetic.SMALL_MACS` multiply-adds takes float32
without measuring anything, since the measurements would cost more than any arithmetic could
save.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from benchmark.evaluation import _dots
from benchmark.evaluation import arithmetic as _arithmetic
from benchmark.evaluation.bands import (
    Block,
    exclude_pairs,
    scan_cols,
    scan_rows,
    settle,
    shortlist_readout,
    threshold_tables,
)
from benchmark.evaluation.ranks import same_label_pairs
from benchmark.evaluation.sets import EvaluationSets, excluded
from benchmark.evaluation.similarity import (
    UnitEmbeddings,
    exact_similarities,
    prepare,
    raw_similarities,
    shortlist_error,
)

SAMPLE_QUERIES, SAMPLE_GALLERY = 256, 512
_PROBE_ROWS, _PROBE_COLS, _PROBE_DIM = 1024, 8192, 512  # `arithmetic.probe_seconds`'s block
_HIT_ROWS = 64  # rows of the probe block timed with every pair a hit (~10 ns a hit)
_TIMED_MACS = 1 << 23  # multiply-adds of each look or exact timing: ~10 ms, at any D
# Once per process, device and thread count: seconds per scanned pair by arithmetic, and per
# (D, "look" or "exact") seconds per pair of the re-check's two steps.
_SCANS: dict[tuple[str, int | None, int], dict[str, ScanCost]] = {}
_RECHECKS: dict[tuple[str, int | None, int, int, str], float] = {}


@dataclass(frozen=True)
class ScanCost:
    """Seconds per scanned pair (`rows`, `cols`) and per hit (`rows_hit`, `cols_hit`) of one
    arithmetic's compiled scans, by direction."""

    rows: float
    cols: float
    rows_hit: float
    cols_hit: float

    def seconds(self, pairs: int, hits: float, same_set: bool) -> float:
        """A query_gallery evaluation scans rows only; a same_set one, half of its pairs (and
        hits) each way."""
        if not same_set:
            return pairs * self.rows + hits * self.rows_hit
        return (pairs * (self.rows + self.cols) + hits * (self.rows_hit + self.cols_hit)) / 2


@dataclass(frozen=True)
class Estimate:
    """One candidate's predicted cost of an evaluation, in seconds, and its sampled band."""

    arithmetic: str
    product_s: float  # the product-only bound: probe speed × multiply-adds
    scan_s: float
    recheck_s: float  # float32 look and exact references of the band
    band_fraction: float  # share of the sample's negative pairs in the band
    hit_fraction: float  # share of them above their query's lowest threshold

    @property
    def total_s(self) -> float:
        return self.product_s + self.scan_s + self.recheck_s

    def describe(self) -> str:
        return (
            f"{self.arithmetic} {self.total_s:.2f} s (product {self.product_s:.2f}, scan "
            f"{self.scan_s:.2f}, re-check {self.recheck_s:.2f}; "
            f"band {100 * self.band_fraction:.2g} %, hits {100 * self.hit_fraction:.2g} %)"
        )


def choose(
    sets: EvaluationSets, q: UnitEmbeddings, g: UnitEmbeddings, device: torch.device
) -> tuple[str, tuple[Estimate, ...]]:
    """The arithmetic `auto` runs for these sets, and the estimates it compared (none for a
    small evaluation, which takes float32)."""
    if product_macs(sets) < _arithmetic.SMALL_MACS:
        return "float32", ()
    found = estimates(sets, q, g, device)
    return cheapest(found), tuple(found)


def cheapest(estimates: list[Estimate]) -> str:
    """The arithmetic of least estimated total (float32 on ties)."""
    return min(estimates, key=lambda e: (e.total_s, e.arithmetic != "float32")).arithmetic


def product_macs(sets: EvaluationSets) -> int:
    """Multiply-adds of the evaluation's shortlist products (same_set computes each pair once)."""
    n_q, n_g, dim = sets.query.shape[0], sets.gallery.shape[0], sets.query.shape[1]
    pairs = n_q * (n_q + 1) // 2 if sets.same_set else n_q * n_g
    return pairs * dim


def estimates(
    sets: EvaluationSets, q: UnitEmbeddings, g: UnitEmbeddings, device: torch.device
) -> list[Estimate]:
    """The cost of each native arithmetic of `device` on these sets (see the module docstring).

    `q` and `g` are the prepared sets (any low dtype; `g` is `q` under same_set).
    """
    probe, scans = _arithmetic.probe(device), scan_seconds(device)
    macs = product_macs(sets)
    n_q, n_g = sets.query.shape[0], sets.gallery.shape[0]
    ordered = n_q * (n_q - 1) if sets.same_set else n_q * n_g  # pairs scanned (each way)
    rows = _spread(n_q, SAMPLE_QUERIES)
    cols = _spread(n_g, SAMPLE_GALLERY)
    thresholds = _sample_thresholds(sets, q, g, rows)
    q_s, g_s = q.subset(rows), g.subset(cols)  # the sample's rows, gathered once
    look = _per_pair("look", raw_similarities, q, g, device)
    exact = _per_pair("exact", exact_similarities, q, g, device)
    out = []
    for name in _arithmetic.native(device):
        if not np.isfinite(probe[name]):
            continue  # a candidate this build cannot run
        low = _arithmetic.LOW_DTYPES[name]
        band, checked, hits, negatives = _sample_band(
            sets, q_s.in_dtype(low), g_s.in_dtype(low), rows, cols, thresholds,
            _arithmetic.block(name, device),
        )  # fmt: skip
        scale = ordered / max(negatives, 1)
        looked = band if name != "float32" else 0
        out.append(
            Estimate(
                name,
                product_s=probe[name] / (_PROBE_ROWS * _PROBE_COLS * _PROBE_DIM) * macs,
                scan_s=scans[name].seconds(ordered, hits * scale, sets.same_set),
                recheck_s=(looked * look + checked * exact) * scale,
                band_fraction=band / max(negatives, 1),
                hit_fraction=hits / max(negatives, 1),
            )
        )
    return out


def scan_seconds(device: torch.device) -> dict[str, ScanCost]:
    """The `ScanCost` of each native arithmetic's blocks (best of five on a probe-sized block),
    once per process, device and thread count: its pairs scanned with a narrow band (few
    hits), then again with every pair a hit (every threshold set below every score)."""
    key = (device.type, device.index, torch.get_num_threads())
    if key not in _SCANS:
        # Groups of 4 near-copies (cosine ≈ 0.9): each probe item has 3 positives, far from
        # its negatives (≈ 0 ± 0.05), so even int8's band is empty and the pass alone is timed.
        gen = torch.Generator().manual_seed(0)
        n = _PROBE_ROWS + _PROBE_COLS
        labels = torch.arange(n) // 4
        base = torch.randn(n // 4, _PROBE_DIM, generator=gen)
        raw = base[labels] + 0.3 * torch.randn(n, _PROBE_DIM, generator=gen)
        pairs, pos = same_label_pairs(labels, labels)
        other = pos != pairs  # an item is not its own positive
        pairs, pos = pairs[other], pos[other]
        _SCANS[key] = {
            name: _scan_cost(raw, pairs, pos, name, device) for name in _arithmetic.native(device)
        }
    return _SCANS[key]


def _scan_cost(
    raw: Tensor, pairs: Tensor, pos: Tensor, name: str, device: torch.device
) -> ScanCost:
    """Time the first rows of `raw` as rows, and the others as columns, of one block against
    every item (a same_set panel), with `pos` the positives of each item: `_PROBE_ROWS` rows
    with their own thresholds, then `_HIT_ROWS` with every threshold below every score."""
    n = raw.shape[0]
    emb = prepare(raw, "probe", low_dtype=_arithmetic.LOW_DTYPES[name], device=device, chunk=4096)
    sims = exact_similarities(emb, emb, pairs, pos)
    shortlist = _arithmetic.block(name, device)(emb.query, emb.gallery)
    eps_in = shortlist_error(emb, emb)
    seconds = []
    for m, thresholds in ((_PROBE_ROWS, sims), (_HIT_ROWS, torch.full_like(sims, -1.0))):
        readout = shortlist_readout(shortlist, thresholds, eps_in)  # before the block's scores
        tab = threshold_tables(pairs, thresholds, n, eps_in, readout)
        scores = shortlist(emb.query.values[:m], 0)  # [m, n]; scans only read it
        best_rows = best_cols = float("inf")
        for _ in range(5):  # a short timing: the best of five settles it on a busy machine
            start = time.perf_counter()
            scan_rows(tab, scores, 0)
            middle = time.perf_counter()
            scan_cols(tab, scores, m, m)
            best_rows = min(best_rows, middle - start)
            best_cols = min(best_cols, time.perf_counter() - middle)
        seconds.append((best_rows / (m * n), best_cols / (m * (n - m))))
    (rows, cols), (rows_all, cols_all) = seconds
    return ScanCost(rows, cols, max(0.0, rows_all - rows), max(0.0, cols_all - cols))


def _per_pair(
    step: str, similarities: Callable, q: UnitEmbeddings, g: UnitEmbeddings, device: torch.device
) -> float:
    """Seconds per pair of `similarities` (the float32 look or the exact reference), timed on
    the first evaluation of each dimension D in this process (best of three), pairs in
    gallery order as a wide band reads them.

    The pairs are drawn over the whole sets, so both rows of most pairs come from memory: 3.3x
    the look's time per pair in a real band (bfloat16 on `bench eval --case low-rank`, timed on
    a busy machine), whose re-check then spends 0.9x the look again ordering and counting the
    band. Timed on denser pairs instead, the estimates made `auto` pick int8 on SOP and Market,
    1.2x slower than bfloat16 there: the slack covers what the model leaves out.
    """
    key = (device.type, device.index, torch.get_num_threads(), q.dim, step)
    if key not in _RECHECKS:
        pairs = max(1024, _TIMED_MACS // q.dim)
        gen = torch.Generator().manual_seed(0)
        q_rows = torch.randint(0, q.raw.shape[0], (pairs,), generator=gen)
        g_rows = torch.randint(0, g.raw.shape[0], (pairs,), generator=gen)
        order = torch.from_numpy(_dots.bucket_order(g_rows.numpy(), g.raw.shape[0]))
        q_rows, g_rows = q_rows[order], g_rows[order]
        best = float("inf")
        for _ in range(3):
            start = time.perf_counter()
            similarities(q, g, q_rows, g_rows)
            best = min(best, time.perf_counter() - start)
        _RECHECKS[key] = best / pairs
    return _RECHECKS[key]


def _spread(n: int, k: int) -> Tensor:
    """min(n, k) indices spread evenly over 0..n-1."""
    return torch.linspace(0, n - 1, min(n, k)).round().long().unique()


def _sample_thresholds(
    sets: EvaluationSets, q: UnitEmbeddings, g: UnitEmbeddings, rows: Tensor
) -> tuple[Tensor, Tensor]:
    """(sample row [P], reference similarity [P] float32) of every positive of the sampled
    queries in the whole gallery: the thresholds the full run gives them."""
    g_order = torch.argsort(sets.gallery_labels, stable=True)
    pair_rows, pos = same_label_pairs(sets.query_labels[rows], sets.gallery_labels[g_order])
    g_index = g_order[pos]
    keep = ~excluded(
        torch.ones_like(pair_rows, dtype=torch.bool),
        sets.query_cams[rows][pair_rows] if sets.query_cams is not None else None,
        sets.gallery_cams[g_index] if sets.gallery_cams is not None else None,
    )
    if sets.same_set:
        keep &= g_index != rows[pair_rows]  # an item is not its own positive
    pair_rows, g_index = pair_rows[keep], g_index[keep]
    return pair_rows, exact_similarities(q, g, rows[pair_rows], g_index)


def _sample_band(
    sets: EvaluationSets,
    q_s: UnitEmbeddings,
    g_s: UnitEmbeddings,
    rows: Tensor,
    cols: Tensor,
    thresholds: tuple[Tensor, Tensor],
    block: Block,
) -> tuple[int, int, int, int]:
    """(band pairs, pairs needing their exact reference, hits, negative pairs) of the sample
    block rows × cols (`q_s` and `g_s` hold those rows), scanned and settled as `ranks` does;
    hits are the negatives at or above their query's floor (sure ones and the band)."""
    eps_in = shortlist_error(q_s, g_s)
    shortlist = block(q_s.query, g_s.gallery)
    readout = shortlist_readout(shortlist, thresholds[1], eps_in)
    tab = threshold_tables(*thresholds, rows.numel(), eps_in, readout)
    scores = shortlist(q_s.query.values, 0)  # [S, S_g]
    same = sets.query_labels[rows][:, None] == sets.gallery_labels[cols][None, :]
    exclude_pairs(scores, same, readout)  # positives (and the item itself) are not negatives
    band = scan_rows(tab, scores, 0)
    sure = int(tab.hist.sum())  # before settle adds the band's pairs to the histogram
    checked = settle(tab, q_s, g_s, torch.arange(rows.numel()), band, None)
    return int(band[0].size), checked, sure + int(band[0].size), int((~same).sum())
