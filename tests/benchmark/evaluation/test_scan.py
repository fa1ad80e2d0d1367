"""The compiled scans behind RetrievalEvaluator: key order, floors (bfloat16 and float32 blocks),
rounding bounds, and exact metrics on blocks wider than a column tile, with long positive lists
and overflowing band slots."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from benchmark.evaluation import _scan
from benchmark.evaluation import bands as _bands
from benchmark.evaluation.similarity import output_error
from tests.benchmark.evaluation.conftest import evaluator


def keys_of_float32(x: torch.Tensor) -> np.ndarray:
    b = x.view(torch.int32).to(torch.int64).numpy()
    return np.where(b >= 0, b, -(2**31) - b)


def test_keys_order_like_the_values_and_zeros_tie() -> None:
    values = torch.tensor([-torch.inf, -2.0, -1e-30, -0.0, 0.0, 1e-30, 0.5, 1.0, torch.inf])
    keys = keys_of_float32(values)
    assert (np.diff(keys) >= 0).all()
    assert keys[3] == keys[4] == 0  # -0 and +0
    assert (np.diff(keys)[[0, 1, 2, 4, 5, 6, 7]] > 0).all()


def test_ceil_keys_give_the_smallest_float32_at_or_above() -> None:
    x = torch.tensor([0.1, -0.1, 0.25, -0.0, 1 / 3, -2 / 3], dtype=torch.float64)
    keys = _bands._ceil_keys(x)
    for value, key in zip(x.tolist(), keys.tolist(), strict=True):
        up = np.float32(value)
        if float(up) < value:
            up = np.nextafter(up, np.float32(np.inf))
        assert key == keys_of_float32(torch.tensor([up]))[0]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_native_floors_select_exactly_the_scores_that_can_reach_the_floor(dtype) -> None:
    gen = torch.Generator().manual_seed(0)
    scores = (torch.randn(5000, generator=gen) * 0.5).to(dtype)
    scores[:4] = torch.tensor([0.0, -0.0, torch.inf, -torch.inf])
    shift = 16 if dtype == torch.bfloat16 else 0
    raw = scores.view(torch.int16 if shift else torch.int32).to(torch.int64).numpy()
    keys = keys_of_float32(scores.float())
    floor_values = torch.tensor([0.3, 1e-3, 0.0, -0.2, 0.123456789], dtype=torch.float64)
    floors = np.append(_bands._ceil_keys(floor_values), np.iinfo(np.int64).max)  # + empty
    native = _scan.native_floors(floors, np.dtype(np.int16 if shift else np.int32), shift)
    for f, n in zip(floors, native, strict=True):
        reach = keys >= f
        assert not (reach & (raw < n)).any()  # nothing that reaches the floor is skipped
        if f > 0:
            assert (reach == (raw >= n)).all()  # and for a positive floor nothing else is kept


def test_bfloat16_output_bound_decides_each_side_correctly() -> None:
    """Rounding to bfloat16 never moves a value across t ± output_error(t) (ε_in = 0)."""
    gen = torch.Generator().manual_seed(1)
    t = torch.cat([torch.rand(300, generator=gen) * 2 - 1, torch.tensor([0.25, 0.5, -0.5])])
    bound = output_error(torch.bfloat16, t.double(), 0.0)
    assert bound.max() <= 2.0**-8 and bound.min() >= 2.0**-16
    for ti, ei in zip(t.double().tolist(), bound.tolist(), strict=True):
        v = torch.linspace(ti - 0.05, ti + 0.05, 4001, dtype=torch.float64)
        rounded = v.float().bfloat16().double()  # the product's float32 value, then its output
        exact = v.float().double()
        assert (exact[rounded >= ti + ei] >= ti).all()
        assert (exact[rounded < ti - ei] < ti).all()


def sorted_positions(sims: np.ndarray, relevant: np.ndarray, excluded: np.ndarray) -> list:
    """1-based positions of the relevant items per query from a full sort (ties: negatives
    first), excluded items dropped."""
    out = []
    for s, rel, exc in zip(sims, relevant, excluded, strict=True):
        keep = ~exc
        order = np.lexsort((rel[keep], -s[keep]))
        out.append(np.flatnonzero(rel[keep][order]) + 1)
    return out


def metrics_from_positions(positions: list, ks) -> dict[str, float]:
    rows = []
    for p in positions:
        if p.size == 0:
            continue
        r, k = p.size, np.arange(1, p.size + 1)
        row = {f"R@{kk}": float(p[0] <= kk) for kk in ks}
        row["mAP"] = float((k / p).mean())
        row["MAP@R"] = float((k / p * (p <= r)).sum() / r)
        row["R-Precision"] = float((p <= r).sum() / r)
        row["mINP"] = float(r / p[-1])  # R over the position of the hardest positive
        rows.append(row)
    return {key: float(np.mean([row[key] for row in rows])) for key in rows[0]}


def wide_case(seed: int, classes: int, ties: bool, n: int = 700, dim: int = 8):
    gen = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, classes, (n,), generator=gen)
    if ties:  # entries in {-1, 0, 1}: exact ties and duplicates
        emb = torch.randint(-1, 2, (n, dim), generator=gen).float()
        emb[(emb == 0).all(1), 0] = 1.0
    else:
        emb = torch.randn(classes, dim, generator=gen)[labels] + torch.randn(n, dim, generator=gen)
    unit = emb / torch.linalg.vector_norm(emb, dim=1, dtype=torch.float64).float()[:, None]
    sims = (unit.double() @ unit.double().T).float().numpy()
    return emb, labels, sims


@pytest.mark.parametrize("path", ["faiss", "bfloat16", "float32"], indirect=True)
@pytest.mark.parametrize("ties", [False, True], ids=["continuous", "ties"])
@pytest.mark.parametrize("classes", [4, 150], ids=["long-lists", "short-lists"])
def test_wide_blocks_and_overflowing_band_slots_stay_exact(
    monkeypatch: pytest.MonkeyPatch, path: str, ties: bool, classes: int
) -> None:
    """700 items: several panels, column tiles of 256 and a ragged last tile; 4 classes give
    positive lists longer than the linear search; one band slot forces the filling passes."""
    emb, labels, sims = wide_case(3, classes, ties)
    lab = labels.numpy()
    ks = (1, 5, 50)
    same = sorted_positions(sims, lab[:, None] == lab[None, :], np.eye(len(lab), dtype=bool))
    expected_same = metrics_from_positions(same, ks)
    q, g = slice(0, 200), slice(200, None)
    cams = torch.arange(len(lab)) % 3
    c = cams.numpy()
    same_cam = (lab[q, None] == lab[None, g]) & (c[q, None] == c[None, g])
    qg = sorted_positions(sims[q, g], lab[q, None] == lab[None, g], same_cam)
    qg = [p for p, row in zip(qg, (lab[q, None] == lab[None, g]) & ~same_cam, strict=True)
          if row.any()]  # fmt: skip
    expected_qg = metrics_from_positions(qg, ks)
    for cap in (None, 1):
        if cap:
            monkeypatch.setattr(_bands, "ROW_CAP", cap)
            monkeypatch.setattr(_bands, "TILE_CAP", cap)
        ev = evaluator("same_set", ks, path=path, chunk_size=96)
        assert ev.evaluate(emb, labels) == pytest.approx(expected_same, abs=1e-12)
        ev = evaluator("query_gallery", ks, path=path, chunk_size=64)
        got = ev.evaluate(emb[q], labels[q], emb[g], labels[g], cams[q], cams[g])
        assert got == pytest.approx(expected_qg, abs=1e-12)


def _fake_kernel(pairs: dict[int, list[int]]):
    """A scan kernel with the compiled ones' contract over units whose band is `pairs[u]`:
    counting (fill False) keeps the first `cap` of unit sel[k] in slots k·cap.., filling writes
    all of them from offset band_n[k]."""

    def kernel(sel, cap, band_n, band_q, band_g, fill):
        for k, unit in enumerate(sel):
            for j, col in enumerate(pairs.get(int(unit), [])):
                at = band_n[k] + j if fill else k * cap + j
                if fill or j < cap:
                    band_q[at], band_g[at] = unit, col
            if not fill:
                band_n[k] = len(pairs.get(int(unit), []))

    return kernel


def _as_set(band) -> set[tuple[int, int]]:
    return set(zip(band[0].tolist(), band[1].tolist(), strict=True))


def test_a_band_limit_is_judged_on_units_spread_over_the_block() -> None:
    """Units run in label order: a crowded first class must not send a sparse block to the
    fallback, a block dense throughout must go, and the pairs are those of the unlimited scan,
    refilled units included."""
    n, cap, width = 640, 4, 100
    crowded_head = {u: list(range(60)) for u in range(32)}  # 60 % of the first 32 rows' pairs
    crowded_head.update({u: [u % width] for u in range(32, n)})
    limit = int(0.05 * n * width)  # 3,200: the whole band (2,528 pairs) is below it
    whole = _bands._band_pairs(_fake_kernel(crowded_head), n, cap, (), None)
    assert whole is not None and len(whole[0]) == 32 * 60 + n - 32
    got = _bands._band_pairs(_fake_kernel(crowded_head), n, cap, (), limit)
    assert got is not None and _as_set(got) == _as_set(whole) and len(got[0]) == len(whole[0])
    dense = {u: list(range(10)) for u in range(n)}  # 10 % everywhere
    assert _bands._band_pairs(_fake_kernel(dense), n, cap, (), limit) is None
    order = _bands._spread_order(100)
    assert sorted(order.tolist()) == list(range(100))
    for k in range(1, 7):  # the first 2^k units touch at least half of 2^k equal bins
        assert len(set((order[: 2**k] * 2**k // 100).tolist())) >= 2 ** (k - 1)
    assert order[:4].tolist() == [0, 64, 32, 96]


def test_a_scan_stops_early_only_when_its_first_units_are_surely_over_the_limit() -> None:
    """32 units are a noisy sample: crowded and sparse rows that average over the limit leave
    the decision to more units, or the whole count (on MSMT17, 32 rows put 4 of 12 chunks over
    5 % whose whole band held under 4.5 %); 32 alike rows over it stop the scan there."""
    n, cap, width = 640, 8, 100
    order = _bands._spread_order(n)
    head = {int(u): k for k, u in enumerate(order[: _bands._HEAD])}
    limit = int(0.05 * n * width)
    mixed = {u: list(range(14 * (head[u] % 2) if u in head else 3)) for u in range(n)}
    got = _bands._band_pairs(_fake_kernel(mixed), n, cap, (), limit)  # head 7 %, whole 3.2 %
    assert got is not None and len(got[0]) == 14 * 16 + 3 * (n - 32)
    scanned = []
    alike = _fake_kernel({u: list(range(7)) for u in range(n)})  # 7 % in every unit

    def counting(*args):
        scanned.append(len(args[0]))
        alike(*args)

    assert _bands._band_pairs(counting, n, cap, (), limit) is None and scanned == [32]
