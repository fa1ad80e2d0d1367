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
              blocks, + hits × seconds per hit (a pair scoring above its query's lowest
              positive threshold is classified against the thresholds, several times the
              vectorised pass every pair gets; about 1 % of pairs on clustered embeddings,
              10 % where classes crowd a few directions: `bench eval --case low-rank`)
              + band pairs × seconds to record one + the filling passes of the rows and
              column tiles whose band overflows its slots (`_refill_seconds`). The rates are
              timed on a probe block as wide as the evaluation's, with hits scattered among
              misses (`scan_seconds`), in each direction (rows; columns, the transposed half
              of a same_set panel, reads its block across rows);
    re-check  band pairs × (the float32 look, coarser than float32 only, + the bookkeeping
              of ordering, gathering and counting them) + pairs left unsure × the exact
              reference; the look and the exact reference timed on the evaluation's rows laid
              out as one chunk's band reads them (`_per_pair`), once per process, dimension D
              and reuse, the bookkeeping on the scan probe's band.

The band and hit counts come from a sample of the evaluation itself: `SAMPLE_QUERIES` queries
against `SAMPLE_GALLERY` gallery items spread evenly over the sets, each query's thresholds its
real positives in the whole gallery, so a sampled negative is in the band exactly when it would
be in the full run; counts scale by the pairs, each sampled row and column also standing for
its share of the rows and tiles that overflow. Counting, not timing, the sample keeps the choice
stable on a busy machine. Every arithmetic is exact: the choice changes time and memory, never
the metrics. An evaluation of fewer than `arithmetic.SMALL_MACS` multiply-adds takes float32
without measuring anything, since the measurements would cost more than any arithmetic could
save.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import torch
from torch import Tensor

from benchmark.evaluation import _scan
from benchmark.evaluation import arithmetic as _arithmetic
from benchmark.evaluation.bands import (
    ROW_CAP,
    TILE_CAP,
    Block,
    Readout,
    Tables,
    exclude_pairs,
    scan_cols,
    scan_rows,
    settle,
    shortlist_readout,
    threshold_tables,
)
from benchmark.evaluation.ranks import FALLBACK_SHARE, same_label_pairs
from benchmark.evaluation.sets import EvaluationSets, excluded
from benchmark.evaluation.similarity import (
    Levels,
    UnitEmbeddings,
    exact_similarities,
    prepare,
    raw_similarities,
    shortlist_error,
)

SAMPLE_QUERIES, SAMPLE_GALLERY = 256, 512
# The scans' probe block: one chunk of rows, as wide as the evaluation's blocks up to a width
# where even its uint8 form outgrows the cache (as real blocks do: the scans read them from
# memory, at 1.4x the per-pair time of a cached 1,024 x 9,216 block), from a tile of random
# scores repeated across it; `_HIT_SHARE` of its entries are hits.
_SCAN_ROWS, _SCAN_TILE, _SCAN_WIDTHS = 1024, 4096, (4096, 32768)
_HIT_SHARE = 0.02
_TIMED_MACS = 1 << 23  # multiply-adds of each look or exact timing: ~10 ms, at any D
_CHUNK_ROWS = 1024  # the evaluator's default chunk_size: query rows one band's pairs share
_MAX_REUSE = 64  # band pairs per gallery row beyond which the re-check's reads are all cached
# Once per process, device, thread count and probe width: each arithmetic's scan costs; and per
# (D, "look" or "exact", reuse) seconds per pair of the re-check's two steps.
_SCANS: dict[tuple[str, int | None, int, int], dict[str, ScanCost]] = {}
_RECHECKS: dict[tuple[str, int | None, int, int, str, int], float] = {}


@dataclass(frozen=True)
class ScanCost:
    """One arithmetic's band costs, in seconds: of its compiled scans per scanned pair (`rows`,
    `cols`), per hit among misses (`rows_hit`, `cols_hit`) and per band pair beyond its hit
    (`rows_band`, `cols_band`: recording it), by direction; and per band pair of the re-check's
    bookkeeping (`settle`: ordering, gathering and counting the band, beyond its dot products).
    """

    rows: float
    cols: float
    rows_hit: float
    cols_hit: float
    rows_band: float
    cols_band: float
    settle: float

    def seconds(self, pairs: float, hits: float, band: float, same_set: bool) -> float:
        """The scans' seconds: a query_gallery evaluation scans rows only; a same_set one, half
        of its pairs (hits, band pairs) each way."""
        if not same_set:
            return pairs * self.rows + hits * self.rows_hit + band * self.rows_band
        each_way = (
            pairs * (self.rows + self.cols)
            + hits * (self.rows_hit + self.cols_hit)
            + band * (self.rows_band + self.cols_band)
        )
        return each_way / 2


@dataclass(frozen=True)
class Estimate:
    """One candidate's predicted cost of an evaluation, in seconds, and its sampled band."""

    arithmetic: str
    product_s: float  # the product-only bound: probe speed × multiply-adds
    scan_s: float
    recheck_s: float  # float32 look and exact references of the band
    band_fraction: float  # share of the sample's negative pairs in the band
    hit_fraction: float  # share of them above their query's lowest threshold
    recount_s: float = 0.0  # float32's cost of the chunks whose band overflows (`ranks`)

    @property
    def total_s(self) -> float:
        return self.product_s + self.scan_s + self.recheck_s + self.recount_s

    def describe(self) -> str:
        return (
            f"{self.arithmetic} {self.total_s:.2f} s (product {self.product_s:.2f}, scan "
            f"{self.scan_s:.2f}, re-check {self.recheck_s:.2f}, float32 recount "
            f"{self.recount_s:.2f}; "
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
    n_q, n_g = sets.query.shape[0], sets.gallery.shape[0]
    probe, scans = _arithmetic.probe(device, q.dim), scan_seconds(device, n_g)
    macs = product_macs(sets)
    ordered = n_q * (n_q - 1) if sets.same_set else n_q * n_g  # pairs scanned (each way)
    rows = _spread(n_q, SAMPLE_QUERIES)
    cols = _spread(n_g, SAMPLE_GALLERY)
    thresholds = _sample_thresholds(sets, q, g, rows)
    q_s, g_s = q.subset(rows), g.subset(cols)  # the sample's rows, gathered once
    chunk = min(n_q, q.chunk)  # the evaluator's chunk_size
    units = _query_chunks(sets, rows, chunk)
    out: list[Estimate] = []
    for name in _arithmetic.native(device):
        if not np.isfinite(probe[name]):
            continue  # a candidate this build cannot run
        low = _arithmetic.LOW_DTYPES[name]
        sample = _sample_band(
            sets, q_s.in_dtype(low), g_s.in_dtype(low), rows, cols, thresholds,
            _arithmetic.block(name, device),
        )  # fmt: skip
        whole, negatives = sample, sample.negatives
        share = 0.0  # of the pairs, in chunks recounted in float32 (coarser arithmetics only)
        density = _chunk_density(whole, units)  # each sampled row's chunk's band share
        if name != "float32" and out and out[0].arithmetic == "float32":
            sample, share = _kept(sample, *_recounted(sets, units, density, chunk))
        tiles = _column_tiles(density, units, chunk, share) if sets.same_set else None
        band, checked, hits = sample.band, sample.checked, sample.hits
        scale = ordered / max(negatives, 1)
        # Pairs per gallery row that one chunk's band reads: the more, the more of each read
        # row comes from cache (`_per_pair`).
        counted = max(negatives * (1 - share), 1)  # the negatives of the chunks it counts
        look = _per_pair("look", raw_similarities, q, g, device, band / counted * chunk)
        exact = _per_pair("exact", exact_similarities, q, g, device, checked / counted * chunk)
        looked = band if name != "float32" else 0
        cost = scans[name]
        kept = (1 - share) * ordered
        recount = out[0].total_s * share if share else 0.0  # float32 counts those chunks
        out.append(
            Estimate(
                name,
                product_s=probe[name] / _arithmetic.PROBE_MACS * macs,
                scan_s=cost.seconds(kept, hits * scale, band * scale, sets.same_set)
                + _refill_seconds(cost, sample, n_q, n_g, chunk, tiles),
                recheck_s=(looked * look + checked * exact + band * cost.settle) * scale,
                band_fraction=whole.band_fraction,
                hit_fraction=whole.hits_fraction,
                recount_s=recount,
            )
        )
    return out


def _query_chunks(sets: EvaluationSets, rows: Tensor, chunk: int) -> np.ndarray:
    """The chunk of each sampled row: chunks are runs of `chunk` queries in label order, as
    `ranks` counts them (same_set panels too)."""
    order = torch.argsort(sets.query_labels, stable=True)
    rank = torch.empty_like(order)
    rank[order] = torch.arange(order.numel())
    return (rank[rows] // chunk).numpy()


def _chunk_means(units: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Each sampled row's estimate of its chunk's mean of `values`: the mean of the chunk's
    sampled rows, drawn toward the mean of all of them as far as the sample cannot tell the
    chunks apart (empirical Bayes: the spread of the chunk means against the variance of a mean
    of that many rows, estimated within the chunks). A same_set evaluation of SOP's size has
    ~4 sampled rows a chunk: on `duplicates`, whose rows' int8 band densities range from 0.2 %
    to 6.5 %, their plain means put 9 of 59 chunks over `FALLBACK_SHARE`; no chunk's whole band
    was (1.7-3.6 %). With one sampled row per chunk nothing is drawn: there is no telling."""
    n = int(units.max()) + 1 if units.size else 0
    count, total = np.bincount(units, None, n), np.bincount(units, values, n)
    mean = total / np.maximum(count, 1)
    seen = count > 0
    spare = units.size - int(seen.sum())  # rows beyond one a chunk: the within-chunk evidence
    if spare == 0 or seen.sum() < 2:
        return mean[units]
    within = float(((values - mean[units]) ** 2).sum()) / spare
    noise = within / np.maximum(count, 1)  # the variance of each chunk's sampled mean
    grand = float(values.mean())
    spread = max(0.0, float(((mean[seen] - grand) ** 2).mean() - noise[seen].mean()))
    trust = np.divide(spread, spread + noise, out=np.ones(n), where=spread + noise > 0)
    return (grand + trust * (mean - grand))[units]


def _chunk_density(sample: SampleBand, units: np.ndarray) -> np.ndarray:
    """Each sampled row's estimate of the band share of its chunk (`units`: their chunks), from
    the sampled rows' own band shares (`_chunk_means`)."""
    return _chunk_means(units, sample.per_row / max(sample.per_col.size, 1))


def _recounted(
    sets: EvaluationSets, units: np.ndarray, density: np.ndarray, chunk: int
) -> tuple[np.ndarray, np.ndarray]:
    """(which sampled rows lie in a chunk, or same_set panel, that `ranks` will recount in
    float32 because its band holds more than `ranks.FALLBACK_SHARE` of its pairs; each sampled
    row's pairs, relative), from each row's chunk band share (`_chunk_density`)."""
    n = sets.query_labels.numel()
    weight = (n - units * chunk).astype(np.float64) if sets.same_set else np.ones(units.size)
    return density > FALLBACK_SHARE, weight


def _kept(sample: SampleBand, over: np.ndarray, weight: np.ndarray) -> tuple[SampleBand, float]:
    """(the sample without the rows `over` that float32 recounts, their share of the pairs):
    their band goes, and their sure hits and unsure pairs in proportion."""
    share = float(weight[over].sum() / max(weight.sum(), 1e-12))
    if not over.any():
        return sample, 0.0
    per_row = np.where(over, 0, sample.per_row)
    band = int(per_row.sum())
    kept = band / max(sample.band, 1)
    sure = (sample.hits - sample.band) * (1 - share)
    per_col = np.round(sample.per_col * kept).astype(np.int64)
    checked = round(sample.checked * kept)
    return replace(sample, band=band, checked=checked, hits=round(sure) + band,
                   per_row=per_row, per_col=per_col), share  # fmt: skip


def scan_seconds(device: torch.device, width: int) -> dict[str, ScanCost]:
    """The `ScanCost` of each native arithmetic for blocks `width` columns wide (timed at a
    power of two in `_SCAN_WIDTHS`), once per process, device, thread count and probe width.

    One probe block of scores (`_probe_scores`) is scanned against three sets of thresholds:
    above every score (the pass alone), below the hits and far above the rest (hits, no
    band), and amid the hits with a wide error (every hit in the band); each cost is what its
    set adds to the one before, per pair, hit or band pair. The band is then settled as the
    re-check would, on 16-dimensional rows, whose dot products cost next to nothing.
    """
    width = int(np.clip(1 << max(0, int(width) - 1).bit_length(), *_SCAN_WIDTHS))
    key = (device.type, device.index, torch.get_num_threads(), width)
    if key not in _SCANS:
        tile = _probe_scores(min(width, _SCAN_TILE))
        found = {name: _scan_cost(tile, width, name, device) for name in _arithmetic.native(device)}
        settle_s = found["float32"][1] or 0.0  # float32 is native everywhere
        _SCANS[key] = {name: replace(cost, settle=settle_s) for name, (cost, _) in found.items()}
    return _SCANS[key]


def _probe_scores(width: int) -> Tensor:
    """[`_SCAN_ROWS`, width] float32 similarities: negatives of random unit vectors in 512-D
    (0 ± 0.044), and at random places `_HIT_SHARE` of them at 0.5 ± 0.02."""
    gen = torch.Generator().manual_seed(0)
    scores = torch.randn(_SCAN_ROWS, width, generator=gen) / _arithmetic.PROBE_DIM**0.5
    hit = torch.rand(_SCAN_ROWS, width, generator=gen) < _HIT_SHARE
    scores[hit] = 0.5 + 0.02 * torch.randn(int(hit.sum()), generator=gen)
    return scores


# Thresholds (three per item, ±0.01 around the centre) and error of each probe setting.
# Hits sit at 0.5 ± 0.02, negatives at 0 ± 0.044, so the hits' setting (floor 0.25, 5.7 σ
# above the negatives) has no band and the band's (0.44-0.56) holds every hit.
_PASS, _HITS, _BAND = (0.9, 0.04), (0.3, 0.04), (0.5, 0.05)


def _scan_cost(
    tile: Tensor, w: int, name: str, device: torch.device
) -> tuple[ScanCost, float | None]:
    """(the costs of arithmetic `name`'s scans on the probe block: `tile` of probe scores in
    its readout, repeated to `w` columns, best of three; seconds per band pair of settling the
    band, timed on float32's blocks only, else None). Rows are items 0..R-1 against columns
    0..w-1, a same_set panel: the columns from R on are also scanned as queries."""
    r = tile.shape[0]
    tiny = prepare(torch.ones(64, 16), "probe", low_dtype=_arithmetic.LOW_DTYPES[name],
                   device=device, chunk=64)  # fmt: skip
    shortlist = _arithmetic.block(name, device)(tiny.query, tiny.gallery)
    items = torch.arange(w).repeat_interleave(3)
    offsets = torch.tensor([-0.01, 0.0, 0.01]).repeat(w)
    lowest, highest = _HITS[0] - 0.01 - _HITS[1], _PASS[0] + 0.01 + _PASS[1]
    readout = shortlist.readout(lowest, highest)
    block = _in_readout(tile, readout).repeat(1, -(-w // tile.shape[1]))[:, :w].contiguous()
    timed, settle_s = [], None
    for centre, eps in (_PASS, _HITS, _BAND):
        tab = threshold_tables(items, centre + offsets, w, eps, readout)
        band_r = scan_rows(tab, block, 0)
        sure_r = int(tab.hist.sum())
        band_c = scan_cols(tab, block, r, r)
        assert band_c is not None  # no limit: never refused
        hits_r, hits_c = sure_r + band_r[0].size, int(tab.hist.sum()) - sure_r + band_c[0].size
        best_r = best_c = float("inf")
        for _ in range(3):  # a short timing: the best of three settles it on a busy machine
            start = time.perf_counter()
            scan_rows(tab, block, 0)
            middle = time.perf_counter()
            scan_cols(tab, block, r, r)
            best_r = min(best_r, middle - start)
            best_c = min(best_c, time.perf_counter() - middle)
        timed.append((best_r, best_c, hits_r, hits_c, band_r[0].size, band_c[0].size))
        if centre == _BAND[0] and name == "float32" and band_r[0].size:
            settle_s = _settle_seconds(tab, band_r, w)
    (pass_r, pass_c, *_), (hit_r, hit_c, h_r, h_c, _, _), band = timed
    rows_hit = max(0.0, hit_r - pass_r) / max(h_r, 1)
    cols_hit = max(0.0, hit_c - pass_c) / max(h_c, 1)
    band_r_s, band_c_s, bh_r, bh_c, b_r, b_c = band
    cost = ScanCost(
        rows=pass_r / (r * w),
        cols=pass_c / (r * (w - r)),
        rows_hit=rows_hit,
        cols_hit=cols_hit,
        rows_band=max(0.0, band_r_s - pass_r - bh_r * rows_hit) / max(b_r, 1),
        cols_band=max(0.0, band_c_s - pass_c - bh_c * cols_hit) / max(b_c, 1),
        settle=0.0,
    )
    return cost, settle_s


def _in_readout(scores: Tensor, readout: Readout) -> Tensor:
    """The float32 `scores` as a block of `readout` reads: that dtype, or uint8 levels."""
    if isinstance(readout, Levels):
        levels = torch.round(scores.double() / readout.step) + readout.zero
        return levels.clamp(0, 255).to(torch.uint8)
    return scores.to(readout)


def _settle_seconds(tab: Tables, band: tuple[np.ndarray, np.ndarray], width: int) -> float:
    """Seconds per band pair of `bands.settle`'s bookkeeping: the band settled with a float32
    look on random 16-dimensional rows (its dot products ~3 % of the whole at D = 512)."""
    gen = torch.Generator().manual_seed(1)
    rows = prepare(torch.randn(width, 16, generator=gen), "probe", low_dtype=torch.bfloat16,
                   device=torch.device("cpu"), chunk=4096)  # fmt: skip
    query = torch.arange(_SCAN_ROWS)
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        settle(tab, rows, rows, query, band, None)
        best = min(best, time.perf_counter() - start)
    return best / band[0].size


def _per_pair(
    step: str,
    similarities: Callable,
    q: UnitEmbeddings,
    g: UnitEmbeddings,
    device: torch.device,
    reuse: float,
) -> float:
    """Seconds per pair of `similarities` (the float32 look or the exact reference) in a band
    laid out as one chunk's is: query rows among `_CHUNK_ROWS` of them, each gallery row read by
    about `reuse` pairs in a row (gallery order, as `bands.settle` reads a wide band). Timed on
    the first evaluation of each dimension D and power of two of `reuse` (1 to `_MAX_REUSE`) in
    this process, best of three.

    Reuse decides the cost: a gallery row read once comes from memory, one read by many pairs
    of the chunk from cache. Timed on pairs spread over the whole sets instead (reuse 1
    everywhere), int8's look was estimated 3.6x above what it spent on Market, where its band
    holds ~30 pairs per gallery row and chunk (docs/benchmarks/evaluation.md).
    """
    level = min(_MAX_REUSE, 1 << max(0, round(np.log2(max(reuse, 1.0)))))
    key = (device.type, device.index, torch.get_num_threads(), q.dim, step, level)
    if key not in _RECHECKS:
        pairs = max(1024, _TIMED_MACS // q.dim)
        gen = torch.Generator().manual_seed(0)
        window = torch.randperm(q.raw.shape[0], generator=gen)[:_CHUNK_ROWS]
        q_rows = window[torch.randint(0, window.numel(), (pairs,), generator=gen)]
        read = torch.randint(0, g.raw.shape[0], (-(-pairs // level),), generator=gen)
        g_rows = read.repeat_interleave(level)[:pairs]  # each read row `level` pairs in a row
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


@dataclass(frozen=True)
class SampleBand:
    """What one arithmetic's blocks leave on the sample: band pairs, pairs needing their exact
    reference, hits (negatives at or above their query's floor: sure ones and the band) and
    negative pairs, and the band pairs of each sampled row and column."""

    band: int
    checked: int
    hits: int
    negatives: int
    per_row: np.ndarray
    per_col: np.ndarray

    @property
    def band_fraction(self) -> float:
        return self.band / max(self.negatives, 1)

    @property
    def hits_fraction(self) -> float:
        return self.hits / max(self.negatives, 1)


def _sample_band(
    sets: EvaluationSets,
    q_s: UnitEmbeddings,
    g_s: UnitEmbeddings,
    rows: Tensor,
    cols: Tensor,
    thresholds: tuple[Tensor, Tensor],
    block: Block,
) -> SampleBand:
    """The `SampleBand` of the sample block rows × cols (`q_s` and `g_s` hold those rows),
    scanned and settled as `ranks` does."""
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
    return SampleBand(
        int(band[0].size), checked, sure + int(band[0].size), int((~same).sum()),
        np.bincount(band[0], minlength=rows.numel()), np.bincount(band[1], minlength=cols.numel()),
    )  # fmt: skip


@dataclass(frozen=True)
class ColumnTiles:
    """same_set's column passes as the sample sees them. Panel p scans the later queries in
    tiles of `_scan.TILE` of them (columns) by its chunk of gallery rows, so each sampled row,
    as one of those queries, has the band density of its tile (`density`) and is read by the
    rows of the panels before its chunk (`rows`)."""

    density: np.ndarray
    rows: np.ndarray


def _column_tiles(density: np.ndarray, units: np.ndarray, chunk: int, share: float) -> ColumnTiles:
    """A tile averages the band densities of its queries, a run in label order, so it is taken
    at their chunk's (`density`, from `_chunk_density` of the sample before any row left it): on
    `duplicates`, int8's rows range from 0.2 % to 6.5 % (10th to 90th percentile) and its tiles
    from 1.4 % to 4.3 %, 71 % of them over `TILE_CAP` (judged by single sampled columns, 18 %
    were). Rows that float32 recounts still count: later panels scan them as columns; the
    recounted panels' own column passes (`share` of the pairs) are float32's."""
    return ColumnTiles(density, units * chunk * (1.0 - share))


def _refill_seconds(
    cost: ScanCost, sample: SampleBand, n_q: int, n_g: int, chunk: int, tiles: ColumnTiles | None
) -> float:
    """Seconds of the scans' filling passes: a unit whose band overflows its slots (a row with
    more than `bands.ROW_CAP` band pairs; a column tile with more than `bands.TILE_CAP`) is
    scanned a second time, whole. Each sampled row stands for its share of the queries at its
    own band density; a same_set row is as wide as the panels it lies in (uniform over 0..N),
    and its column tiles are `tiles` (None: query_gallery, which has no column pass).
    On SOP int8 these passes took 0.57 s of the scans' 2.2 s (docs/benchmarks/evaluation.md).
    """
    per_band_hit = sample.hits / max(sample.band, 1)  # hits per band pair: the band's company
    s_q, s_g = sample.per_row.size, sample.per_col.size
    d_rows = sample.per_row / max(s_g, 1)  # band pairs per scanned pair, sampled row by row
    unit_rows = cost.rows + d_rows * (per_band_hit * cost.rows_hit + cost.rows_band)
    if tiles is None:
        over = d_rows * n_g > ROW_CAP
        return float((unit_rows * n_g)[over].sum()) * n_q / max(s_q, 1)
    widest = np.minimum(n_q, ROW_CAP / np.maximum(d_rows, 1e-12))  # wider rows overflow
    rows_s = float((unit_rows * (n_q**2 - widest**2) / (2 * n_q)).sum()) * n_q / max(s_q, 1)
    unit_cols = cost.cols + tiles.density * (per_band_hit * cost.cols_hit + cost.cols_band)
    over = tiles.density * chunk * _scan.TILE > TILE_CAP
    cols_s = float((unit_cols * tiles.rows)[over].sum()) * n_q / max(s_q, 1)
    return rows_s + cols_s
